#include "server/status_json.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "search/lowering.h"
#include "search/plan.h"
#include "server/job_graph.h"
#include "server/plan_feedback.h"

namespace braid::server {

namespace {

nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
// Measured figures: 0 means "not reported".
nlohmann::json MeasuredOrNull(double v) { return v > 0 ? Num(v) : nlohmann::json(); }
// Plans stored before compute and comm were kept have -1.
nlohmann::json KnownOrNull(double v) { return v >= 0 ? Num(v) : nlohmann::json(); }

}  // namespace

nlohmann::json JobJson(const JobRecord& r) {
  const double eta = IsFinal(r.phase) ? 0 : std::max(0.0, r.options.budget_s - r.elapsed_s);
  nlohmann::json parallel;  // null: not a parallel job, or not planned yet
  if (!r.parallel_strategy.empty()) {
    parallel = {{"strategy", r.parallel_strategy},
                {"data_degree", r.parallel_data_degree},
                {"model_degree", r.parallel_model_degree},
                {"d_x_m", absl::StrCat(r.parallel_data_degree, " x ", r.parallel_model_degree)}};
  }
  return {{"id", r.id},
          {"name", r.name},
          {"phase", std::string(JobPhaseName(r.phase))},
          {"error", r.error},
          {"best_cost_s", Num(r.best_cost_s)},
          {"candidates_evaluated", r.candidates},
          {"elapsed_s", Num(r.elapsed_s)},
          {"eta_s", Num(eta)},
          {"budget_s", Num(r.options.budget_s)},
          {"from_cache", r.from_cache},
          {"recosted", r.recosted},
          {"resumed", r.resumed},
          {"created_unix_s", r.created_unix_s},
          {"graph_fingerprint", r.graph_fingerprint},
          {"cluster_fingerprint", r.cluster_fingerprint},
          {"ranks", r.options.ranks},
          {"predicted_iteration_s", MeasuredOrNull(r.measured_predicted_s)},
          {"measured_iteration_s", MeasuredOrNull(r.measured_s)},
          {"measured_baseline_s", MeasuredOrNull(r.measured_baseline_s)},
          {"rolled_back", r.rolled_back},
          {"rollback_reason", RollbackReasonFor(r.id, r.rollback_job, r.rollback_reason)},
          {"parallel_requested", r.options.parallel},
          {"parallel", std::move(parallel)}};
}

absl::StatusOr<nlohmann::json> PlanSummaryJson(const PlanRecord& p) {
  nlohmann::json stored =
      base::ParseBoundedJsonOrDiscarded(p.baselines_json, base::kPlanJsonLimits);
  if (!stored.is_array()) return absl::DataLossError("stored baselines JSON is malformed");
  nlohmann::json baselines = nlohmann::json::array();
  for (const nlohmann::json& b : stored) {
    if (!b.is_object() || !b.contains("name") || !b.contains("iteration_s")) {
      return absl::DataLossError("stored baseline entry lacks name or iteration_s");
    }
    baselines.push_back({{"name", b["name"]},
                         {"iteration_s", b["iteration_s"]},
                         {"compute_s", b.value("compute_s", nlohmann::json())},
                         {"comm_s", b.value("comm_s", nlohmann::json())},
                         {"overlap_ratio", b.value("overlap_ratio", nlohmann::json())}});
  }
  const bool known = p.compute_s >= 0 && p.comm_s >= 0 && p.predicted_s > 0;
  return nlohmann::json{
      {"origin", p.origin},
      {"iteration_s", Num(p.predicted_s)},
      {"compute_s", KnownOrNull(p.compute_s)},
      {"comm_s", KnownOrNull(p.comm_s)},
      {"overlap_ratio", known ? Num((p.compute_s + p.comm_s) / p.predicted_s) : nlohmann::json()},
      {"fo_bound_s", Num(p.fo_bound_s)},
      {"generation", p.generation},
      {"rolled_back", p.rolled_back},
      {"rollback_reason", p.rollback_reason},
      {"baselines", std::move(baselines)}};
}

nlohmann::json HistoryJson(const std::vector<ProgressPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const ProgressPoint& p : points) {
    out.push_back(nlohmann::json::array({Num(p.elapsed_s), Num(p.best_cost_s), p.candidates}));
  }
  return out;
}

