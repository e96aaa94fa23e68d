#include "server/server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "grpc/grpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/services.h"
#include "server/strategy_api.h"
#include "server/workers_api.h"

namespace braid::server {

struct BraidServer::Services {
  Services(JobManager* jobs, TaskQueue* tasks, const ServerOptions& o)
      : strategy_api(jobs),
        workers_api(tasks),
        strategy(&strategy_api, jobs, o.client_token, o.admin_token),
        workers(&workers_api, o.worker_token) {}
  StrategyApi strategy_api;
  WorkersApi workers_api;
  StrategyService strategy;
  WorkersService workers;
};

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// One server per database file. SQLite locks per transaction, so two servers
// on one file would both resume its unfinished jobs, re-queue each other's
// leased tasks and interleave their writes. An flock on "<db>.lock" held for
// the server's life keeps the second one out: the kernel drops it when the
// holder exits, however it exits, so a crash leaves no stale lock (the file
// stays, with the last holder's PID, and is reused). O_CLOEXEC keeps it from
// programs the server starts.
class BraidServer::DbLock {
 public:
  static absl::StatusOr<std::unique_ptr<DbLock>> Acquire(const std::string& db_path) {
    const std::string path = db_path + ".lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open the database lock file ", path, ": ", std::strerror(err)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        close(fd);
        return absl::FailedPreconditionError(
            absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
      }
      const std::string holder = ReadHolder(fd);
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", db_path, " is served by another process (",
          holder.empty() ? "PID unknown" : absl::StrCat("PID ", holder),
          ": a braid-server, or a braid command's embedded service; lock file ", path,
          "): one server per database; stop it or give this one another --db"));
    }
    // Best effort: the PID only makes the refusal above more helpful.
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      LOG(WARNING) << path << ": cannot record this server's PID: " << std::strerror(errno);
    }
    return std::unique_ptr<DbLock>(new DbLock(fd));
  }
  ~DbLock() { close(fd_); }  // releases the lock
  DbLock(const DbLock&) = delete;
  DbLock& operator=(const DbLock&) = delete;

 private:
  explicit DbLock(int fd) : fd_(fd) {}
  // The holder's PID as it wrote it; empty when unreadable.
  static std::string ReadHolder(int fd) {
    char buf[32];
    const ssize_t n = pread(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    int64_t pid = 0;
    const auto [end, ec] = std::from_chars(buf, buf + n, pid);
    if (ec != std::errc() || pid <= 0) return "";
    return absl::StrCat(pid);
  }
  int fd_;
};

BraidServer::BraidServer() = default;

BraidServer::~BraidServer() { Shutdown(); }

std::shared_ptr<grpc::Channel> BraidServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // plans of large graphs exceed 4 MiB
  return server_->InProcessChannel(args);
}

void BraidServer::Wait() { server_->Wait(); }

void BraidServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(options_.shutdown_grace_s * 1e3));
  if (http_ != nullptr) http_->Stop();
  if (server_ != nullptr) server_->Shutdown(deadline);
  jobs_.reset();  // stops searches; their jobs stay unfinished in the store
}

absl::StatusOr<std::unique_ptr<BraidServer>> StartServer(const ServerOptions& options) {
  if (options.db_path.empty()) return absl::InvalidArgumentError("--db must be set");
  if (options.client_token.empty()) {
    return absl::InvalidArgumentError("--client-token (or BRAID_CLIENT_TOKEN) must be set");
  }
  if (options.worker_token.empty()) {
    return absl::InvalidArgumentError("--worker-token (or BRAID_WORKER_TOKEN) must be set");
  }
  if (options.client_token == options.worker_token) {
    return absl::InvalidArgumentError("--client-token and --worker-token must differ");
  }
  if (!options.admin_token.empty() && (options.admin_token == options.client_token ||
                                       options.admin_token == options.worker_token)) {
    return absl::InvalidArgumentError("--admin-token must differ from the client and worker tokens");
  }
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (options.max_receive_message_bytes < 1024 ||
      options.max_receive_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--max-message-bytes must be in [1024, 2^31)");
  }
  std::unique_ptr<BraidServer> s(new BraidServer());
  s->options_ = options;
  if (options.db_path != ":memory:") {
    ASSIGN_OR_RETURN(s->db_lock_, BraidServer::DbLock::Acquire(options.db_path));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(options.db_path));
  s->store_ = std::move(store);
  std::string profile_path = options.profile_db_path;
  if (profile_path.empty()) {
    profile_path = options.db_path == ":memory:" ? ":memory:" : options.db_path + ".profiles";
  }
  ASSIGN_OR_RETURN(std::unique_ptr<costmodel::ProfileStore> profiles,
                   costmodel::ProfileStore::Open(profile_path));
  s->profiles_ = std::move(profiles);
  s->tasks_ = std::make_unique<TaskQueue>(s->store_.get(), s->profiles_.get(), options.tasks);
  JobManagerOptions jobs = options.jobs;
  if (profile_path != ":memory:") jobs.profile_db_path = profile_path;
  s->jobs_ = std::make_unique<JobManager>(s->store_.get(), s->profiles_.get(), s->tasks_.get(),
                                          jobs);
  RETURN_IF_ERROR(s->jobs_->Start());
  s->services_ = std::make_unique<BraidServer::Services>(s->jobs_.get(), s->tasks_.get(), options);

  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_receive_message_bytes));
  // gRPC binds with SO_REUSEPORT by default: a second server on the same
  // port would then start and take half of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&s->services_->strategy);
  builder.RegisterService(&s->services_->workers);
  if (!options.listen.empty()) {
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (!options.tls_cert_path.empty()) {
      ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert_path, "--tls-cert"));
      ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key_path, "--tls-key"));
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({key, cert});
      creds = grpc::SslServerCredentials(ssl);
    } else {
      creds = grpc::InsecureServerCredentials();
    }
    builder.AddListeningPort(options.listen, creds, &s->port_);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || (!options.listen.empty() && s->port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (in use by another process?)"));
  }
  if (!options.http_listen.empty()) {
    if (options.http_max_payload_bytes < 1) {
      return absl::InvalidArgumentError("--http-max-payload-bytes must be positive");
    }
    HttpStatusOptions h;
    h.listen = options.http_listen;
    h.client_token = options.client_token;
    h.tls_cert_path = options.tls_cert_path;
    h.tls_key_path = options.tls_key_path;
    h.threads = options.http_threads;
    h.max_payload_bytes = static_cast<size_t>(options.http_max_payload_bytes);
    h.guard = options.http_guard;
    ASSIGN_OR_RETURN(std::unique_ptr<HttpStatusServer> http,
                     HttpStatusServer::Start(h, {s->jobs_.get(), s->store_.get(), s->tasks_.get(),
                                                 s->profiles_.get()}));
    s->http_ = std::move(http);
  }
  return s;
}

}  // namespace braid::server
