#include "server/services.h"

#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/auth.h"
#include "server/status_util.h"

namespace braid::server {

namespace v1 = braid::v1;

namespace {

// Authenticates, runs `body` (returning StatusOr<Resp>) and finishes.
template <typename Resp, typename Body>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const std::string& token,
                                Resp* resp, Body&& body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (absl::Status auth = CheckBearer(ctx->client_metadata(), token); !auth.ok()) {
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  absl::StatusOr<Resp> out = body();
  if (out.ok()) *resp = *std::move(out);
  reactor->Finish(ToGrpcStatus(out.status()));
  return reactor;
}

// Streams a job's status: the JobManager's listener hands over each new
// record; one write is in flight at a time and only the newest pending
// status is kept. Ends after a final phase is written.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobStatus> {
 public:
  WatchReactor(JobManager* jobs, grpc::CallbackServerContext* ctx, const std::string& token,
               const std::string& job_id)
      : jobs_(jobs) {
    if (absl::Status auth = CheckBearer(ctx->client_metadata(), token); !auth.ok()) {
      FinishOnce(ToGrpcStatus(auth));
      return;
    }
    if (job_id.empty()) {
      FinishOnce(ToGrpcStatus(absl::InvalidArgumentError("job_id must be set")));
      return;
    }
    absl::StatusOr<int64_t> sub = jobs_->Subscribe(
        job_id, [this](const JobRecord& r, int64_t version) { OnJob(r, version); });
    if (!sub.ok()) {
      FinishOnce(ToGrpcStatus(sub.status()));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    subscription_ = *sub;
  }

  void OnWriteDone(bool ok) override {
    bool start = false;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_ || current_final_) {
        finish = true;
      } else if (pending_.has_value()) {
        start = TakePendingLocked();
      }
    }
    if (finish) {
      FinishOnce(grpc::Status::OK);
    } else if (start) {
      StartWrite(&current_);
    }
  }

  void OnCancel() override {
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      finish = !writing_;  // else OnWriteDone finishes
    }
    if (finish) FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    std::optional<int64_t> sub;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sub = subscription_;
    }
    if (sub.has_value()) jobs_->Unsubscribe(*sub);  // no listener call after this
    delete this;
  }

 private:
  void OnJob(const JobRecord& r, int64_t version) {
    bool start = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || version <= last_version_ || sent_final_) return;
      last_version_ = version;
      pending_ = JobStatusToProto(r);
      if (!writing_) start = TakePendingLocked();
    }
    if (start) StartWrite(&current_);
  }

  bool TakePendingLocked() {
    current_ = *std::move(pending_);
    pending_.reset();
    current_final_ = current_.phase() == v1::JOB_PHASE_DONE ||
                     current_.phase() == v1::JOB_PHASE_FAILED ||
                     current_.phase() == v1::JOB_PHASE_CANCELLED;
    sent_final_ = current_final_;
    writing_ = true;
    return true;
  }

  void FinishOnce(const grpc::Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(s);
  }

  JobManager* jobs_;
  std::mutex mu_;
  std::optional<int64_t> subscription_;
  std::optional<v1::JobStatus> pending_;
  v1::JobStatus current_;  // owned by the write in flight
  bool current_final_ = false;
  bool sent_final_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  int64_t last_version_ = -1;
};

}  // namespace

grpc::ServerUnaryReactor* StrategyService::SubmitGraph(grpc::CallbackServerContext* ctx,
                                                       const v1::SubmitGraphRequest* req,
                                                       v1::SubmitGraphResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->SubmitGraph(*req); });
}

grpc::ServerWriteReactor<v1::JobStatus>* StrategyService::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* req) {
  return new WatchReactor(jobs_, ctx, token_, req->job_id());
}

grpc::ServerUnaryReactor* StrategyService::GetJob(grpc::CallbackServerContext* ctx,
                                                  const v1::GetJobRequest* req,
                                                  v1::JobStatus* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->GetJob(*req); });
}

grpc::ServerUnaryReactor* StrategyService::GetPlan(grpc::CallbackServerContext* ctx,
                                                   const v1::GetPlanRequest* req,
                                                   v1::GetPlanResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->GetPlan(*req); });
}

