#include "server/http_status.h"

#include <atomic>
#include <cctype>
#include <charconv>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/dashboard_html.h"
#include "server/job_history.h"
#include "server/status_json.h"

namespace braid::server {

namespace {

constexpr char kJson[] = "application/json";

// A small insertion-ordered memo: the newest `capacity` entries.
template <typename V>
class Memo {
 public:
  explicit Memo(size_t capacity) : capacity_(capacity) {}
  std::optional<V> Get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void Put(const std::string& key, V value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.insert_or_assign(key, std::move(value)).second) {
      order_.push_back(key);
      if (order_.size() > capacity_) {
        map_.erase(order_.front());
        order_.pop_front();
      }
    }
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::map<std::string, V> map_;
  std::deque<std::string> order_;
};

// Same time for every wrong token of the right length.
bool TokenEquals(std::string_view given, std::string_view token) {
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(token[i]);
  }
  return diff == 0;
}

bool ValidJobId(const std::string& id) {
  if (id.size() != 20 || id.compare(0, 4, "job-") != 0) return false;
  for (size_t i = 4; i < id.size(); ++i) {
    const char c = id[i];
    if (!(('0' <= c && c <= '9') || ('a' <= c && c <= 'f'))) return false;
  }
  return true;
}

int HttpCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

void SetError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(nlohmann::json{{"error", message}}.dump(), kJson);
}

void SetStatusError(httplib::Response& res, const absl::Status& s) {
  SetError(res, HttpCode(s), std::string(s.message()));
}

// The route a request path belongs to: bounded label values for /metrics.
std::string PathLabel(const std::string& path) {
  static const char* const kFixed[] = {"/", "/healthz", "/metrics", "/api/v1/jobs",
                                       "/api/v1/workers"};
  for (const char* p : kFixed) {
    if (path == p) return p;
  }
  constexpr std::string_view kJobs = "/api/v1/jobs/";
  if (path.size() > kJobs.size() && path.compare(0, kJobs.size(), kJobs) == 0) {
    const std::string rest = path.substr(kJobs.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) return "/api/v1/jobs/{id}";
    const std::string sub = rest.substr(slash);
    if (sub == "/timeline" || sub == "/trace") return absl::StrCat("/api/v1/jobs/{id}", sub);
  }
  return "other";
}

}  // namespace

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& address,
                                                          const std::string& flag) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected host:port, got '", address, "'"));
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = address.substr(colon + 1);
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535 || host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected host:port with port 0..65535, got '", address, "'"));
  }
  return std::make_pair(host, port);
}

struct HttpStatusServer::Impl {
  Impl(const HttpStatusOptions& o, HttpStatusSources s)
      : options(o), src(s), job_memo(512), timeline_memo(32) {}

  HttpStatusOptions options;
  HttpStatusSources src;
  std::unique_ptr<GuardedHttpServer> guarded;
  httplib::Server* http = nullptr;  // guarded->http()
  std::thread thread;
  int port = 0;
  bool tls = false;
  bool stopped = false;

  JobHistory history;
  int64_t subscription = 0;

  // /api/v1/jobs bodies by limit, valid while ChangeCount() is unchanged.
  std::mutex list_mu;
  std::map<int, std::pair<int64_t, std::shared_ptr<const std::string>>> list_cache;
  // Finished jobs' detail bodies and timelines, each with the
  // JobManager::FeedbackVersion() it was rendered at: a measurement report
  // (measured figures, a rollback that replaced the plan) makes them stale.
  Memo<std::pair<int64_t, std::shared_ptr<const std::string>>> job_memo;
  Memo<std::pair<int64_t, std::shared_ptr<const JobTimeline>>> timeline_memo;

  std::mutex metrics_mu;
  std::map<std::pair<std::string, int>, int64_t> requests;

  bool Authorized(const httplib::Request& req) const;
  void Route();
  void ServeJobs(const httplib::Request& req, httplib::Response& res);
  void ServeJob(const std::string& id, httplib::Response& res);
  void ServeTimeline(const std::string& id, bool chrome, httplib::Response& res);
  void ServeWorkers(httplib::Response& res);
  void ServeMetrics(httplib::Response& res);
  double WorkerTimeout() const {
    return src.tasks != nullptr ? src.tasks->options().worker_timeout_s : TaskQueueOptions{}.worker_timeout_s;
  }
};

