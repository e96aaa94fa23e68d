#include "proto/strategy_client.h"

#include <chrono>
#include <utility>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace braid::client {

namespace v1 = braid::v1;

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(s.error_code())),
                      s.error_message());
}

absl::StatusOr<std::unique_ptr<StrategyClient>> StrategyClient::Create(
    const ClientOptions& options) {
  if (options.token.empty()) return absl::InvalidArgumentError("client token must be set");
  std::shared_ptr<grpc::Channel> channel = options.channel;
  if (channel == nullptr) {
    if (options.address.empty()) {
      return absl::InvalidArgumentError("server address (host:port) must be set");
    }
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (options.tls) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options.tls_root_certs_pem;
      creds = grpc::SslCredentials(ssl);
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // plans of large graphs exceed 4 MiB
    channel = grpc::CreateCustomChannel(options.address, creds, args);
  }
  return std::unique_ptr<StrategyClient>(new StrategyClient(options, std::move(channel)));
}

StrategyClient::StrategyClient(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Strategy::NewStub(channel_)) {}

void StrategyClient::Prepare(grpc::ClientContext* ctx, bool deadline) const {
  ctx->AddMetadata("authorization", "Bearer " + options_.token);
  if (deadline) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options_.rpc_timeout_s * 1e3)));
  }
}

absl::StatusOr<v1::SubmitGraphResponse> StrategyClient::Submit(const v1::SubmitGraphRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::SubmitGraphResponse resp;
  if (grpc::Status s = stub_->SubmitGraph(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::JobStatus> StrategyClient::Watch(
    const std::string& job_id, const std::function<void(const v1::JobStatus&)>& on_status) {
  grpc::ClientContext ctx;
  Prepare(&ctx, false);
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<v1::JobStatus>> reader = stub_->WatchJob(&ctx, req);
  v1::JobStatus status;
  v1::JobStatus last;
  bool any = false;
  while (reader->Read(&status)) {
    if (on_status) on_status(status);
    last = status;
    any = true;
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) return FromGrpcStatus(s);
  if (!any) return absl::InternalError("watch stream ended without a status");
  return last;
}

absl::StatusOr<v1::JobStatus> StrategyClient::GetJob(const std::string& job_id) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus resp;
  if (grpc::Status s = stub_->GetJob(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::GetPlanResponse> StrategyClient::GetPlan(const std::string& job_id,
                                                            bool digest_only) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::GetPlanRequest req;
  req.set_job_id(job_id);
  req.set_digest_only(digest_only);
  v1::GetPlanResponse resp;
  if (grpc::Status s = stub_->GetPlan(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::ReportMeasurementResponse> StrategyClient::ReportMeasurement(
    const v1::ReportMeasurementRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::ReportMeasurementResponse resp;
  if (grpc::Status s = stub_->ReportMeasurement(&ctx, req, &resp); !s.ok()) {
    return FromGrpcStatus(s);
  }
  return resp;
}

namespace {

template <typename Resp, typename Req, typename Call>
absl::StatusOr<Resp> CallUnary(grpc::ClientContext* ctx, const Req& req, Call&& call) {
  Resp resp;
  if (grpc::Status s = call(ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

}  // namespace

absl::StatusOr<v1::StartRunResponse> StrategyClient::StartRun(const v1::StartRunRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  return CallUnary<v1::StartRunResponse>(&ctx, req, [&](auto* c, const auto& r, auto* out) {
    return stub_->StartRun(c, r, out);
  });
}

absl::StatusOr<v1::ListRollbacksResponse> StrategyClient::ListRollbacks(
    const v1::ListRollbacksRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  return CallUnary<v1::ListRollbacksResponse>(&ctx, req, [&](auto* c, const auto& r, auto* out) {
    return stub_->ListRollbacks(c, r, out);
  });
}

absl::StatusOr<v1::RollbackActionResponse> StrategyClient::RestorePlan(
    const v1::RestorePlanRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  return CallUnary<v1::RollbackActionResponse>(&ctx, req, [&](auto* c, const auto& r, auto* out) {
    return stub_->RestorePlan(c, r, out);
  });
}

absl::StatusOr<v1::RollbackActionResponse> StrategyClient::ConfirmRollback(
    const v1::ConfirmRollbackRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  return CallUnary<v1::RollbackActionResponse>(&ctx, req, [&](auto* c, const auto& r, auto* out) {
    return stub_->ConfirmRollback(c, r, out);
  });
}

absl::StatusOr<v1::JobStatus> StrategyClient::Cancel(const std::string& job_id) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus resp;
  if (grpc::Status s = stub_->CancelJob(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<std::vector<v1::JobStatus>> StrategyClient::ListJobs(int limit) {
  grpc::ClientContext ctx;
  Prepare(&ctx, true);
  v1::ListJobsRequest req;
  req.set_limit(limit);
  v1::ListJobsResponse resp;
  if (grpc::Status s = stub_->ListJobs(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return std::vector<v1::JobStatus>(resp.jobs().begin(), resp.jobs().end());
}

}  // namespace braid::client
