// braid-server: the strategy service on a port. Flags only; everything else
// is in server/server.h.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "glog/logging.h"
#include "server/server.h"

#ifdef BRAID_WITH_GNN
#include "costmodel/gnn/provider.h"
#endif

namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

}  // namespace

namespace {

// The thread in sigwait (the shutdown waiter, then its watchdog); 0 before.
std::atomic<pthread_t> signal_waiter{0};
volatile sig_atomic_t early_signal = 0;

// Runs on a thread that did not block the signal: async-signal-safe calls
// only.
void ForwardSignal(int sig) {
  const pthread_t t = signal_waiter.load();
  if (t != 0) {
    pthread_kill(t, sig);
  } else {
    early_signal = sig;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // SIGINT/SIGTERM: blocked before any thread of main's starts, then handled
  // by one thread: shut down cleanly (unfinished jobs resume on restart).
  // Libraries may start threads before main (OpenBLAS's pool, loaded with
  // LibTorch for the GNN estimator) that do not block them: a signal the
  // kernel hands to one of those is forwarded to the waiting thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct sigaction forward {};
  forward.sa_handler = ForwardSignal;
  sigemptyset(&forward.sa_mask);
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
#ifdef BRAID_WITH_GNN
  braid::costmodel::gnn::InstallGnnEstimatorProvider();
#endif
  braid::server::ServerOptions o;
  o.client_token = EnvOr("BRAID_CLIENT_TOKEN", "");
  o.worker_token = EnvOr("BRAID_WORKER_TOKEN", "");
  o.admin_token = EnvOr("BRAID_ADMIN_TOKEN", "");
  CLI::App app{"braid-server: the braid strategy service (gRPC)"};
  app.add_option("--listen", o.listen, "host:port to listen on")->capture_default_str();
  app.add_option("--db", o.db_path, "SQLite file for jobs, plans and tasks")->required();
  app.add_option("--profile-db", o.profile_db_path,
                 "SQLite file of the profile store (default: <db>.profiles)");
  app.add_option("--client-token", o.client_token,
                 "bearer token for Strategy calls (env BRAID_CLIENT_TOKEN)");
  app.add_option("--worker-token", o.worker_token,
                 "bearer token for Workers calls (env BRAID_WORKER_TOKEN)");
  app.add_option("--admin-token", o.admin_token,
                 "bearer token for operator calls: `braid plan restore` and `braid plan "
                 "confirm-rollback` (env BRAID_ADMIN_TOKEN; default: none, those are refused)");
  braid::server::FeedbackOptions& fb = o.jobs.feedback;
  app.add_option("--report-rate", fb.report_rate_per_s,
                 "measurement reports and runs per second per client address (StartRun, "
                 "ReportMeasurement); more is RESOURCE_EXHAUSTED")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  app.add_option("--report-burst", fb.report_burst,
                 "reports and runs a client address may send at once before --report-rate applies")
      ->check(CLI::Range(1.0, 1e9))
      ->capture_default_str();
  app.add_option("--max-runs-per-job", fb.max_attempts_per_job,
                 "runs (StartRun) stored per job within the retention")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  double retention_days = fb.retention_s / 86400;
  app.add_option("--measurement-retention-days", retention_days,
                 "days a run's reports are kept (deleted when the job's next run starts)")
      ->check(CLI::Range(0.0, 36500.0))
      ->capture_default_str();
  app.add_option("--max-concurrent-searches", o.jobs.max_concurrent_searches)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--queue-size", o.jobs.queue_size, "queued jobs before ResourceExhausted")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--search-threads", o.jobs.search_threads, "threads per search")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-message-bytes", o.max_receive_message_bytes,
                 "largest request accepted (bytes)")
      ->capture_default_str();
  app.add_option("--http-listen", o.http_listen,
                 "host:port of the HTTP dashboard, JSON API and /metrics (e.g. 127.0.0.1:8080; "
                 "default: none). Needs the client token: 'Authorization: Bearer <token>', or "
                 "http://host:port/?token=<token> for the dashboard in a browser");
  app.add_option("--http-threads", o.http_threads,
                 "HTTP requests processed at once (connections sending a header or idle "
                 "between requests hold none)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  braid::server::HttpGuardOptions& g = o.http_guard;
  app.add_option("--http-header-timeout-s", g.header_timeout_s,
                 "seconds for a complete HTTP request header (from the connection, or from "
                 "the first byte on a keep-alive connection); slower clients get 408 and close")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--http-queue-timeout-s", g.queue_timeout_s,
                 "seconds a complete HTTP request waits for one of --http-threads; then 503")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--http-body-timeout-s", g.body_timeout_s,
                 "seconds for an HTTP request body, from the start of processing")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--http-response-timeout-s", g.response_timeout_s,
                 "seconds to write an HTTP response, from its first byte (slow readers)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--http-keep-alive-timeout-s", g.keep_alive_timeout_s,
                 "idle seconds before a keep-alive HTTP connection is closed")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--http-keep-alive-max-requests", g.keep_alive_max_requests,
                 "HTTP requests per connection before it is closed")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--http-max-connections", g.max_connections,
                 "open HTTP connections in all; more get 503 (plain) or are closed (TLS)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--http-max-connections-per-client", g.max_connections_per_client,
                 "open HTTP connections per client address (IPv6: per /64); more get 503")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--http-max-header-bytes", g.max_header_bytes,
                 "largest HTTP request line plus headers; larger get 431")
      ->check(CLI::Range(size_t{1024}, size_t{16} << 20))
      ->capture_default_str();
  app.add_option("--http-max-payload-bytes", o.http_max_payload_bytes,
                 "largest HTTP request body accepted (bytes)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--tls-cert", o.tls_cert_path, "PEM certificate chain (enables TLS, gRPC and HTTP)");
  app.add_option("--tls-key", o.tls_key_path, "PEM private key");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  fb.retention_s = retention_days * 86400;
  absl::StatusOr<std::unique_ptr<braid::server::BraidServer>> server =
      braid::server::StartServer(o);
  if (!server.ok()) {
    std::cerr << "braid-server: " << server.status() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  LOG(INFO) << "braid-server listening on " << o.listen << " (port " << (*server)->port()
            << (o.tls_cert_path.empty() ? ", plaintext" : ", TLS") << ")";
  if ((*server)->http_port() != 0) {
    LOG(INFO) << "HTTP status on " << (o.tls_cert_path.empty() ? "http" : "https") << "://"
              << o.http_listen << " (port " << (*server)->http_port() << ")";
  }
  // The first SIGINT/SIGTERM drains: open calls get shutdown_grace_s (1 s),
  // searches stop within tens of ms (search/stop_token.h), and the process
  // exits 0, normally within 2 s. Should something still hang (work outside
  // the search, e.g. importing a resumed job), a watchdog exits 1 after
  // kShutdownTimeoutS, and a second signal exits 1 at once; unfinished jobs
  // resume on the next start either way.
  static constexpr int kShutdownTimeoutS = 10;
  std::thread waiter([&] {
    int sig = 0;
    signal_waiter.store(pthread_self());
    if (const int early = early_signal; early != 0) {
      sig = early;
    } else {
      sigwait(&set, &sig);
    }
    LOG(INFO) << "signal " << sig << ": shutting down (exit within " << kShutdownTimeoutS
              << " s)";
    std::thread([set] {
      signal_waiter.store(pthread_self());
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kShutdownTimeoutS);
      int again = -1;
      while (again < 0) {
        const auto left = end - std::chrono::steady_clock::now();
        if (left <= std::chrono::nanoseconds(0)) break;
        const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        timespec ts{};
        ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
        ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
        again = sigtimedwait(&set, nullptr, &ts);
        if (again < 0 && errno != EINTR) break;  // EAGAIN: the time is up
      }
      if (again > 0) {
        LOG(ERROR) << "signal " << again << " during shutdown: exiting now; unfinished jobs "
                   << "resume on the next start";
      } else {
        LOG(ERROR) << "shutdown did not finish within " << kShutdownTimeoutS
                   << " s: exiting; unfinished jobs resume on the next start";
      }
      _exit(1);
    }).detach();
    (*server)->Shutdown();
    LOG(INFO) << "shutdown complete";
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}