bool HttpStatusServer::Impl::Authorized(const httplib::Request& req) const {
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0 &&
      TokenEquals(std::string_view(header).substr(kBearer.size()), options.client_token)) {
    return true;
  }
  // A browser navigation cannot carry the header: the dashboard page alone
  // takes the token from the query string.
  return req.path == "/" && req.has_param("token") &&
         TokenEquals(req.get_param_value("token"), options.client_token);
}

void HttpStatusServer::Impl::Route() {
  httplib::Server& s = *http;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz" || Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer realm=\"braid\"");
    SetError(res, 401,
             req.has_header("Authorization") || req.has_param("token")
                 ? "invalid bearer token"
                 : "missing bearer token: send 'Authorization: Bearer <client token>' "
                   "(the dashboard at / also takes ?token=)");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = absl::StrCat("HTTP status ", res.status);
    if (res.status == 400) message = "malformed request";
    if (res.status == 404) message = absl::StrCat("no such path: ", req.path);
    if (res.status == 413) message = "request too large";
    if (res.status == 414) message = "request URI too long";
    res.set_content(nlohmann::json{{"error", message}}.dump(), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = absl::StrCat("internal error: ", e.what());
    } catch (...) {
    }
    LOG(ERROR) << "http status: " << what;
    SetError(res, 500, what);
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(metrics_mu);
    ++requests[{PathLabel(req.path), res.status}];
  });

  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJson);
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    // The token may be in this page's URL: never send it on as a referrer.
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src data:");
    const std::string_view html = DashboardHtml();
    res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
  });
  s.Get("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    ServeJobs(req, res);
  });
  s.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    ServeJob(req.matches[1], res);
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/timeline)",
        [this](const httplib::Request& req, httplib::Response& res) {
          ServeTimeline(req.matches[1], /*chrome=*/false, res);
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/trace)", [this](const httplib::Request& req, httplib::Response& res) {
    ServeTimeline(req.matches[1], /*chrome=*/true, res);
  });
  s.Get("/api/v1/workers", [this](const httplib::Request&, httplib::Response& res) {
    ServeWorkers(res);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { ServeMetrics(res); });
}

void HttpStatusServer::Impl::ServeJobs(const httplib::Request& req, httplib::Response& res) {
  int limit = options.default_list_limit;
  if (req.has_param("limit")) {
    const std::string text = req.get_param_value("limit");
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
    if (ec != std::errc() || end != text.data() + text.size() || limit < 1 || limit > 1000) {
      return SetError(res, 400, absl::StrCat("limit: expected 1..1000, got '", text, "'"));
    }
  }
  // Read the count before the jobs: a change while rendering leaves an
  // entry that the next request sees as stale.
  const int64_t changes = src.jobs->ChangeCount();
  {
    std::lock_guard<std::mutex> lock(list_mu);
    auto it = list_cache.find(limit);
    if (it != list_cache.end() && it->second.first == changes) {
      return res.set_content(*it->second.second, kJson);
    }
  }
  absl::StatusOr<std::vector<JobRecord>> jobs = src.jobs->List(limit);
  if (!jobs.ok()) return SetStatusError(res, jobs.status());
  nlohmann::json arr = nlohmann::json::array();
  for (const JobRecord& r : *jobs) arr.push_back(JobJson(r));
  auto body = std::make_shared<const std::string>(nlohmann::json{{"jobs", std::move(arr)}}.dump());
  {
    std::lock_guard<std::mutex> lock(list_mu);
    list_cache.insert_or_assign(limit, std::make_pair(changes, body));
  }
  res.set_content(*body, kJson);
}

void HttpStatusServer::Impl::ServeJob(const std::string& id, httplib::Response& res) {
  if (!ValidJobId(id)) return SetError(res, 400, absl::StrCat("bad job id '", id, "': expected job-<16 hex digits>"));
  const int64_t feedback = src.jobs->FeedbackVersion();
  if (std::optional<std::pair<int64_t, std::shared_ptr<const std::string>>> hit = job_memo.Get(id);
      hit.has_value() && hit->first == feedback) {
    return res.set_content(*hit->second, kJson);
  }
  absl::StatusOr<JobRecord> rec = src.jobs->Get(id);
  if (!rec.ok()) return SetStatusError(res, rec.status());
  nlohmann::json j = JobJson(*rec);
  j["history"] = HistoryJson(history.Get(id));
  if (rec->phase == JobPhase::kDone) {
    absl::StatusOr<std::optional<PlanRecord>> plan = src.store->GetPlan(rec->plan_key);
    if (!plan.ok()) return SetStatusError(res, plan.status());
    if (!plan->has_value()) return SetError(res, 500, absl::StrCat("job ", id, " is done but its plan is missing"));
    absl::StatusOr<nlohmann::json> summary = PlanSummaryJson(**plan);
    if (!summary.ok()) return SetStatusError(res, summary.status());
    j["plan"] = *std::move(summary);
  }
  auto body = std::make_shared<const std::string>(j.dump());
  if (IsFinal(rec->phase)) job_memo.Put(id, {feedback, body});
  res.set_content(*body, kJson);
}

