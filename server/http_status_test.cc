// Tests of the HTTP status endpoint against an in-process braid-server
// (in-memory store, HTTP on a free loopback port) with httplib::Client:
// authentication, /healthz, /metrics, the JSON of a finished zoo:mlp job
// (baseline table, iteration times, progress history, timeline, predicted vs
// measured after a rank's report), errors.
#include "server/http_status.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "braid/v1/strategy.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/job_history.h"
#include "server/server.h"

namespace braid::server {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kClientToken[] = "client-secret";
constexpr char kWorkerToken[] = "worker-secret";

httplib::Headers Bearer(const std::string& token = kClientToken) {
  return {{"Authorization", "Bearer " + token}};
}

nlohmann::json Json(const httplib::Result& r) {
  return nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
}

// A server on an in-memory database, gRPC in-process only, HTTP on a free
// loopback port.
ServerOptions InMemoryServerOptions(int http_threads) {
  ServerOptions o;
  o.listen = "";
  o.http_listen = "127.0.0.1:0";
  o.http_threads = http_threads;
  o.db_path = ":memory:";
  o.client_token = kClientToken;
  o.worker_token = kWorkerToken;
  o.shutdown_grace_s = 0.2;
  return o;
}

class HttpStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = InMemoryServerOptions(/*http_threads=*/4);
    o.http_max_payload_bytes = 1024;
    absl::StatusOr<std::unique_ptr<BraidServer>> s = StartServer(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ASSERT_GT(server_->http_port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    client_->set_read_timeout(30, 0);
    stub_ = v1::Strategy::NewStub(server_->InProcessChannel());
  }

  // Submits zoo:mlp on cpu-local (2 ranks) and waits until it is final.
  std::string SubmitMlpAndWait() {
    v1::SubmitGraphRequest req;
    req.set_zoo_model("mlp");
    req.set_cluster_preset("cpu-local");
    req.mutable_options()->set_ranks(2);
    req.mutable_options()->set_seed(11);
    req.mutable_options()->set_budget_s(20);
    req.mutable_options()->set_patience(4);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Bearer ") + kClientToken);
    v1::SubmitGraphResponse resp;
    grpc::Status st = stub_->SubmitGraph(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    for (int i = 0; i < 3000; ++i) {
      absl::StatusOr<JobRecord> r = server_->jobs().Get(resp.job_id());
      if (r.ok() && IsFinal(r->phase)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    credentials_[resp.job_id()] = resp.report_credential();
    return resp.job_id();
  }

  std::map<std::string, std::string> credentials_;  // job -> report credential
  std::unique_ptr<BraidServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::unique_ptr<v1::Strategy::Stub> stub_;
};

TEST_F(HttpStatusTest, HealthzNeedsNoToken) {
  httplib::Result r = client_->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
}

TEST_F(HttpStatusTest, EveryOtherPathNeedsTheClientToken) {
  for (const char* path : {"/", "/api/v1/jobs", "/api/v1/workers", "/metrics",
                           "/api/v1/jobs/job-0123456789abcdef"}) {
    httplib::Result none = client_->Get(path);
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_THAT(Json(none).value("error", ""), HasSubstr("missing bearer token")) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"braid\"");
    httplib::Result wrong = client_->Get(path, Bearer("client-secreT"));
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    EXPECT_EQ(Json(wrong).value("error", ""), "invalid bearer token") << path;
    // The worker token is not a client token.
    httplib::Result worker = client_->Get(path, Bearer(kWorkerToken));
    ASSERT_TRUE(worker);
    EXPECT_EQ(worker->status, 401) << path;
  }
  httplib::Result ok = client_->Get("/api/v1/jobs", Bearer());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, R"({"jobs":[]})");
  EXPECT_EQ(ok->get_header_value("Content-Type"), "application/json");
}

TEST_F(HttpStatusTest, DashboardTakesTheTokenFromTheQueryStringOnly) {
  httplib::Result page = client_->Get("/?token=client-secret");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page->get_header_value("Referrer-Policy"), "no-referrer");
  EXPECT_THAT(page->body, HasSubstr("<title>braid status</title>"));
  EXPECT_THAT(page->body, HasSubstr(R"(<tbody id="baselines">)"));
  EXPECT_THAT(page->body, Not(HasSubstr("<script src")));  // everything inline
  httplib::Result header = client_->Get("/", Bearer());
  ASSERT_TRUE(header);
  EXPECT_EQ(header->status, 200);
  EXPECT_EQ(client_->Get("/?token=wrong")->status, 401);
  // The API itself never takes the token from the URL.
  EXPECT_EQ(client_->Get("/api/v1/jobs?token=client-secret")->status, 401);
}

TEST_F(HttpStatusTest, ErrorsAreJsonWithProperCodes) {
  httplib::Result unknown = client_->Get("/api/v1/jobs/job-0123456789abcdef", Bearer());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_THAT(Json(unknown).value("error", ""), HasSubstr("job-0123456789abcdef"));
  httplib::Result bad = client_->Get("/api/v1/jobs/xyz", Bearer());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json(bad).value("error", ""), "bad job id 'xyz': expected job-<16 hex digits>");
  EXPECT_EQ(client_->Get("/api/v1/jobs/JOB-0123456789ABCDEF", Bearer())->status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs/xyz/timeline", Bearer())->status, 400);
  httplib::Result no_path = client_->Get("/api/v1/nope", Bearer());
  ASSERT_TRUE(no_path);
  EXPECT_EQ(no_path->status, 404);
  EXPECT_EQ(Json(no_path).value("error", ""), "no such path: /api/v1/nope");
  httplib::Result limit = client_->Get("/api/v1/jobs?limit=0", Bearer());
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->status, 400);
  EXPECT_EQ(Json(limit).value("error", ""), "limit: expected 1..1000, got '0'");
  // http_max_payload_bytes = 1024.
  httplib::Result big =
      client_->Post("/api/v1/jobs", Bearer(), std::string(4096, 'x'), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(Json(big).value("error", ""), "request too large");
}

TEST_F(HttpStatusTest, MetricsHaveTheDocumentedSeries) {
  ASSERT_EQ(client_->Get("/api/v1/jobs")->status, 401);
  ASSERT_EQ(client_->Get("/api/v1/jobs", Bearer())->status, 200);
  ASSERT_EQ(client_->Get("/api/v1/jobs", Bearer())->status, 200);
  ASSERT_TRUE(server_->tasks().Register("gpu-node-1", "cpu:test", 2).ok());
  httplib::Result m = client_->Get("/metrics", Bearer());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  for (const char* line :
       {"# TYPE braid_jobs gauge\n", "braid_jobs{phase=\"queued\"} 0\n",
        "braid_jobs{phase=\"searching\"} 0\n", "braid_jobs{phase=\"done\"} 0\n",
        "braid_jobs{phase=\"cancelled\"} 0\n", "braid_job_queue_depth 0\n",
        "braid_searches_running 0\n", "# TYPE braid_candidates_evaluated_total counter\n",
        "braid_candidates_evaluated_total 0\n", "braid_plan_cache_hits_total 0\n",
        "braid_plan_cache_misses_total 0\n", "braid_workers_live 1\n",
        "braid_workers_registered 1\n", "# TYPE braid_http_requests_total counter\n",
        "braid_http_requests_total{path=\"/api/v1/jobs\",code=\"200\"} 2\n",
        "braid_http_requests_total{path=\"/api/v1/jobs\",code=\"401\"} 1\n",
        "# TYPE braid_http_connections_open gauge\nbraid_http_connections_open ",
        "# TYPE braid_http_connections_closed_total counter\n",
        "braid_http_connections_closed_total{reason=\"header_timeout\"} 0\n",
        "braid_http_connections_closed_total{reason=\"client_limit\"} 0\n"}) {
    EXPECT_THAT(m->body, HasSubstr(line));
  }
}

TEST_F(HttpStatusTest, WorkersListTheirLastHeartbeat) {
  absl::StatusOr<WorkerRecord> w = server_->tasks().Register("gpu-node-1", "cpu:test", 2);
  ASSERT_TRUE(w.ok());
  httplib::Result r = client_->Get("/api/v1/workers", Bearer());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  nlohmann::json j = Json(r);
  ASSERT_EQ(j["workers"].size(), 1u);
  const nlohmann::json& e = j["workers"][0];
  EXPECT_EQ(e["id"], w->id);
  EXPECT_EQ(e["name"], "gpu-node-1");
  EXPECT_EQ(e["device_kind"], "cpu:test");
  EXPECT_EQ(e["slots"], 2);
  EXPECT_DOUBLE_EQ(e["last_heartbeat_unix_s"].get<double>(), w->last_heartbeat_unix_s);
  EXPECT_EQ(e["live"], true);
  EXPECT_EQ(j["worker_timeout_s"], 30.0);
}

TEST_F(HttpStatusTest, FinishedMlpJobHasBaselinesIterationTimesAndTimeline) {
  const std::string id = SubmitMlpAndWait();
  absl::StatusOr<JobRecord> rec = server_->jobs().Get(id);
  ASSERT_TRUE(rec.ok());
  ASSERT_EQ(rec->phase, JobPhase::kDone) << rec->error;
  absl::StatusOr<JobPlan> plan = server_->jobs().GetPlan(id);
  ASSERT_TRUE(plan.ok());
  const nlohmann::json stored = nlohmann::json::parse(plan->record.baselines_json);

  httplib::Result r = client_->Get("/api/v1/jobs/" + id, Bearer());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  nlohmann::json j = Json(r);
  EXPECT_EQ(j["id"], id);
  EXPECT_EQ(j["phase"], "done");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_DOUBLE_EQ(j["best_cost_s"].get<double>(), plan->record.predicted_s);
  EXPECT_EQ(j["candidates_evaluated"], rec->candidates);
  const nlohmann::json& p = j["plan"];
  EXPECT_DOUBLE_EQ(p["iteration_s"].get<double>(), plan->record.predicted_s);
  EXPECT_DOUBLE_EQ(p["fo_bound_s"].get<double>(), plan->record.fo_bound_s);
  EXPECT_EQ(p["origin"], plan->record.origin);
  ASSERT_EQ(p["baselines"].size(), 6u);
  ASSERT_EQ(stored.size(), 6u);
  EXPECT_EQ(p["baselines"][0]["name"], "no_fusion");
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p["baselines"][i]["name"], stored[i]["name"]);
    EXPECT_DOUBLE_EQ(p["baselines"][i]["iteration_s"].get<double>(),
                     stored[i]["iteration_s"].get<double>());
    // braid's plan is never slower than a baseline it started from.
    EXPECT_LE(p["iteration_s"].get<double>(), p["baselines"][i]["iteration_s"].get<double>());
  }
  // braid's row has its compute and comm figures; nothing measured yet.
  EXPECT_DOUBLE_EQ(p["compute_s"].get<double>(), plan->record.compute_s);
  EXPECT_DOUBLE_EQ(p["comm_s"].get<double>(), plan->record.comm_s);
  EXPECT_GT(p["overlap_ratio"].get<double>(), 0);
  EXPECT_EQ(p["rolled_back"], false);
  EXPECT_TRUE(j["measured_iteration_s"].is_null());
  EXPECT_TRUE(j["predicted_iteration_s"].is_null());
  // The history ends with the final record's checkpoint.
  const nlohmann::json& h = j["history"];
  ASSERT_GE(h.size(), 1u);
  EXPECT_DOUBLE_EQ(h.back()[0].get<double>(), rec->elapsed_s);
  EXPECT_DOUBLE_EQ(h.back()[1].get<double>(), rec->best_cost_s);
  EXPECT_EQ(h.back()[2], rec->candidates);

  // The list shows it, and the same body twice (the cached rendering).
  httplib::Result list = client_->Get("/api/v1/jobs", Bearer());
  ASSERT_TRUE(list);
  nlohmann::json jl = Json(list);
  ASSERT_EQ(jl["jobs"].size(), 1u);
  EXPECT_EQ(jl["jobs"][0]["id"], id);
  EXPECT_EQ(jl["jobs"][0]["phase"], "done");
  EXPECT_EQ(client_->Get("/api/v1/jobs", Bearer())->body, list->body);

  // The timeline re-simulates the stored plan: same cost model, same time.
  httplib::Result t = client_->Get("/api/v1/jobs/" + id + "/timeline", Bearer());
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  nlohmann::json tj = Json(t);
  EXPECT_DOUBLE_EQ(tj["iteration_s"].get<double>(), plan->record.predicted_s);
  EXPECT_EQ(tj["lanes"][0], "compute 0");
  EXPECT_EQ(tj["truncated"], false);
  ASSERT_EQ(tj["tasks"].size(), tj["task_count"].get<size_t>());
  ASSERT_GT(tj["tasks"].size(), 0u);
  double last_end = 0;
  for (const nlohmann::json& task : tj["tasks"]) {
    EXPECT_LE(task[1].get<double>(), task[2].get<double>());
    last_end = std::max(last_end, task[2].get<double>());
  }
  EXPECT_DOUBLE_EQ(last_end, plan->record.predicted_s);
  httplib::Result trace = client_->Get("/api/v1/jobs/" + id + "/trace", Bearer());
  ASSERT_TRUE(trace);
  ASSERT_EQ(trace->status, 200);
  nlohmann::json trj = Json(trace);
  ASSERT_TRUE(trj.contains("traceEvents"));
  EXPECT_GE(trj["traceEvents"].size(), tj["tasks"].size());

  // Metrics count the search; a second identical job is a plan-cache hit.
  const std::string again = SubmitMlpAndWait();
  EXPECT_EQ(server_->jobs().Get(again)->phase, JobPhase::kDone);
  httplib::Result m = client_->Get("/metrics", Bearer());
  ASSERT_TRUE(m);
  EXPECT_THAT(m->body, HasSubstr("braid_jobs{phase=\"done\"} 2\n"));
  EXPECT_THAT(m->body, HasSubstr("braid_plan_cache_hits_total 1\n"));
  EXPECT_THAT(m->body, HasSubstr("braid_plan_cache_misses_total 1\n"));
  EXPECT_THAT(m->body, Not(HasSubstr("braid_candidates_evaluated_total 0\n")));
  nlohmann::json cached = Json(client_->Get("/api/v1/jobs/" + again, Bearer()));
  EXPECT_EQ(cached["from_cache"], true);
  EXPECT_EQ(cached["history"], nlohmann::json::array());
  EXPECT_DOUBLE_EQ(cached["plan"]["iteration_s"].get<double>(), plan->record.predicted_s);

  // A training rank's report shows up in the memoized job (predicted vs
  // measured) and in the list.
  absl::StatusOr<StartedRun> run =
      server_->jobs().feedback().StartRun({id, credentials_[id], 2, "test", ""});
  ASSERT_TRUE(run.ok()) << run.status();
  for (int rank = 0; rank < 2; ++rank) {
    MeasurementReport report;
    report.job_id = id;
    report.rank = rank;
    report.world_size = 2;
    report.plan_s = {0.020, 0.030, 0.025};
    report.credential = credentials_[id];
    report.attempt_id = run->attempt_id;
    ASSERT_TRUE(server_->jobs().ReportMeasurement(report).ok());
  }
  nlohmann::json measured = Json(client_->Get("/api/v1/jobs/" + id, Bearer()));
  EXPECT_DOUBLE_EQ(measured["measured_iteration_s"].get<double>(), 0.025);
  EXPECT_DOUBLE_EQ(measured["predicted_iteration_s"].get<double>(), plan->record.predicted_s);
  EXPECT_TRUE(measured["measured_baseline_s"].is_null());
  EXPECT_EQ(measured["rolled_back"], false);
  nlohmann::json listed = Json(client_->Get("/api/v1/jobs", Bearer()));
  bool seen = false;
  for (const nlohmann::json& job : listed["jobs"]) {
    if (job["id"] != id) continue;
    seen = true;
    EXPECT_DOUBLE_EQ(job["measured_iteration_s"].get<double>(), 0.025);
  }
  EXPECT_TRUE(seen);
}

