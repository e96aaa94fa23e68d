#include "client/service_session.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/planning.h"
#include "client/strategy_client.h"
#include "costmodel/comm_model.h"
#include "costmodel/sqlite.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "server/store.h"
#include "server/strategy_api.h"
#include "worker/worker_agent.h"

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
  explicit RemoteApi(std::unique_ptr<StrategyClient> c) : c_(std::move(c)) {}
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
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers() override {
    return absl::UnimplementedError(
        "the Strategy API has no worker listing; run `braid workers` on the server host "
        "against its database (--service-db) or see the server's status page");
  }

 private:
  std::unique_ptr<StrategyClient> c_;
};

// Tokens of the embedded server: calls never leave the process.
constexpr char kEmbeddedClientToken[] = "embedded-client";
constexpr char kEmbeddedWorkerToken[] = "embedded-worker";

class EmbeddedApi final : public ServiceApi {
 public:
  explicit EmbeddedApi(ServiceArgs args) : args_(std::move(args)) {}
  ~EmbeddedApi() override {
    if (agent_ != nullptr) {
      agent_->Stop();
      agent_thread_.join();
    }
    client_.reset();
    server_.reset();  // Shutdown(): unfinished jobs resume on the next start
  }
  bool embedded() const override { return true; }

  absl::StatusOr<v1::SubmitGraphResponse> Submit(const v1::SubmitGraphRequest& req) override {
    if (absl::Status s = EnsureServer(); !s.ok()) return s;
    return client_->Submit(req);
  }
  absl::StatusOr<v1::JobStatus> Watch(const std::string& id,
                                      const std::function<void(const v1::JobStatus&)>& cb) override {
    if (absl::Status s = EnsureServer(); !s.ok()) return s;
    return client_->Watch(id, cb);
  }
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& id) override {
    if (client_ != nullptr) return client_->GetJob(id);
    absl::StatusOr<server::Store*> st = Store();
    if (!st.ok()) return st.status();
    absl::StatusOr<server::JobRecord> r = (*st)->GetJob(id);
    if (!r.ok()) return r.status();
    return server::JobStatusToProto(*r);
  }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& id) override {
    if (client_ != nullptr) return client_->GetPlan(id);
    absl::StatusOr<server::Store*> st = Store();
    if (!st.ok()) return st.status();
    absl::StatusOr<server::JobRecord> r = (*st)->GetJob(id);
    if (!r.ok()) return r.status();
    if (r->phase != server::JobPhase::kDone) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is ", std::string(server::JobPhaseName(r->phase)),
                       ": no plan", r->error.empty() ? "" : ": ", r->error));
    }
    absl::StatusOr<std::optional<server::PlanRecord>> p = (*st)->GetPlan(r->plan_key);
    if (!p.ok()) return p.status();
    if (!p->has_value()) return absl::InternalError(absl::StrCat("job ", id, ": plan missing"));
    return server::PlanToProto(*r, server::JobPlan{**p, r->from_cache, r->recosted});
  }
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& id) override {
    if (client_ != nullptr) return client_->Cancel(id);
    // No server runs here: the job is either final or was left unfinished by
    // an embedded CLI that exited; marking it cancelled keeps the next
    // embedded start from resuming it.
    absl::StatusOr<server::Store*> st = Store();
    if (!st.ok()) return st.status();
    absl::StatusOr<server::JobRecord> r = (*st)->GetJob(id);
    if (!r.ok()) return r.status();
    if (!server::IsFinal(r->phase)) {
      r->phase = server::JobPhase::kCancelled;
      r->error = "cancelled by request";
      if (absl::Status s = (*st)->UpdateJob(*r); !s.ok()) return s;
    }
    return server::JobStatusToProto(*r);
  }
  absl::StatusOr<std::vector<v1::JobStatus>> ListJobs(int limit) override {
    if (client_ != nullptr) return client_->ListJobs(limit);
    absl::StatusOr<server::Store*> st = Store();
    if (!st.ok()) return st.status();
    absl::StatusOr<std::vector<server::JobRecord>> jobs = (*st)->ListJobs(limit == 0 ? 100 : limit);
    if (!jobs.ok()) return jobs.status();
    std::vector<v1::JobStatus> out;
    for (const server::JobRecord& j : *jobs) out.push_back(server::JobStatusToProto(j));
    return out;
  }
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers() override {
    if (absl::Status s = Store().status(); !s.ok()) return s;  // creates and migrates the file
    absl::StatusOr<costmodel::sql::Database> db = costmodel::sql::Database::Open(ServiceDb(args_));
    if (!db.ok()) return db.status();
    absl::StatusOr<costmodel::sql::Statement> q = db->Prepare(
        "SELECT id, name, device_kind, slots, last_heartbeat FROM workers "
        "ORDER BY last_heartbeat DESC");
    if (!q.ok()) return q.status();
    std::vector<WorkerInfo> out;
    while (true) {
      absl::StatusOr<bool> row = q->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      out.push_back({q->ColumnText(0), q->ColumnText(1), q->ColumnText(2),
                     static_cast<int>(q->ColumnInt64(3)), q->ColumnDouble(4)});
    }
    return out;
  }

 private:
  absl::StatusOr<server::Store*> Store() {
    if (store_ == nullptr) {
      const std::string path = ServiceDb(args_);
      if (absl::Status s = MakeParentDir(path); !s.ok()) return s;
      absl::StatusOr<std::unique_ptr<server::Store>> st = server::Store::Open(path);
      if (!st.ok()) return st.status();
      store_ = *std::move(st);
    }
    return store_.get();
  }

  absl::Status EnsureServer() {
    if (server_ != nullptr) return absl::OkStatus();
    server::ServerOptions o;
    o.listen = "";
    o.db_path = ServiceDb(args_);
    o.profile_db_path = ProfileDb(args_.profile_db);
    if (absl::Status s = MakeParentDir(o.db_path); !s.ok()) return s;
    if (absl::Status s = MakeParentDir(o.profile_db_path); !s.ok()) return s;
    o.client_token = kEmbeddedClientToken;
    o.worker_token = kEmbeddedWorkerToken;
    o.jobs.search_threads = args_.search_threads;
    o.shutdown_grace_s = 0.2;
    store_.reset();
    absl::StatusOr<std::unique_ptr<server::BraidServer>> srv = server::StartServer(o);
    if (!srv.ok()) return srv.status();
    server_ = *std::move(srv);
    ClientOptions co;
    co.channel = server_->InProcessChannel();
    co.token = kEmbeddedClientToken;
    absl::StatusOr<std::unique_ptr<StrategyClient>> c = StrategyClient::Create(co);
    if (!c.ok()) return c.status();
    client_ = *std::move(c);
    if (args_.embedded_worker) {
      worker::WorkerAgentOptions wo;
      wo.token = kEmbeddedWorkerToken;
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      wo.name = absl::StrCat(host, " (embedded)");
      wo.idle_poll_s = 0.2;
      agent_ = std::make_unique<worker::WorkerAgent>(server_->InProcessChannel(), wo);
      agent_thread_ = std::thread([this] { agent_->Run().IgnoreError(); });
    }
    return absl::OkStatus();
  }

  ServiceArgs args_;
  std::unique_ptr<server::Store> store_;
  std::unique_ptr<server::BraidServer> server_;
  std::unique_ptr<StrategyClient> client_;
  std::unique_ptr<worker::WorkerAgent> agent_;
  std::thread agent_thread_;
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
    absl::StatusOr<std::unique_ptr<costmodel::ProfileStore>> ps =
        costmodel::ProfileStore::Open(ProfileDb(profile_db));
    if (!ps.ok()) return ps.status();
    jg.profiles = *std::move(ps);
  }
  if (jg.cost_model == nullptr) {
    absl::StatusOr<costmodel::CommModel> comm =
        costmodel::CommModelFromStore(jg.cluster, jg.profiles.get());
    if (!comm.ok()) return comm.status();
    jg.cost_model = std::make_unique<costmodel::ClusterCostModel>(jg.cluster, jg.profiles.get(),
                                                                  nullptr, *std::move(comm));
  }
  nlohmann::json j = nlohmann::json::parse(plan.plan_json(), nullptr, false);
  if (j.is_discarded()) return absl::DataLossError("plan_json: not valid JSON");
  absl::StatusOr<search::Plan> p = search::PlanFromJson(jg.training, j);
  if (!p.ok()) return p.status();
  jg.plan = *std::move(p);
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
    absl::StatusOr<std::string> roots = ReadText(args.tls_ca, "--tls-ca");
    if (!roots.ok()) return roots.status();
    o.tls = true;
    o.tls_root_certs_pem = *roots;
  }
  absl::StatusOr<std::unique_ptr<StrategyClient>> c = StrategyClient::Create(o);
  if (!c.ok()) return c.status();
  return std::unique_ptr<ServiceApi>(new RemoteApi(*std::move(c)));
}

