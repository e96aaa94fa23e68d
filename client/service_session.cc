#include "client/service_session.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/sqlite.h"
#include "base/status_macros.h"
#include "client/planning.h"
#include "proto/strategy_client.h"
#include "costmodel/comm_model.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "server/plan_feedback.h"
#include "server/server.h"
#include "server/store.h"
#include "server/strategy_api.h"

namespace braid::client {

namespace v1 = braid::v1;
namespace fs = std::filesystem;

std::string EmbeddedServiceDbPath() {
  if (const char* db = std::getenv("BRAID_SERVICE_DB"); db != nullptr && *db != '\0') return db;
  return (fs::path(DefaultDatabasePath()).parent_path() / "service.db").string();
}

namespace {

std::string ServiceDb(const ServiceArgs& a) {
  return a.service_db.empty() ? EmbeddedServiceDbPath() : a.service_db;
}
std::string ProfileDb(const std::string& p) { return p.empty() ? DefaultDatabasePath() : p; }

absl::Status MakeParentDir(const std::string& path) {
  if (path == ":memory:") return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": cannot create its directory: ", ec.message()));
  return absl::OkStatus();
}

class RemoteApi final : public ServiceApi {
 public:
  RemoteApi(std::unique_ptr<StrategyClient> c, std::unique_ptr<StrategyClient> admin)
      : c_(std::move(c)), admin_(std::move(admin)) {}
  bool embedded() const override { return false; }
  absl::StatusOr<v1::SubmitGraphResponse> Submit(const v1::SubmitGraphRequest& req) override {
    return c_->Submit(req);
  }
  absl::StatusOr<v1::JobStatus> Watch(const std::string& id,
                                      const std::function<void(const v1::JobStatus&)>& cb) override {
    return c_->Watch(id, cb);
  }
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& id) override { return c_->GetJob(id); }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& id) override {
    return c_->GetPlan(id);
  }
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& id) override { return c_->Cancel(id); }
  absl::StatusOr<std::vector<v1::JobStatus>> ListJobs(int limit) override {
    return c_->ListJobs(limit);
  }
  absl::StatusOr<v1::ReportMeasurementResponse> ReportMeasurement(
      const v1::ReportMeasurementRequest& req) override {
    return c_->ReportMeasurement(req);
  }
  absl::StatusOr<v1::StartRunResponse> StartRun(const v1::StartRunRequest& req) override {
    return c_->StartRun(req);
  }
  absl::StatusOr<v1::ListRollbacksResponse> ListRollbacks(
      const v1::ListRollbacksRequest& req) override {
    return c_->ListRollbacks(req);
  }
  absl::StatusOr<v1::RollbackActionResponse> RestorePlan(
      const v1::RestorePlanRequest& req) override {
    RETURN_IF_ERROR(NeedAdmin());
    return admin_->RestorePlan(req);
  }
  absl::StatusOr<v1::RollbackActionResponse> ConfirmRollback(
      const v1::ConfirmRollbackRequest& req) override {
    RETURN_IF_ERROR(NeedAdmin());
    return admin_->ConfirmRollback(req);
  }
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers() override {
    return absl::UnimplementedError(
        "the Strategy API has no worker listing; run `braid workers` on the server host "
        "against its database (--service-db) or see the server's status page");
  }

 private:
  absl::Status NeedAdmin() const {
    if (admin_ != nullptr) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "--admin-token (or BRAID_ADMIN_TOKEN) must be set: operator calls need the server's "
        "admin token");
  }

  std::unique_ptr<StrategyClient> c_;
  std::unique_ptr<StrategyClient> admin_;  // null without an admin token
};

// Tokens of the embedded server: calls never leave the process.
constexpr char kEmbeddedClientToken[] = "embedded-client";
constexpr char kEmbeddedWorkerToken[] = "embedded-worker";
constexpr char kEmbeddedAdminToken[] = "embedded-admin";