TEST_F(HttpStatusTest, FailedJobHasNoPlanOrTimeline) {
  JobRecord rec;
  rec.id = "job-00000000000000aa";
  rec.name = "broken";
  rec.forward_fingerprint = "f0";
  rec.cluster_fingerprint = "c0";
  rec.phase = JobPhase::kFailed;
  rec.error = "model: boom";
  ASSERT_TRUE(server_->store().InsertJob(&rec, "graph text", "{}").ok());
  httplib::Result r = client_->Get("/api/v1/jobs/" + rec.id, Bearer());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  nlohmann::json j = Json(r);
  EXPECT_EQ(j["phase"], "failed");
  EXPECT_EQ(j["error"], "model: boom");
  EXPECT_EQ(j["name"], "broken");
  EXPECT_FALSE(j.contains("plan"));
  httplib::Result t = client_->Get("/api/v1/jobs/" + rec.id + "/timeline", Bearer());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 409);
  EXPECT_EQ(Json(t).value("error", ""), "job job-00000000000000aa is failed: no plan");
  EXPECT_THAT(client_->Get("/metrics", Bearer())->body,
              HasSubstr("braid_jobs{phase=\"failed\"} 1\n"));
}

// Slowloris: with one processing thread, clients that send a header line
// now and then must not hold it; /healthz answers meanwhile.
TEST(HttpStatusGuardTest, SlowHeadersAreClosedWhileHealthzAnswers) {
  ServerOptions o = InMemoryServerOptions(/*http_threads=*/1);
  o.http_guard.header_timeout_s = 1;
  absl::StatusOr<std::unique_ptr<BraidServer>> s = StartServer(o);
  ASSERT_TRUE(s.ok()) << s.status();
  const int port = (*s)->http_port();
  std::vector<std::thread> senders;
  std::vector<std::string> answers(3);
  for (int i = 0; i < 3; ++i) {
    // A header line every 0.2 s through a raw socket, until the server
    // closes it.
    senders.emplace_back([port, &answers, i] {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
      std::string line = "GET /healthz HTTP/1.1\r\n";
      for (int n = 0; n < 50; ++n) {
        if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0) break;
        line = "X-Slow: 1\r\n";
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0) {
          char buf[512];
          const ssize_t got = recv(fd, buf, sizeof(buf), 0);
          if (got <= 0) break;
          answers[i].append(buf, static_cast<size_t>(got));
        }
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(1, 0);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    httplib::Result r = c.Get("/healthz");
    ASSERT_TRUE(r) << "/healthz did not answer within 1 s";
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  }
  for (std::thread& t : senders) t.join();  // each ends when the server closes it
  for (const std::string& a : answers) EXPECT_THAT(a, HasSubstr("408 Request Timeout"));
  c.set_read_timeout(5, 0);
  httplib::Result m = c.Get("/metrics", Bearer());
  ASSERT_TRUE(m);
  EXPECT_THAT(m->body,
              HasSubstr("braid_http_connections_closed_total{reason=\"header_timeout\"} 3\n"));
}

TEST(ParseHostPortTest, AcceptsHostPortAndBracketedIpv6) {
  EXPECT_EQ(*ParseHostPort("127.0.0.1:8080", "--http-listen"), std::make_pair(std::string("127.0.0.1"), 8080));
  EXPECT_EQ(*ParseHostPort("[::1]:0", "--http-listen"), std::make_pair(std::string("::1"), 0));
  for (const char* bad : {"8080", ":8080", "host:", "host:65536", "host:-1", "host:80x"}) {
    absl::StatusOr<std::pair<std::string, int>> r = ParseHostPort(bad, "--http-listen");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--http-listen")) << bad;
  }
}

TEST(HttpStatusStartTest, RejectsBadOptions) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok());
  JobManager jobs(store->get(), nullptr, nullptr, {});
  HttpStatusOptions o;
  o.listen = "127.0.0.1:0";
  EXPECT_EQ(HttpStatusServer::Start(o, {&jobs, store->get()}).status().code(),
            absl::StatusCode::kInvalidArgument);  // no token
  o.client_token = "t";
  o.tls_cert_path = "/nonexistent/cert.pem";
  EXPECT_EQ(HttpStatusServer::Start(o, {&jobs, store->get()}).status().code(),
            absl::StatusCode::kInvalidArgument);  // cert without key
  o.tls_key_path = "/nonexistent/key.pem";
  absl::StatusOr<std::unique_ptr<HttpStatusServer>> tls = HttpStatusServer::Start(o, {&jobs, store->get()});
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tls.status().message()), HasSubstr("/nonexistent/cert.pem"));
  o.tls_cert_path.clear();
  o.tls_key_path.clear();
  o.guard.header_timeout_s = 0;
  absl::StatusOr<std::unique_ptr<HttpStatusServer>> guard =
      HttpStatusServer::Start(o, {&jobs, store->get()});
  EXPECT_EQ(guard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(guard.status().message()), HasSubstr("--http-header-timeout-s"));
}

