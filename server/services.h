// braid's gRPC services on the callback API. Each handler authenticates the
// call (server/auth.h) and forwards to a plain C++ class (StrategyApi,
// WorkersApi); statuses cross over in ToGrpcStatus only.
//
//   StrategyService strategy(&api, &jobs, client_token);
//   WorkersService workers(&workers_api, worker_token);
//   builder.RegisterService(&strategy);
//   builder.RegisterService(&workers);
#ifndef BRAID_SERVER_SERVICES_H_
#define BRAID_SERVER_SERVICES_H_

#include <string>

#include "braid/v1/strategy.grpc.pb.h"
#include "braid/v1/workers.grpc.pb.h"
#include "server/job_manager.h"
#include "server/strategy_api.h"
#include "server/workers_api.h"

namespace braid::server {

class StrategyService final : public braid::v1::Strategy::CallbackService {
 public:
  // `admin_token`: the operator calls' (RestorePlan, ConfirmRollback); empty:
  // refused with PERMISSION_DENIED.
  StrategyService(StrategyApi* api, JobManager* jobs, std::string token,
                  std::string admin_token = "")
      : api_(api), jobs_(jobs), token_(std::move(token)), admin_token_(std::move(admin_token)) {}

  grpc::ServerUnaryReactor* SubmitGraph(grpc::CallbackServerContext* ctx,
                                        const braid::v1::SubmitGraphRequest* req,
                                        braid::v1::SubmitGraphResponse* resp) override;
  grpc::ServerWriteReactor<braid::v1::JobStatus>* WatchJob(
      grpc::CallbackServerContext* ctx, const braid::v1::WatchJobRequest* req) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const braid::v1::GetJobRequest* req,
                                   braid::v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* ctx,
                                    const braid::v1::GetPlanRequest* req,
                                    braid::v1::GetPlanResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const braid::v1::CancelJobRequest* req,
                                      braid::v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const braid::v1::ListJobsRequest* req,
                                     braid::v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* ReportMeasurement(
      grpc::CallbackServerContext* ctx, const braid::v1::ReportMeasurementRequest* req,
      braid::v1::ReportMeasurementResponse* resp) override;
  grpc::ServerUnaryReactor* StartRun(grpc::CallbackServerContext* ctx,
                                     const braid::v1::StartRunRequest* req,
                                     braid::v1::StartRunResponse* resp) override;
  grpc::ServerUnaryReactor* ListRollbacks(grpc::CallbackServerContext* ctx,
                                          const braid::v1::ListRollbacksRequest* req,
                                          braid::v1::ListRollbacksResponse* resp) override;
  grpc::ServerUnaryReactor* RestorePlan(grpc::CallbackServerContext* ctx,
                                        const braid::v1::RestorePlanRequest* req,
                                        braid::v1::RollbackActionResponse* resp) override;
  grpc::ServerUnaryReactor* ConfirmRollback(grpc::CallbackServerContext* ctx,
                                            const braid::v1::ConfirmRollbackRequest* req,
                                            braid::v1::RollbackActionResponse* resp) override;

 private:
  StrategyApi* api_;
  JobManager* jobs_;
  std::string token_;
  std::string admin_token_;
};

class WorkersService final : public braid::v1::Workers::CallbackService {
 public:
  WorkersService(WorkersApi* api, std::string token) : api_(api), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const braid::v1::RegisterRequest* req,
                                     braid::v1::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const braid::v1::HeartbeatRequest* req,
                                      braid::v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseTasks(grpc::CallbackServerContext* ctx,
                                       const braid::v1::LeaseTasksRequest* req,
                                       braid::v1::LeaseTasksResponse* resp) override;
  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* ctx,
                                         const braid::v1::ReportResultRequest* req,
                                         braid::v1::ReportResultResponse* resp) override;

 private:
  WorkersApi* api_;
  std::string token_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_SERVICES_H_