class EmbeddedApi final : public ServiceApi {
 public:
  explicit EmbeddedApi(ServiceArgs args) : args_(std::move(args)) {}
  ~EmbeddedApi() override {
    worker_.reset();  // stops and joins it
    client_.reset();
    server_.reset();  // Shutdown(): unfinished jobs resume on the next start
  }
  bool embedded() const override { return true; }

  absl::StatusOr<v1::SubmitGraphResponse> Submit(const v1::SubmitGraphRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return client_->Submit(req);
  }
  absl::StatusOr<v1::JobStatus> Watch(const std::string& id,
                                      const std::function<void(const v1::JobStatus&)>& cb) override {
    RETURN_IF_ERROR(EnsureServer());
    return client_->Watch(id, cb);
  }
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& id) override {
    if (client_ != nullptr) return client_->GetJob(id);
    ASSIGN_OR_RETURN(server::Store* st, Store());
    ASSIGN_OR_RETURN(server::JobRecord r, st->GetJob(id));
    return server::JobStatusToProto(r);
  }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& id) override {
    if (client_ != nullptr) return client_->GetPlan(id);
    ASSIGN_OR_RETURN(server::Store* st, Store());
    ASSIGN_OR_RETURN(server::JobRecord r, st->GetJob(id));
    if (r.phase != server::JobPhase::kDone) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is ", std::string(server::JobPhaseName(r.phase)),
                       ": no plan", r.error.empty() ? "" : ": ", r.error));
    }
    ASSIGN_OR_RETURN(std::optional<server::PlanRecord> p, st->GetPlan(r.plan_key));
    if (!p.has_value()) return absl::InternalError(absl::StrCat("job ", id, ": plan missing"));
    ASSIGN_OR_RETURN(v1::GetPlanResponse out,
                     server::PlanToProto(r, server::JobPlan{*p, r.from_cache, r.recosted}));
    ASSIGN_OR_RETURN(std::vector<server::MeasuredPlan> measured,
                     st->CalibrationSamples(r.cluster_fingerprint, server::JobKind(r.options),
                                            server::kCalibrationSamples));
    server::SetCalibration(server::Calibration(measured), &out);
    return out;
  }
  absl::StatusOr<v1::ReportMeasurementResponse> ReportMeasurement(
      const v1::ReportMeasurementRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return client_->ReportMeasurement(req);
  }
  absl::StatusOr<v1::StartRunResponse> StartRun(const v1::StartRunRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return client_->StartRun(req);
  }
  absl::StatusOr<v1::ListRollbacksResponse> ListRollbacks(
      const v1::ListRollbacksRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return client_->ListRollbacks(req);
  }
  // The embedded service is the user's own: they are its operator.
  absl::StatusOr<v1::RollbackActionResponse> RestorePlan(
      const v1::RestorePlanRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return admin_->RestorePlan(req);
  }
  absl::StatusOr<v1::RollbackActionResponse> ConfirmRollback(
      const v1::ConfirmRollbackRequest& req) override {
    RETURN_IF_ERROR(EnsureServer());
    return admin_->ConfirmRollback(req);
  }
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& id) override {
    if (client_ != nullptr) return client_->Cancel(id);
    // No server runs here: the job is either final or was left unfinished by
    // an embedded CLI that exited; marking it cancelled keeps the next
    // embedded start from resuming it.
    ASSIGN_OR_RETURN(server::Store* st, Store());
    ASSIGN_OR_RETURN(server::JobRecord r, st->GetJob(id));
    if (!server::IsFinal(r.phase)) {
      r.phase = server::JobPhase::kCancelled;
      r.error = "cancelled by request";
      RETURN_IF_ERROR(st->UpdateJob(r));
    }
    return server::JobStatusToProto(r);
  }
  absl::StatusOr<std::vector<v1::JobStatus>> ListJobs(int limit) override {
    if (client_ != nullptr) return client_->ListJobs(limit);
    ASSIGN_OR_RETURN(server::Store* st, Store());
    ASSIGN_OR_RETURN(std::vector<server::JobRecord> jobs, st->ListJobs(limit == 0 ? 100 : limit));
    std::vector<v1::JobStatus> out;
    for (const server::JobRecord& j : jobs) out.push_back(server::JobStatusToProto(j));
    return out;
  }
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers() override {
    RETURN_IF_ERROR(Store().status());  // creates and migrates the file
    ASSIGN_OR_RETURN(base::sql::Database db, base::sql::Database::Open(ServiceDb(args_)));
    ASSIGN_OR_RETURN(base::sql::Statement q,
                     db.Prepare("SELECT id, name, device_kind, slots, last_heartbeat FROM workers "
                                "ORDER BY last_heartbeat DESC"));
    std::vector<WorkerInfo> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back({q.ColumnText(0), q.ColumnText(1), q.ColumnText(2),
                     static_cast<int>(q.ColumnInt64(3)), q.ColumnDouble(4)});
    }
    return out;
  }

 private:
  absl::StatusOr<server::Store*> Store() {
    if (store_ == nullptr) {
      const std::string path = ServiceDb(args_);
      RETURN_IF_ERROR(MakeParentDir(path));
      ASSIGN_OR_RETURN(std::unique_ptr<server::Store> st, server::Store::Open(path));
      store_ = std::move(st);
    }
    return store_.get();
  }

  absl::Status EnsureServer() {
    if (server_ != nullptr) return absl::OkStatus();
    server::ServerOptions o;
    o.listen = "";
    o.db_path = ServiceDb(args_);
    o.profile_db_path = ProfileDb(args_.profile_db);
    RETURN_IF_ERROR(MakeParentDir(o.db_path));
    RETURN_IF_ERROR(MakeParentDir(o.profile_db_path));
    o.client_token = kEmbeddedClientToken;
    o.worker_token = kEmbeddedWorkerToken;
    o.admin_token = kEmbeddedAdminToken;
    o.jobs.search_threads = args_.search_threads;
    o.shutdown_grace_s = 0.2;
    store_.reset();
    ASSIGN_OR_RETURN(std::unique_ptr<server::BraidServer> srv, server::StartServer(o));
    server_ = std::move(srv);
    ClientOptions co;
    co.channel = server_->InProcessChannel();
    co.token = kEmbeddedClientToken;
    ASSIGN_OR_RETURN(std::unique_ptr<StrategyClient> c, StrategyClient::Create(co));
    client_ = std::move(c);
    co.token = kEmbeddedAdminToken;
    ASSIGN_OR_RETURN(std::unique_ptr<StrategyClient> admin, StrategyClient::Create(co));
    admin_ = std::move(admin);
    if (args_.start_worker) {
      ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedWorker> w,
                       args_.start_worker(server_->InProcessChannel(), kEmbeddedWorkerToken));
      worker_ = std::move(w);
    }
    return absl::OkStatus();
  }

  ServiceArgs args_;
  std::unique_ptr<server::Store> store_;
  std::unique_ptr<server::BraidServer> server_;
  std::unique_ptr<StrategyClient> client_;
  std::unique_ptr<StrategyClient> admin_;
  std::unique_ptr<EmbeddedWorker> worker_;
};