nlohmann::json WorkerJson(const WorkerRecord& w, double now_unix_s, double timeout_s) {
  const double age = now_unix_s - w.last_heartbeat_unix_s;
  return {{"id", w.id},
          {"name", w.name},
          {"device_kind", w.device_kind},
          {"slots", w.slots},
          {"last_heartbeat_unix_s", Num(w.last_heartbeat_unix_s)},
          {"heartbeat_age_s", Num(age)},
          {"live", age <= timeout_s}};
}

nlohmann::json GanttJson(const costmodel::SimGraph& g, const costmodel::SimResult& r,
                         int max_tasks) {
  nlohmann::json lanes = nlohmann::json::array();
  for (int d = 0; d < g.num_devices; ++d) lanes.push_back(absl::StrCat("compute ", d));
  for (int c = 0; c < g.num_channels; ++c) lanes.push_back(absl::StrCat("comm ", c));
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(g.tasks.size()); ++i) {
    if (i < static_cast<int>(r.end_s.size()) && std::isfinite(r.end_s[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return r.start_s[a] < r.start_s[b]; });
  const int total = static_cast<int>(order.size());
  if (total > max_tasks) order.resize(std::max(0, max_tasks));
  nlohmann::json tasks = nlohmann::json::array();
  for (int i : order) {
    const costmodel::SimTask& t = g.tasks[i];
    const int lane =
        t.kind == costmodel::TaskKind::kCompute ? t.resource : g.num_devices + t.resource;
    tasks.push_back(nlohmann::json::array({lane, r.start_s[i], r.end_s[i], t.name}));
  }
  return {{"iteration_s", Num(r.iteration_s)},
          {"lanes", std::move(lanes)},
          {"tasks", std::move(tasks)},
          {"task_count", total},
          {"truncated", total > max_tasks}};
}

absl::StatusOr<JobTimeline> SimulateJobPlan(Store& store, costmodel::ProfileStore* profiles,
                                            const JobRecord& job, int max_gantt_tasks) {
  if (job.phase != JobPhase::kDone) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id, " is ", std::string(JobPhaseName(job.phase)), ": no plan"));
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> plan, store.GetPlan(job.plan_key));
  if (!plan.has_value()) {
    return absl::DataLossError(absl::StrCat("job ", job.id, " is done but its plan is missing"));
  }
  ASSIGN_OR_RETURN(StoredJobGraph jg, LoadJobGraph(store, job));
  const graph::Graph& train = jg.training;
  const costmodel::ClusterSpec& cluster = jg.cluster;
  nlohmann::json plan_json =
      base::ParseBoundedJsonOrDiscarded(plan->plan_json, base::kPlanJsonLimits);
  if (plan_json.is_discarded()) return absl::DataLossError("stored plan JSON is malformed");
  absl::StatusOr<search::Plan> p = search::PlanFromJson(train, plan_json);
  if (!p.ok()) return absl::DataLossError(absl::StrCat("stored plan: ", p.status().message()));
  ASSIGN_OR_RETURN(costmodel::CommModel comm, costmodel::CommModelFromStore(cluster, profiles));
  costmodel::ClusterCostModel base(cluster, profiles, nullptr, std::move(comm));
  // A parallel job's per-device graph: buckets priced on its data group.
  JobCostModel jcm(base, cluster, jg.parallel);
  costmodel::CostModel& cm = jcm.get();
  ASSIGN_OR_RETURN(costmodel::SimGraph sg, search::Lower(train, *p, cm));
  const costmodel::SimResult r = costmodel::Simulate(sg);
  JobTimeline out;
  out.gantt = GanttJson(sg, r, max_gantt_tasks);
  out.gantt["generation"] = cm.Generation();
  out.chrome_trace = costmodel::ChromeTrace(sg, r);
  return out;
}

}  // namespace braid::server