absl::StatusOr<JobGraph> JobGraphFor(const ServiceArgs& args, const ModelSource& source,
                                     const v1::GetPlanResponse& plan) {
  JobGraph jg;
  if (args.server.empty()) {
    absl::StatusOr<std::unique_ptr<server::Store>> st = server::Store::Open(ServiceDb(args));
    if (!st.ok()) return st.status();
    absl::StatusOr<server::JobRecord> rec = (*st)->GetJob(plan.job_id());
    if (!rec.ok()) return rec.status();
    absl::StatusOr<std::string> text = (*st)->GetGraphText(rec->forward_fingerprint);
    if (!text.ok()) return text.status();
    absl::StatusOr<graph::Graph> forward = graph::ParseText(*text);
    if (!forward.ok()) return forward.status();
    graph::TrainingOptions topts;
    topts.ranks = rec->options.ranks;
    absl::StatusOr<graph::Graph> train = graph::BuildTrainingGraph(*forward, topts);
    if (!train.ok()) return train.status();
    jg.training = *std::move(train);
    absl::StatusOr<std::string> cj = (*st)->GetClusterJson(rec->cluster_fingerprint);
    if (!cj.ok()) return cj.status();
    absl::StatusOr<costmodel::ClusterSpec> c = costmodel::ParseClusterJson(*cj);
    if (!c.ok()) return c.status();
    jg.cluster = *std::move(c);
    if (absl::Status s = FinishJobGraph(jg, args.profile_db, plan); !s.ok()) return s;
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
    absl::StatusOr<std::unique_ptr<PlanningContext>> ctx = Prepare(req);
    if (!ctx.ok()) return ctx.status();
    jg.training = std::move((*ctx)->training);
    jg.cluster = (*ctx)->cluster;
    jg.profiles = std::move((*ctx)->store);
    jg.cost_model = std::move((*ctx)->cost_model);
    if (absl::Status s = FinishJobGraph(jg, source.profile_db, plan); !s.ok()) return s;
  }
  absl::StatusOr<std::string> fp = graph::FingerprintHex(jg.training);
  if (!fp.ok()) return fp.status();
  if (*fp != plan.plan().graph_fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model/--cluster/--ranks/--batch: they build training graph ", *fp, ", job ",
        plan.job_id(), " was planned on ", plan.plan().graph_fingerprint()));
  }
  return jg;
}

}  // namespace braid::client
