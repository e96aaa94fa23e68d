// Measured feedback on served plans: what the training ranks report
// (ReportMeasurement) is aggregated per run, compared with the DDP-bucket
// baseline measured on the same ranks, and turned into the cluster's
// calibration factor. Who may report, and what a verdict changes, is
// server/feedback.h's.
//
// Aggregation. An iteration of data-parallel training ends when its slowest
// rank does, so per iteration index the value is the maximum over the
// reported ranks (over the iterations every rank reported: RunAggregate);
// the measured iteration time is the median of those values, and the same
// for the baseline when every reported rank measured it.
//
// Rollback. With the baseline's times interleaved with the plan's, each
// iteration gives a paired difference d_i = plan_i - baseline_i. When at
// least kMinRollbackPairs pairs exist and the 95% distribution-free
// confidence interval of their median (base/stats.h
// MedianConfidenceInterval) lies above 0, the plan lost to the baseline
// beyond the measured spread. With fewer pairs no interval at 95% exists
// (it would be the whole range), so nothing is rolled back. Only a complete
// run (every rank of the job) is judged: until then the slowest rank may be
// missing.
//
// Calibration. Per cluster and job kind (data-parallel with op fusion,
// buckets only, parallel: their errors differ), the median over the newest
// measured plans (one value per (job, plan), rolled-back plans excluded) of
// measured / predicted. The simulator's errors are largely multiplicative
// and shared by every plan of a kind on a cluster (kernel efficiency,
// launch overheads, the comm model's bandwidths), so one factor corrects
// the absolute figures users plan with (calibrated_iteration_s). The median
// in log space is robust: one tenant's outlier cannot move it far, and
// plans measured more than kMaxCalibrationRatio away from their prediction
// either way are not samples at all (they count for their job only). A
// uniform factor does not change which candidate the search picks, so the
// search keeps using the raw cost model.
//
//   AggregatedTimes a = Aggregated(run_aggregate);
//   std::optional<RollbackVerdict> v = JudgeRollback(a, world_size, source);
//   double c = Calibration(store.CalibrationSamples(cluster_fp, kind, 256).value());
#ifndef BRAID_SERVER_PLAN_FEEDBACK_H_
#define BRAID_SERVER_PLAN_FEEDBACK_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stats.h"
#include "server/store.h"

namespace braid::server {

inline constexpr int kMinRollbackPairs = 6;
inline constexpr double kRollbackConfidence = 0.95;

// Limits on a ReportMeasurementRequest (InvalidArgument naming the field
// outside them). No training iteration takes less than a microsecond: a
// shorter time (a denormal, say) is not a measurement.
inline constexpr int kMaxWorldSize = 65536;
inline constexpr int kMaxReportedIterations = 10000;
inline constexpr double kMinIterationS = 1e-6;
inline constexpr double kMaxIterationS = 3600;
inline constexpr int kMaxSourceBytes = 128;
// A plan measured more than this factor away from its prediction (either
// way) counts for its job but does not calibrate the cluster.
inline constexpr double kMaxCalibrationRatio = 10;
// The newest measured plans a calibration is taken over.
inline constexpr int kCalibrationSamples = 256;

// One rank's report, validated (StrategyApi::ReportMeasurement).
struct MeasurementReport {
  std::string job_id;
  int rank = 0;
  int world_size = 1;
  std::string plan_sha256;  // lowercase hex; empty: the plan the job is served
  std::vector<double> plan_s;
  std::vector<double> baseline_s;  // empty or paired with plan_s
  std::string source;
  std::string credential;  // the job's report credential
  std::string attempt_id;  // StartRun's
  std::string peer;        // the caller's address (audit, rate limit)
};

// A StartRun request, validated.
struct RunRequest {
  std::string job_id;
  std::string credential;
  int world_size = 0;
  std::string source;
  std::string peer;
};

struct MeasurementOutcome {
  int ranks_reported = 0;
  double measured_s = 0;
  double baseline_s = 0;  // 0: not measured
  double predicted_s = 0;
  bool rolled_back = false;  // the job's plan is rolled back (now or before)
  std::string rollback_reason;
  double calibration = 0;
};

struct AggregatedTimes {
  int ranks_reported = 0;
  std::vector<double> plan_s;      // per iteration, the slowest reported rank
  std::vector<double> baseline_s;  // same; empty unless every rank measured it
  double measured_s = 0;           // median of plan_s
  double baseline_median_s = 0;    // median of baseline_s; 0 when empty
};

// The figures of one run's aggregate.
AggregatedTimes Aggregated(const RunAggregate& run);

struct RollbackVerdict {
  MedianInterval difference;  // of plan - baseline per iteration, seconds
  int pairs = 0;
  std::string reason;  // "measured 12.30 ms vs ddp 10.10 ms on 2 ranks: slower by ..."
};

// The verdict when the plan lost to the baseline beyond the measured spread
// (see above); nullopt when it did not or cannot be judged (no baseline,
// fewer than kMinRollbackPairs pairs).
std::optional<RollbackVerdict> JudgeRollback(const AggregatedTimes& a, int world_size,
                                             std::string_view source);

// A rollback reason as `job_id` sees it: prefixed with the job whose ranks
// measured it when that is another job (jobs of a key share the cached plan).
std::string RollbackReasonFor(const std::string& job_id, const std::string& rollback_job,
                              const std::string& reason);

// The median of measured / predicted (in log space) over the plausible plans
// not rolled back with both figures positive; 0 when there are none.
double Calibration(std::span<const MeasuredPlan> plans);

// Whether measured / predicted is within kMaxCalibrationRatio either way.
bool PlausibleForCalibration(double measured_s, double predicted_s);

// The calibration kind of a job's options: "parallel", "buckets" (no op
// fusion) or "fused".
std::string JobKind(const JobOptions& options);

}  // namespace braid::server

#endif  // BRAID_SERVER_PLAN_FEEDBACK_H_
