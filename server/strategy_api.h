// The Strategy service's logic as a plain C++ class (no gRPC types besides
// the messages): validates every request field -- InvalidArgument naming the
// field -- imports the model, and delegates to the JobManager. The gRPC
// service (server/services.h) only authenticates and forwards.
//
//   StrategyApi api(&jobs);
//   absl::StatusOr<braid::v1::SubmitGraphResponse> r = api.SubmitGraph(request);
#ifndef BRAID_SERVER_STRATEGY_API_H_
#define BRAID_SERVER_STRATEGY_API_H_

#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "braid/v1/strategy.pb.h"
#include "search/backtracking.h"
#include "server/job_manager.h"
#include "server/plan_feedback.h"

namespace braid::server {

// Limits on SearchOptions and on the model; a request outside them is
// InvalidArgument naming the field. `braid plan` applies the same option
// limits to its flags. Why these values:
//  alpha     [1, 10]     pruning factor (DisCo: 1.05); beyond 10 nothing is
//                        pruned that the bounded queue would not drop anyway
//                        (search::kMaxAlpha).
//  beta      [1, 1000]   applications per method and step (DisCo: 10); bounds
//                        the work of one step (search::kMaxBeta).
//  patience  [1, 10^7]   steps without improvement (DisCo: 1000); the budget
//                        bounds the run time, this only keeps the value sane.
//  budget_s  (0, 86400]  wall time for the whole search, baselines included.
//  model     at most kMaxForwardOps forward ops (the training graph has 2-4x
//            as many): the work a search does between two stop checks (one
//            contraction phase, 256 costed tasks) then stays far below a
//            second, and costing a whole plan near one, so cancel and
//            shutdown take effect within 2 s and the budget is kept closely.
inline constexpr double kMaxAlpha = search::kMaxAlpha;
inline constexpr int kMaxBeta = search::kMaxBeta;
inline constexpr int kMaxPatience = 10'000'000;
inline constexpr double kMaxBudgetS = 24 * 3600;
inline constexpr int kMaxForwardOps = 50'000;
inline constexpr int kMaxNameBytes = 256;
// options.strategy_row: the longest row name is 17 bytes ("braid:substituted").
inline constexpr int kMaxStrategyRowBytes = 64;

// The request's model, cluster and options, validated.
absl::StatusOr<SubmitRequest> ParseSubmitRequest(const braid::v1::SubmitGraphRequest& req);

braid::v1::JobStatus JobStatusToProto(const JobRecord& r);
braid::v1::JobPhase JobPhaseToProto(JobPhase p);
// The response for a finished job's plan (plan JSON parsed into the proto),
// with its plan_sha256 (proto/plan_digest.h PlanDigest) and rollback state;
// the calibration is the caller's (SetCalibration).
absl::StatusOr<braid::v1::GetPlanResponse> PlanToProto(const JobRecord& job, const JobPlan& plan);
// calibration and calibrated_iteration_s (= predicted x calibration; 0 when
// the calibration is 0: nothing measured on the cluster).
void SetCalibration(double calibration, braid::v1::GetPlanResponse* r);
// The request's fields, validated: InvalidArgument naming the field
// (limits in server/plan_feedback.h); plan_sha256 lowercased.
absl::StatusOr<MeasurementReport> ParseMeasurementRequest(
    const braid::v1::ReportMeasurementRequest& req);
absl::StatusOr<RunRequest> ParseStartRunRequest(const braid::v1::StartRunRequest& req);
braid::v1::RollbackEntry RollbackToProto(const RollbackRecord& r);

class StrategyApi {
 public:
  explicit StrategyApi(JobManager* jobs) : jobs_(jobs) {}

  absl::StatusOr<braid::v1::SubmitGraphResponse> SubmitGraph(
      const braid::v1::SubmitGraphRequest& req);
  absl::StatusOr<braid::v1::JobStatus> GetJob(const braid::v1::GetJobRequest& req);
  absl::StatusOr<braid::v1::GetPlanResponse> GetPlan(const braid::v1::GetPlanRequest& req);
  absl::StatusOr<braid::v1::JobStatus> CancelJob(const braid::v1::CancelJobRequest& req);
  absl::StatusOr<braid::v1::ListJobsResponse> ListJobs(const braid::v1::ListJobsRequest& req);
  // A training rank's measured iteration times (JobManager::ReportMeasurement);
  // `peer`: the caller's address (rate limit, audit).
  absl::StatusOr<braid::v1::ReportMeasurementResponse> ReportMeasurement(
      const braid::v1::ReportMeasurementRequest& req, const std::string& peer = "");
  absl::StatusOr<braid::v1::StartRunResponse> StartRun(const braid::v1::StartRunRequest& req,
                                                       const std::string& peer = "");
  absl::StatusOr<braid::v1::ListRollbacksResponse> ListRollbacks(
      const braid::v1::ListRollbacksRequest& req);
  // Operator calls: the caller checked the admin token; `actor` names the
  // operator in the audit log.
  absl::StatusOr<braid::v1::RollbackActionResponse> RestorePlan(
      const braid::v1::RestorePlanRequest& req, const std::string& actor);
  absl::StatusOr<braid::v1::RollbackActionResponse> ConfirmRollback(
      const braid::v1::ConfirmRollbackRequest& req, const std::string& actor);

  JobManager* jobs() { return jobs_; }

 private:
  JobManager* jobs_;
  // Responses of finished jobs, newest kPlanMemo kept, so a cached plan is
  // served without SQLite or JSON work. Cleared when a measurement report
  // may have changed them (JobManager::FeedbackVersion: rollbacks,
  // calibration).
  static constexpr size_t kPlanMemo = 256;
  std::mutex memo_mu_;
  int64_t memo_feedback_ = 0;
  std::map<std::string, braid::v1::GetPlanResponse> memo_;
  std::deque<std::string> memo_order_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_STRATEGY_API_H_
