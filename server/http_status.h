// braid-server's HTTP status endpoint (cpp-httplib): an HTML dashboard and a
// read-only JSON API over the job manager, the store and the task queue.
//
//   GET /                          the dashboard (server/dashboard_html.h)
//   GET /api/v1/jobs[?limit=N]     {"jobs": [JobJson...]}, newest first
//   GET /api/v1/jobs/{id}          JobJson (with predicted vs measured iteration time)
//                                  + "history" (+ "plan" when done)
//   GET /api/v1/jobs/{id}/timeline the simulated iteration as a Gantt (done jobs)
//   GET /api/v1/jobs/{id}/trace    the same iteration as Chrome trace JSON
//   GET /api/v1/workers            {"workers": [WorkerJson...], "worker_timeout_s"}
//   GET /metrics                   Prometheus text format (series below)
//   GET /healthz                   {"status": "ok"}, no authentication
//
// Authentication: every path but /healthz needs "Authorization: Bearer
// <client token>" (the Strategy service's token). A browser cannot add a
// header to a plain navigation, so `/` also accepts `?token=<client token>`;
// the page then sends the token as that header on its fetch() calls. The
// token is then part of the URL (browser history, proxy logs): use TLS and
// a token meant for dashboards where that matters. Failures are 401 with
// {"error": "..."}; every error is JSON {"error": "..."} (400 malformed job
// id, 404 unknown job or path, 409 no plan yet, 413 request too large).
//
// /metrics series: braid_jobs{phase=...} (gauge, every phase),
// braid_job_queue_depth, braid_searches_running, braid_workers_live,
// braid_workers_registered (gauges), braid_candidates_evaluated_total,
// braid_plan_cache_hits_total, braid_plan_cache_misses_total,
// braid_http_requests_total{path=...,code=...} (counters, this process),
// braid_http_connections_open (gauge), braid_http_connections_closed_total
// {reason=...} (counter: connections the guard below closed or refused).
//
// Hardening (server/http_guard.h): connections are capped in all and per
// client (503 over the caps); a request header must be complete within
// options.guard.header_timeout_s (else 408 and close), bodies and responses
// have deadlines, keep-alive connections have an idle timeout and a request
// limit. `threads` bounds the requests processed at once; a connection that
// is still sending its header or idles between requests holds none, so slow
// clients cannot starve /healthz.
//
// Performance: a rendered job list is reused while JobManager::ChangeCount()
// stays the same, and the JSON of finished jobs is memoized until a training
// rank's measurement report (JobManager::FeedbackVersion) may change it, so
// the API's hot paths do no SQLite work.
//
//   HttpStatusOptions o{.listen = "127.0.0.1:8080", .client_token = token};
//   absl::StatusOr<std::unique_ptr<HttpStatusServer>> http =
//       HttpStatusServer::Start(o, {&jobs, &store, &tasks, &profiles});
//   int port = (*http)->port();
#ifndef BRAID_SERVER_HTTP_STATUS_H_
#define BRAID_SERVER_HTTP_STATUS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "server/http_guard.h"
#include "server/job_manager.h"
#include "server/store.h"
#include "server/task_queue.h"

namespace braid::server {

struct HttpStatusOptions {
  std::string listen;  // host:port ("127.0.0.1:0" picks a free port; "[::1]:8080" for IPv6)
  std::string client_token;  // required
  // PEM files, both or neither: HTTPS instead of HTTP.
  std::string tls_cert_path;
  std::string tls_key_path;
  int threads = 16;  // requests processed at once (not connections: see guard)
  size_t max_payload_bytes = 64 << 10;  // larger request bodies get 413
  HttpGuardOptions guard;               // deadlines and connection caps
  int max_gantt_tasks = 20000;          // tasks in a timeline, by start time
  int default_list_limit = 100;         // /api/v1/jobs without ?limit=
};

// What the endpoint reads. `jobs` and `store` are required; the others may
// be null (no workers / priors only). All must outlive the server.
struct HttpStatusSources {
  JobManager* jobs = nullptr;
  Store* store = nullptr;
  TaskQueue* tasks = nullptr;
  costmodel::ProfileStore* profiles = nullptr;
};

class HttpStatusServer {
 public:
  // InvalidArgument for a bad listen address, a missing token, thread count,
  // guard option or only one TLS file, or TLS files that do not load;
  // Unavailable when the address cannot be bound. Serves on its own thread
  // from return on.
  static absl::StatusOr<std::unique_ptr<HttpStatusServer>> Start(const HttpStatusOptions& options,
                                                                 HttpStatusSources sources);
  ~HttpStatusServer();  // Stop()
  HttpStatusServer(const HttpStatusServer&) = delete;
  HttpStatusServer& operator=(const HttpStatusServer&) = delete;

  int port() const;
  bool tls() const;
  // Stops listening, lets handlers in flight finish, and stops recording
  // job histories. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit HttpStatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "host:port" -> (host, port); brackets around an IPv6 host are removed.
// InvalidArgument naming `flag` when malformed or the port is not 0..65535.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& address,
                                                          const std::string& flag);

}  // namespace braid::server

#endif  // BRAID_SERVER_HTTP_STATUS_H_
