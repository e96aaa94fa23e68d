// braid-server assembled: the SQLite store, the profile store, the task
// queue, the job manager and both gRPC services behind one grpc::Server.
// braid-server (server_main.cc) runs it on a port; the `braid` CLI embeds it
// and talks to it through InProcessChannel().
//
//   ServerOptions o;
//   o.db_path = "/var/lib/braid/braid.db";
//   o.client_token = "...";  o.worker_token = "...";
//   absl::StatusOr<std::unique_ptr<BraidServer>> s = StartServer(o);
//   auto stub = braid::v1::Strategy::NewStub((*s)->InProcessChannel());
//   (*s)->Wait();
#ifndef BRAID_SERVER_SERVER_H_
#define BRAID_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "grpcpp/channel.h"
#include "grpcpp/server.h"
#include "server/http_status.h"
#include "server/job_manager.h"
#include "server/store.h"
#include "server/task_queue.h"

namespace braid::server {

struct ServerOptions {
  // host:port to listen on ("127.0.0.1:0" picks a free port); empty: no
  // port, InProcessChannel() only.
  std::string listen = "127.0.0.1:50051";
  // Required; ":memory:" for a throwaway store. A file is served by one
  // server at a time: StartServer holds an exclusive lock on "<db_path>.lock"
  // for the server's life (see StartServer).
  std::string db_path;
  std::string profile_db_path;  // default "<db_path>.profiles" (":memory:" stays so)
  std::string client_token;     // required: Strategy calls
  std::string worker_token;     // required: Workers calls
  // Operator calls (RestorePlan, ConfirmRollback); empty: those are refused.
  std::string admin_token;
  int64_t max_receive_message_bytes = 64LL << 20;
  std::string tls_cert_path;  // PEM; with tls_key_path: TLS, else plaintext
  std::string tls_key_path;
  // host:port of the HTTP dashboard, JSON API and /metrics
  // (server/http_status.h; same client token, same TLS files); empty: none.
  std::string http_listen;
  int http_threads = 16;
  int64_t http_max_payload_bytes = 64 << 10;
  HttpGuardOptions http_guard;  // deadlines and connection caps (server/http_guard.h)
  JobManagerOptions jobs;
  TaskQueueOptions tasks;
  // How long Shutdown() lets open calls (watch streams) finish before
  // cancelling them.
  double shutdown_grace_s = 1.0;
};

class BraidServer {
 public:
  ~BraidServer();  // Shutdown()
  BraidServer(const BraidServer&) = delete;
  BraidServer& operator=(const BraidServer&) = delete;

  // A channel to this server without a socket; calls still need the token.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  int port() const { return port_; }  // 0 without a listening port
  // The HTTP status endpoint's port; 0 without one.
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  void Wait();
  // Stops accepting calls, cancels open ones after the grace period, then
  // stops the searches (unfinished jobs resume on the next start).
  void Shutdown();

  Store& store() { return *store_; }
  costmodel::ProfileStore& profiles() { return *profiles_; }
  TaskQueue& tasks() { return *tasks_; }
  JobManager& jobs() { return *jobs_; }

 private:
  friend absl::StatusOr<std::unique_ptr<BraidServer>> StartServer(const ServerOptions&);
  struct Services;
  class DbLock;
  BraidServer();

  ServerOptions options_;
  // Declared before the store: released only after the database is closed.
  std::unique_ptr<DbLock> db_lock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<costmodel::ProfileStore> profiles_;
  std::unique_ptr<TaskQueue> tasks_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpStatusServer> http_;  // reads jobs_: stopped first
  int port_ = 0;
  bool shut_down_ = false;
};

// InvalidArgument for missing tokens or db path, or only one of the TLS
// files; FailedPrecondition when another server (another process, or another
// BraidServer in this one) holds the database file, naming its PID;
// Unavailable when the address cannot be bound (also when another server
// listens on it: the port is bound without SO_REUSEPORT).
absl::StatusOr<std::unique_ptr<BraidServer>> StartServer(const ServerOptions& options);

}  // namespace braid::server

#endif  // BRAID_SERVER_SERVER_H_