void HttpStatusServer::Impl::ServeTimeline(const std::string& id, bool chrome,
                                           httplib::Response& res) {
  if (!ValidJobId(id)) return SetError(res, 400, absl::StrCat("bad job id '", id, "': expected job-<16 hex digits>"));
  const int64_t feedback = src.jobs->FeedbackVersion();
  std::optional<std::shared_ptr<const JobTimeline>> t;
  if (auto hit = timeline_memo.Get(id); hit.has_value() && hit->first == feedback) t = hit->second;
  if (!t.has_value()) {
    absl::StatusOr<JobRecord> rec = src.jobs->Get(id);
    if (!rec.ok()) return SetStatusError(res, rec.status());
    absl::StatusOr<JobTimeline> sim =
        SimulateJobPlan(*src.store, src.profiles, *rec, options.max_gantt_tasks);
    if (!sim.ok()) return SetStatusError(res, sim.status());
    t = std::make_shared<const JobTimeline>(*std::move(sim));
    timeline_memo.Put(id, {feedback, *t});
  }
  if (chrome) {
    res.set_header("Content-Disposition", absl::StrCat("attachment; filename=\"", id, ".trace.json\""));
    return res.set_content((*t)->chrome_trace, kJson);
  }
  res.set_content((*t)->gantt.dump(), kJson);
}

void HttpStatusServer::Impl::ServeWorkers(httplib::Response& res) {
  absl::StatusOr<std::vector<WorkerRecord>> workers = src.store->ListWorkers();
  if (!workers.ok()) return SetStatusError(res, workers.status());
  const double now = NowUnixSeconds();
  const double timeout = WorkerTimeout();
  nlohmann::json arr = nlohmann::json::array();
  for (const WorkerRecord& w : *workers) arr.push_back(WorkerJson(w, now, timeout));
  res.set_content(nlohmann::json{{"workers", std::move(arr)}, {"worker_timeout_s", timeout}}.dump(),
                  kJson);
}

