// JSON views for the HTTP status API (server/http_status.h): jobs, their
// plans' baseline tables, workers, and the simulated timeline of a finished
// job's plan (a compact Gantt of compute and comm lanes plus the Chrome
// trace). Units are seconds (_s) and unix seconds (_unix_s), as in
// proto/braid/v1/strategy.proto.
//
//   nlohmann::json j = JobJson(record);
//   j["plan"] = PlanSummaryJson(*plan_record);
//   absl::StatusOr<JobTimeline> t = SimulateJobPlan(store, profiles, record);
#ifndef BRAID_SERVER_STATUS_JSON_H_
#define BRAID_SERVER_STATUS_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "costmodel/sim_graph.h"
#include "costmodel/simulator.h"
#include "nlohmann/json.hpp"
#include "server/job_history.h"
#include "server/store.h"

namespace braid::server {

// {"id", "name", "phase", "error", "best_cost_s", "candidates_evaluated",
//  "elapsed_s", "eta_s", "budget_s", "from_cache", "recosted", "resumed",
//  "created_unix_s", "graph_fingerprint", "cluster_fingerprint", "ranks",
//  "predicted_iteration_s", "measured_iteration_s", "measured_baseline_s"
//  (what the training ranks reported, null until they did), "rolled_back",
//  "rollback_reason", "parallel_requested" (options.parallel), "parallel":
//  {"strategy", "data_degree", "model_degree", "d_x_m"} once a parallel
//  job is planned, else null}. Non-finite numbers become null.
nlohmann::json JobJson(const JobRecord& r);

// {"origin", "iteration_s", "compute_s", "comm_s", "overlap_ratio" (braid's
//  plan; the last three null for plans stored before they were kept),
//  "fo_bound_s", "generation", "rolled_back", "rollback_reason",
//  "baselines": [{"name", "iteration_s", "compute_s", "comm_s",
//  "overlap_ratio"}]}. DataLoss when the stored baselines are not JSON.
absl::StatusOr<nlohmann::json> PlanSummaryJson(const PlanRecord& p);

// [[elapsed_s, best_cost_s, candidates], ...]
nlohmann::json HistoryJson(const std::vector<ProgressPoint>& points);

// {"id", "name", "device_kind", "slots", "last_heartbeat_unix_s",
//  "heartbeat_age_s", "live"}: live when the heartbeat is at most
//  `timeout_s` old at `now_unix_s`.
nlohmann::json WorkerJson(const WorkerRecord& w, double now_unix_s, double timeout_s);

// {"iteration_s", "lanes": ["compute 0", ..., "comm 0", ...],
//  "tasks": [[lane, start_s, end_s, name], ...] (by start time, at most
//  `max_tasks`), "task_count", "truncated"}. Compute lanes (one per device)
//  come first, then one lane per channel.
nlohmann::json GanttJson(const costmodel::SimGraph& g, const costmodel::SimResult& r,
                         int max_tasks);

struct JobTimeline {
  nlohmann::json gantt;      // GanttJson
  std::string chrome_trace;  // costmodel::ChromeTrace
};

// Rebuilds a done job's training graph and cluster from the store, lowers
// its stored plan with the current cost model (`profiles` may be null:
// priors only) and simulates one iteration. FailedPrecondition unless the
// job is done; DataLoss when stored pieces do not parse.
absl::StatusOr<JobTimeline> SimulateJobPlan(Store& store, costmodel::ProfileStore* profiles,
                                            const JobRecord& job, int max_gantt_tasks);

}  // namespace braid::server

#endif  // BRAID_SERVER_STATUS_JSON_H_