grpc::ServerUnaryReactor* StrategyService::CancelJob(grpc::CallbackServerContext* ctx,
                                                     const v1::CancelJobRequest* req,
                                                     v1::JobStatus* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->CancelJob(*req); });
}

grpc::ServerUnaryReactor* StrategyService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const v1::ListJobsRequest* req,
                                                    v1::ListJobsResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->ListJobs(*req); });
}

// The client token, like every Strategy call: training ranks report with the
// token they fetch the plan with, not a profiling worker's.
grpc::ServerUnaryReactor* StrategyService::ReportMeasurement(
    grpc::CallbackServerContext* ctx, const v1::ReportMeasurementRequest* req,
    v1::ReportMeasurementResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->ReportMeasurement(*req, ctx->peer()); });
}

grpc::ServerUnaryReactor* StrategyService::StartRun(grpc::CallbackServerContext* ctx,
                                                    const v1::StartRunRequest* req,
                                                    v1::StartRunResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->StartRun(*req, ctx->peer()); });
}

grpc::ServerUnaryReactor* StrategyService::ListRollbacks(grpc::CallbackServerContext* ctx,
                                                         const v1::ListRollbacksRequest* req,
                                                         v1::ListRollbacksResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->ListRollbacks(*req); });
}

namespace {

// The operator's calls: the admin token, which the client token is not.
absl::Status CheckAdmin(grpc::CallbackServerContext* ctx, const std::string& admin_token) {
  if (admin_token.empty()) {
    return absl::PermissionDeniedError(
        "this braid-server has no --admin-token: operator calls (restore, confirm rollback) "
        "are disabled");
  }
  if (absl::Status s = CheckBearer(ctx->client_metadata(), admin_token); !s.ok()) {
    return absl::PermissionDeniedError("operator calls need the server's admin token");
  }
  return absl::OkStatus();
}

std::string OperatorActor(grpc::CallbackServerContext* ctx) {
  return absl::StrCat("operator (admin token) from ", ctx->peer());
}

}  // namespace

grpc::ServerUnaryReactor* StrategyService::RestorePlan(grpc::CallbackServerContext* ctx,
                                                       const v1::RestorePlanRequest* req,
                                                       v1::RollbackActionResponse* resp) {
  return Unary(ctx, admin_token_.empty() ? token_ : admin_token_, resp,
               [&]() -> absl::StatusOr<v1::RollbackActionResponse> {
                 RETURN_IF_ERROR(CheckAdmin(ctx, admin_token_));
                 return api_->RestorePlan(*req, OperatorActor(ctx));
               });
}

grpc::ServerUnaryReactor* StrategyService::ConfirmRollback(grpc::CallbackServerContext* ctx,
                                                           const v1::ConfirmRollbackRequest* req,
                                                           v1::RollbackActionResponse* resp) {
  return Unary(ctx, admin_token_.empty() ? token_ : admin_token_, resp,
               [&]() -> absl::StatusOr<v1::RollbackActionResponse> {
                 RETURN_IF_ERROR(CheckAdmin(ctx, admin_token_));
                 return api_->ConfirmRollback(*req, OperatorActor(ctx));
               });
}

grpc::ServerUnaryReactor* WorkersService::Register(grpc::CallbackServerContext* ctx,
                                                   const v1::RegisterRequest* req,
                                                   v1::RegisterResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->Register(*req); });
}

grpc::ServerUnaryReactor* WorkersService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                    const v1::HeartbeatRequest* req,
                                                    v1::HeartbeatResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->Heartbeat(*req); });
}

grpc::ServerUnaryReactor* WorkersService::LeaseTasks(grpc::CallbackServerContext* ctx,
                                                     const v1::LeaseTasksRequest* req,
                                                     v1::LeaseTasksResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->LeaseTasks(*req); });
}

grpc::ServerUnaryReactor* WorkersService::ReportResult(grpc::CallbackServerContext* ctx,
                                                       const v1::ReportResultRequest* req,
                                                       v1::ReportResultResponse* resp) {
  return Unary(ctx, token_, resp, [&] { return api_->ReportResult(*req); });
}

}  // namespace braid::server