absl::StatusOr<std::string> ReadText(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status FinishJobGraph(JobGraph& jg, const std::string& profile_db,
                            const v1::GetPlanResponse& plan) {
  if (jg.profiles == nullptr && profile_db != "none") {
    ASSIGN_OR_RETURN(std::unique_ptr<costmodel::ProfileStore> ps,
                     costmodel::ProfileStore::Open(ProfileDb(profile_db)));
    jg.profiles = std::move(ps);
  }
  if (jg.cost_model == nullptr) {
    ASSIGN_OR_RETURN(costmodel::CommModel comm,
                     costmodel::CommModelFromStore(jg.cluster, jg.profiles.get()));
    jg.cost_model = std::make_unique<costmodel::ClusterCostModel>(
        jg.cluster, jg.profiles.get(),
        jg.profiles != nullptr ? costmodel::FusedOpEstimatorFor(jg.cluster, ProfileDb(profile_db))
                               : nullptr,
        std::move(comm));
  }
  absl::StatusOr<nlohmann::json> j =
      base::ParseBoundedJson(plan.plan_json(), base::kPlanJsonLimits);
  if (!j.ok()) return absl::DataLossError(absl::StrCat("plan_json: ", j.status().message()));
  ASSIGN_OR_RETURN(search::Plan p, search::PlanFromJson(jg.training, *j));
  jg.plan = std::move(p);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServiceApi>> OpenService(const ServiceArgs& args) {
  if (args.server.empty()) return std::unique_ptr<ServiceApi>(new EmbeddedApi(args));
  ClientOptions o;
  o.address = args.server;
  o.token = args.token;
  if (o.token.empty()) {
    return absl::InvalidArgumentError("--token (or BRAID_CLIENT_TOKEN) must be set with --server");
  }
  if (!args.tls_ca.empty()) {
    ASSIGN_OR_RETURN(std::string roots, ReadText(args.tls_ca, "--tls-ca"));
    o.tls = true;
    o.tls_root_certs_pem = roots;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<StrategyClient> c, StrategyClient::Create(o));
  std::unique_ptr<StrategyClient> admin;
  if (!args.admin_token.empty()) {
    o.token = args.admin_token;
    ASSIGN_OR_RETURN(admin, StrategyClient::Create(o));
  }
  return std::unique_ptr<ServiceApi>(new RemoteApi(std::move(c), std::move(admin)));
}

absl::StatusOr<JobGraph> JobGraphFor(const ServiceArgs& args, const ModelSource& source,
                                     const v1::GetPlanResponse& plan) {
  JobGraph jg;
  if (args.server.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<server::Store> st, server::Store::Open(ServiceDb(args)));
    ASSIGN_OR_RETURN(server::JobRecord rec, st->GetJob(plan.job_id()));
    ASSIGN_OR_RETURN(std::string text, st->GetGraphText(rec.forward_fingerprint));
    ASSIGN_OR_RETURN(graph::Graph forward, graph::ParseText(text));
    graph::TrainingOptions topts;
    topts.ranks = rec.options.ranks;
    ASSIGN_OR_RETURN(graph::Graph train, graph::BuildTrainingGraph(forward, topts));
    jg.training = std::move(train);
    ASSIGN_OR_RETURN(std::string cj, st->GetClusterJson(rec.cluster_fingerprint));
    ASSIGN_OR_RETURN(costmodel::ClusterSpec c, costmodel::ParseClusterJson(cj));
    jg.cluster = std::move(c);
    RETURN_IF_ERROR(FinishJobGraph(jg, args.profile_db, plan));
  } else {
    if (source.model.empty() || source.cluster.empty()) {
      return absl::InvalidArgumentError(
          "--model and --cluster: a remote job's graph is not sent back by the server; give the "
          "model and cluster it was submitted with (and --ranks/--batch if set)");
    }
    PlanningRequest req;
    req.model = source.model;
    req.cluster = source.cluster;
    req.ranks = source.ranks;
    req.batch = source.batch;
    req.db = source.profile_db;
    ASSIGN_OR_RETURN(std::unique_ptr<PlanningContext> ctx, Prepare(req));
    jg.training = std::move(ctx->training);
    jg.cluster = ctx->cluster;
    jg.profiles = std::move(ctx->store);
    jg.cost_model = std::move(ctx->cost_model);
    RETURN_IF_ERROR(FinishJobGraph(jg, source.profile_db, plan));
  }
  ASSIGN_OR_RETURN(std::string fp, graph::FingerprintHex(jg.training));
  if (fp != plan.plan().graph_fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model/--cluster/--ranks/--batch: they build training graph ", fp, ", job ",
        plan.job_id(), " was planned on ", plan.plan().graph_fingerprint()));
  }
  return jg;
}

}  // namespace braid::client