TEST(JobHistoryTest, HalvesWhenFullKeepingFirstAndNewest) {
  JobHistory h({.max_points = 4, .max_jobs = 2});
  JobRecord r;
  r.id = "job-a";
  r.best_cost_s = 0;  // search not started: nothing recorded
  h.Record(r);
  EXPECT_TRUE(h.Get("job-a").empty());
  for (int i = 1; i <= 5; ++i) {
    r.elapsed_s = i;
    r.best_cost_s = 10 - i;
    r.candidates = 100 * i;
    h.Record(r);
    h.Record(r);  // unchanged: not repeated
  }
  // Points 1..4 filled the history; point 5 halved it to 1, 3 (and 4, the
  // newest) then appended 5.
  std::vector<ProgressPoint> got = h.Get("job-a");
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], (ProgressPoint{1, 9, 100}));
  EXPECT_EQ(got[1], (ProgressPoint{3, 7, 300}));
  EXPECT_EQ(got[2], (ProgressPoint{4, 6, 400}));
  EXPECT_EQ(got[3], (ProgressPoint{5, 5, 500}));
  // A third job evicts the first.
  r.id = "job-b";
  h.Record(r);
  r.id = "job-c";
  h.Record(r);
  EXPECT_TRUE(h.Get("job-a").empty());
  EXPECT_EQ(h.Get("job-c").size(), 1u);
}

}  // namespace
}  // namespace braid::server
