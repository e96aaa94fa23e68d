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
#include "server/job_manager.h"

namespace braid::server {

// Defaults and limits applied to SearchOptions.
inline constexpr double kMaxBudgetS = 24 * 3600;
inline constexpr int kMaxNameBytes = 256;

// The request's model, cluster and options, validated.
absl::StatusOr<SubmitRequest> ParseSubmitRequest(const braid::v1::SubmitGraphRequest& req);

braid::v1::JobStatus JobStatusToProto(const JobRecord& r);
braid::v1::JobPhase JobPhaseToProto(JobPhase p);
// The response for a finished job's plan (plan JSON parsed into the proto).
absl::StatusOr<braid::v1::GetPlanResponse> PlanToProto(const JobRecord& job, const JobPlan& plan);

class StrategyApi {
 public:
  explicit StrategyApi(JobManager* jobs) : jobs_(jobs) {}

  absl::StatusOr<braid::v1::SubmitGraphResponse> SubmitGraph(
      const braid::v1::SubmitGraphRequest& req);
  absl::StatusOr<braid::v1::JobStatus> GetJob(const braid::v1::GetJobRequest& req);
  absl::StatusOr<braid::v1::GetPlanResponse> GetPlan(const braid::v1::GetPlanRequest& req);
  absl::StatusOr<braid::v1::JobStatus> CancelJob(const braid::v1::CancelJobRequest& req);
  absl::StatusOr<braid::v1::ListJobsResponse> ListJobs(const braid::v1::ListJobsRequest& req);

  JobManager* jobs() { return jobs_; }

 private:
  JobManager* jobs_;
  // Responses of finished jobs (immutable once done), newest kPlanMemo kept,
  // so a cached plan is served without SQLite or JSON work.
  static constexpr size_t kPlanMemo = 256;
  std::mutex memo_mu_;
  std::map<std::string, braid::v1::GetPlanResponse> memo_;
  std::deque<std::string> memo_order_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_STRATEGY_API_H_
