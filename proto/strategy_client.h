// A small client for braid's Strategy service, for training launchers and the
// `braid` CLI: submit a model, follow its search, fetch the plan. Depends on
// the generated protos and gRPC only.
//
//   ClientOptions o{.address = "braid.internal:50051", .token = getenv("BRAID_TOKEN")};
//   absl::StatusOr<std::unique_ptr<StrategyClient>> c = StrategyClient::Create(o);
//   braid::v1::SubmitGraphRequest req;
//   req.set_zoo_model("resnet50");
//   req.set_cluster_preset("dgx-h100");
//   absl::StatusOr<braid::v1::SubmitGraphResponse> job = (*c)->Submit(req);
//   (*c)->Watch(job->job_id(), [](const braid::v1::JobStatus& s) { ... });
//   absl::StatusOr<braid::v1::GetPlanResponse> plan = (*c)->GetPlan(job->job_id());
#ifndef BRAID_PROTO_STRATEGY_CLIENT_H_
#define BRAID_PROTO_STRATEGY_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "braid/v1/strategy.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace braid::client {

struct ClientOptions {
  std::string address;  // host:port; ignored when `channel` is set
  std::string token;    // sent as "authorization: Bearer <token>"
  bool tls = false;
  std::string tls_root_certs_pem;  // TLS: trusted roots; empty = the system's
  // An existing channel, e.g. BraidServer::InProcessChannel() when the CLI
  // embeds the server.
  std::shared_ptr<grpc::Channel> channel;
  double rpc_timeout_s = 60;  // unary calls; Watch has no deadline
};

// grpc::Status -> absl::Status (same canonical codes).
absl::Status FromGrpcStatus(const grpc::Status& s);

class StrategyClient {
 public:
  // InvalidArgument when neither address nor channel is given or the token
  // is empty.
  static absl::StatusOr<std::unique_ptr<StrategyClient>> Create(const ClientOptions& options);

  absl::StatusOr<braid::v1::SubmitGraphResponse> Submit(const braid::v1::SubmitGraphRequest& req);
  // Calls `on_status` for every update until the job reaches a final phase
  // and returns that last status.
  absl::StatusOr<braid::v1::JobStatus> Watch(
      const std::string& job_id, const std::function<void(const braid::v1::JobStatus&)>& on_status);
  absl::StatusOr<braid::v1::JobStatus> GetJob(const std::string& job_id);
  // `digest_only`: the plan's digest and rollback state, no plan (what a
  // training rank verifies a broadcast plan against).
  absl::StatusOr<braid::v1::GetPlanResponse> GetPlan(const std::string& job_id,
                                                     bool digest_only = false);
  absl::StatusOr<braid::v1::JobStatus> Cancel(const std::string& job_id);
  absl::StatusOr<std::vector<braid::v1::JobStatus>> ListJobs(int limit = 0);
  // A training rank's measured iteration times of the job's plan.
  absl::StatusOr<braid::v1::ReportMeasurementResponse> ReportMeasurement(
      const braid::v1::ReportMeasurementRequest& req);
  // Begins a run of the job's plan on its ranks (needs the job's report
  // credential): the attempt id every rank reports under.
  absl::StatusOr<braid::v1::StartRunResponse> StartRun(const braid::v1::StartRunRequest& req);
  absl::StatusOr<braid::v1::ListRollbacksResponse> ListRollbacks(
      const braid::v1::ListRollbacksRequest& req);
  // Operator calls: the client's token must be the server's admin token.
  absl::StatusOr<braid::v1::RollbackActionResponse> RestorePlan(
      const braid::v1::RestorePlanRequest& req);
  absl::StatusOr<braid::v1::RollbackActionResponse> ConfirmRollback(
      const braid::v1::ConfirmRollbackRequest& req);

 private:
  StrategyClient(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
  void Prepare(grpc::ClientContext* ctx, bool deadline) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<braid::v1::Strategy::Stub> stub_;
};

}  // namespace braid::client

#endif  // BRAID_PROTO_STRATEGY_CLIENT_H_
