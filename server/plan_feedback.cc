#include "server/plan_feedback.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace braid::server {

AggregatedTimes Aggregated(const RunAggregate& run) {
  AggregatedTimes a;
  a.ranks_reported = run.ranks_reported;
  a.plan_s = run.plan_max;
  if (run.baseline_ranks == run.ranks_reported && run.baseline_max.size() == run.plan_max.size()) {
    a.baseline_s = run.baseline_max;
  }
  a.measured_s = Summarize(a.plan_s).median_s;
  a.baseline_median_s = Summarize(a.baseline_s).median_s;
  return a;
}

std::optional<RollbackVerdict> JudgeRollback(const AggregatedTimes& a, int world_size,
                                             std::string_view source) {
  if (a.baseline_s.size() != a.plan_s.size() ||
      static_cast<int>(a.plan_s.size()) < kMinRollbackPairs) {
    return std::nullopt;
  }
  std::vector<double> d(a.plan_s.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = a.plan_s[i] - a.baseline_s[i];
  RollbackVerdict v;
  v.pairs = static_cast<int>(d.size());
  v.difference = MedianConfidenceInterval(std::move(d), kRollbackConfidence);
  if (!(v.difference.low > 0)) return std::nullopt;
  v.reason = absl::StrFormat(
      "measured %.2f ms vs ddp %.2f ms on %d rank%s: slower by %.2f ms (%.0f%% CI [%.2f, %.2f])",
      a.measured_s * 1e3, a.baseline_median_s * 1e3, world_size, world_size == 1 ? "" : "s",
      v.difference.median * 1e3, kRollbackConfidence * 100, v.difference.low * 1e3,
      v.difference.high * 1e3);
  if (!source.empty()) absl::StrAppend(&v.reason, " (", std::string(source), ")");
  return v;
}

std::string RollbackReasonFor(const std::string& job_id, const std::string& rollback_job,
                              const std::string& reason) {
  if (reason.empty() || rollback_job.empty() || rollback_job == job_id) return reason;
  return absl::StrCat("job ", rollback_job, ": ", reason);
}

double Calibration(std::span<const MeasuredPlan> plans) {
  std::vector<double> logs;
  for (const MeasuredPlan& p : plans) {
    if (p.rolled_back || !p.plausible || !(p.measured_s > 0) || !(p.predicted_s > 0)) continue;
    if (!PlausibleForCalibration(p.measured_s, p.predicted_s)) continue;
    logs.push_back(std::log(p.measured_s / p.predicted_s));
  }
  if (logs.empty()) return 0;
  return std::exp(Summarize(std::move(logs)).median_s);
}

bool PlausibleForCalibration(double measured_s, double predicted_s) {
  if (!(measured_s > 0) || !(predicted_s > 0)) return false;
  const double r = measured_s / predicted_s;
  return std::isfinite(r) && r <= kMaxCalibrationRatio && r >= 1 / kMaxCalibrationRatio;
}

std::string JobKind(const JobOptions& o) {
  if (o.parallel) return "parallel";
  return o.op_fusion ? "fused" : "buckets";
}

}  // namespace braid::server
