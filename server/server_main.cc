// braid-server: the strategy service on a port. Flags only; everything else
// is in server/server.h.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "glog/logging.h"
#include "server/server.h"

namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  braid::server::ServerOptions o;
  o.client_token = EnvOr("BRAID_CLIENT_TOKEN", "");
  o.worker_token = EnvOr("BRAID_WORKER_TOKEN", "");
  CLI::App app{"braid-server: the braid strategy service (gRPC)"};
  app.add_option("--listen", o.listen, "host:port to listen on")->capture_default_str();
  app.add_option("--db", o.db_path, "SQLite file for jobs, plans and tasks")->required();
  app.add_option("--profile-db", o.profile_db_path,
                 "SQLite file of the profile store (default: <db>.profiles)");
  app.add_option("--client-token", o.client_token,
                 "bearer token for Strategy calls (env BRAID_CLIENT_TOKEN)");
  app.add_option("--worker-token", o.worker_token,
                 "bearer token for Workers calls (env BRAID_WORKER_TOKEN)");
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
                 "HTTP worker threads (each keep-alive connection holds one)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--http-max-payload-bytes", o.http_max_payload_bytes,
                 "largest HTTP request body accepted (bytes)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--tls-cert", o.tls_cert_path, "PEM certificate chain (enables TLS, gRPC and HTTP)");
  app.add_option("--tls-key", o.tls_key_path, "PEM private key");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // SIGINT/SIGTERM: blocked before any thread starts, then
  // handled by one thread: shut down cleanly (unfinished jobs resume on restart).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
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
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}