void HttpStatusServer::Impl::ServeMetrics(httplib::Response& res) {
  absl::StatusOr<std::vector<std::pair<JobPhase, int64_t>>> phases = src.store->CountJobsByPhase();
  if (!phases.ok()) return SetStatusError(res, phases.status());
  absl::StatusOr<std::vector<WorkerRecord>> workers = src.store->ListWorkers();
  if (!workers.ok()) return SetStatusError(res, workers.status());
  const JobManagerStats st = src.jobs->Stats();
  std::string out;
  auto head = [&](const char* name, const char* type, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  head("braid_jobs", "gauge", "Jobs in the store by phase.");
  for (JobPhase p : {JobPhase::kQueued, JobPhase::kImporting, JobPhase::kProfiling,
                     JobPhase::kSearching, JobPhase::kDone, JobPhase::kFailed,
                     JobPhase::kCancelled}) {
    int64_t n = 0;
    for (const auto& [phase, count] : *phases) n += phase == p ? count : 0;
    absl::StrAppend(&out, "braid_jobs{phase=\"", std::string(JobPhaseName(p)), "\"} ", n, "\n");
  }
  head("braid_job_queue_depth", "gauge", "Jobs waiting for a search runner.");
  absl::StrAppend(&out, "braid_job_queue_depth ", st.queued, "\n");
  head("braid_searches_running", "gauge", "Jobs being imported, profiled or searched.");
  absl::StrAppend(&out, "braid_searches_running ", st.running, "\n");
  head("braid_candidates_evaluated_total", "counter",
       "Candidate plans costed by the searches of this process.");
  absl::StrAppend(&out, "braid_candidates_evaluated_total ", st.candidates_evaluated, "\n");
  head("braid_plan_cache_hits_total", "counter", "Jobs served from the plan cache.");
  absl::StrAppend(&out, "braid_plan_cache_hits_total ", st.plan_cache_hits, "\n");
  head("braid_plan_cache_misses_total", "counter", "Jobs that missed the plan cache and searched.");
  absl::StrAppend(&out, "braid_plan_cache_misses_total ", st.plan_cache_misses, "\n");
  const double since = NowUnixSeconds() - WorkerTimeout();
  int live = 0;
  for (const WorkerRecord& w : *workers) live += w.last_heartbeat_unix_s >= since ? 1 : 0;
  head("braid_workers_live", "gauge", "Workers with a heartbeat within the worker timeout.");
  absl::StrAppend(&out, "braid_workers_live ", live, "\n");
  head("braid_workers_registered", "gauge", "Workers ever registered in the store.");
  absl::StrAppend(&out, "braid_workers_registered ", workers->size(), "\n");
  head("braid_http_requests_total", "counter", "HTTP requests answered, by route and status code.");
  {
    std::lock_guard<std::mutex> lock(metrics_mu);
    for (const auto& [key, n] : requests) {
      absl::StrAppend(&out, "braid_http_requests_total{path=\"", key.first, "\",code=\"",
                      key.second, "\"} ", n, "\n");
    }
  }
  const HttpGuardStats guard = guarded->Stats();
  head("braid_http_connections_open", "gauge", "HTTP connections open now.");
  absl::StrAppend(&out, "braid_http_connections_open ", guard.open_connections, "\n");
  head("braid_http_connections_closed_total", "counter",
       "HTTP connections refused or closed early, by reason (caps, deadlines, header size).");
  for (const auto& [reason, n] : guard.closed) {
    absl::StrAppend(&out, "braid_http_connections_closed_total{reason=\"", reason, "\"} ", n,
                    "\n");
  }
  res.set_content(out, "text/plain; version=0.0.4; charset=utf-8");
}

HttpStatusServer::HttpStatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpStatusServer::~HttpStatusServer() { Stop(); }

int HttpStatusServer::port() const { return impl_->port; }
bool HttpStatusServer::tls() const { return impl_->tls; }

void HttpStatusServer::Stop() {
  if (impl_ == nullptr || impl_->stopped) return;
  impl_->stopped = true;
  impl_->guarded->Shutdown();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->src.jobs->Unsubscribe(impl_->subscription);
}

absl::StatusOr<std::unique_ptr<HttpStatusServer>> HttpStatusServer::Start(
    const HttpStatusOptions& options, HttpStatusSources sources) {
  CHECK(sources.jobs != nullptr && sources.store != nullptr);
  if (options.client_token.empty()) {
    return absl::InvalidArgumentError("--client-token must be set for the HTTP endpoint");
  }
  if (options.threads < 1 || options.threads > 4096) {
    return absl::InvalidArgumentError("--http-threads must be in [1, 4096]");
  }
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  ASSIGN_OR_RETURN(auto addr, ParseHostPort(options.listen, "--http-listen"));
  auto impl = std::make_unique<Impl>(options, sources);
  ASSIGN_OR_RETURN(std::unique_ptr<GuardedHttpServer> guarded,
                   GuardedHttpServer::Create(options.guard, options.threads, options.tls_cert_path,
                                             options.tls_key_path));
  impl->guarded = std::move(guarded);
  impl->http = &impl->guarded->http();
  impl->tls = impl->guarded->tls();
  impl->http->set_payload_max_length(options.max_payload_bytes);
  // Without it, small responses wait for the peer's delayed ACK (about 40
  // ms per request on Linux).
  impl->http->set_tcp_nodelay(true);
  // httplib binds with SO_REUSEPORT by default, which lets a second server
  // listen on the same port; SO_REUSEADDR alone still allows a quick restart.
  impl->http->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->Route();
  const auto& [host, port] = addr;
  if (port == 0) {
    impl->port = impl->http->bind_to_any_port(host);
  } else {
    impl->port = impl->http->bind_to_port(host, port) ? port : -1;
  }
  if (impl->port <= 0) {
    return absl::UnavailableError(absl::StrCat("--http-listen: cannot listen on ", options.listen));
  }
  Impl* raw = impl.get();
  impl->subscription =
      sources.jobs->SubscribeAll([raw](const JobRecord& r, int64_t) { raw->history.Record(r); });
  impl->thread = std::thread([raw] {
    if (!raw->http->listen_after_bind()) LOG(ERROR) << "http status: listening stopped with an error";
  });
  return std::unique_ptr<HttpStatusServer>(new HttpStatusServer(std::move(impl)));
}

}  // namespace braid::server
