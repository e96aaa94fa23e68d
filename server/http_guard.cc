#include "server/http_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace braid::server {

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Threads beyond max_connections: they answer connections over the caps
// with 503, so refusing does not wait for an admitted connection to end.
constexpr size_t kRefusalThreads = 8;
// How long a closing connection is drained: closing a socket with unread
// input sends RST, and the peer may then lose the 408/503 we just wrote.
constexpr auto kDrainTime = std::chrono::milliseconds(100);
// Writing a 408/431/503 to a peer that does not read gives up after this.
constexpr auto kReplyTime = std::chrono::seconds(1);

const char* const kReasons[] = {"client_limit",   "total_limit",      "tls_handshake",
                                "header_timeout", "header_too_large", "busy",
                                "body_timeout",   "response_timeout"};

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Transport results besides byte counts (> 0) and end of stream (0).
constexpr ssize_t kIoError = -1;
constexpr ssize_t kIoTimeout = -2;
constexpr ssize_t kIoStopped = -3;

// Waits until `fd` has `events` (or an error or hangup), the deadline
// passes (kIoTimeout) or `stop_fd` (when >= 0) becomes readable
// (kIoStopped). 0 when ready.
ssize_t PollUntil(int fd, short events, Deadline deadline, int stop_fd) {
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return kIoTimeout;
    // Round up: a timeout of 0 ms would spin through the last millisecond.
    const int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = poll(fds, stop_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return kIoError;
    }
    if (n == 0) continue;
    if (stop_fd >= 0 && fds[1].revents != 0) return kIoStopped;
    if (fds[0].revents != 0) return 0;
  }
}

// Bytes in and out of a connection with deadlines; the socket is
// non-blocking.
class Transport {
 public:
  virtual ~Transport() = default;
  // > 0: bytes read; 0: end of stream; else kIoError, kIoTimeout or
  // kIoStopped (`stop_fd` readable, when >= 0).
  virtual ssize_t Read(char* buf, size_t size, Deadline deadline, int stop_fd) = 0;
  // > 0: bytes written; else kIoError or kIoTimeout.
  virtual ssize_t Write(const char* buf, size_t size, Deadline deadline) = 0;
  // Before the socket is shut down: TLS sends close_notify.
  virtual void Close() {}
  // Bytes readable without the socket: TLS decrypts a whole record at once.
  virtual bool Pending() const { return false; }
};

class PlainTransport final : public Transport {
 public:
  explicit PlainTransport(int fd) : fd_(fd) {}

  ssize_t Read(char* buf, size_t size, Deadline deadline, int stop_fd) override {
    for (;;) {
      const ssize_t n = recv(fd_, buf, size, MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return kIoError;
      if (const ssize_t w = PollUntil(fd_, POLLIN, deadline, stop_fd); w < 0) return w;
    }
  }

  ssize_t Write(const char* buf, size_t size, Deadline deadline) override {
    for (;;) {
      const ssize_t n = send(fd_, buf, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return kIoError;
      if (const ssize_t w = PollUntil(fd_, POLLOUT, deadline, -1); w < 0) return w;
    }
  }

 private:
  int fd_;
};

// TLS on the non-blocking socket: each SSL call that wants to read or write
// waits in poll() under the caller's deadline, so a peer that sends half a
// record cannot block a thread the way a blocking SSL_read would. (SIGPIPE
// from OpenSSL's write() is ignored: httplib::Server's constructor does so.)
class TlsTransport final : public Transport {
 public:
  // Null when the handshake fails, times out or the guard stops.
  static std::unique_ptr<TlsTransport> Accept(int fd, SSL_CTX* ctx, Deadline deadline,
                                              int stop_fd) {
    SSL* ssl = SSL_new(ctx);
    if (ssl == nullptr) return nullptr;
    auto t = std::unique_ptr<TlsTransport>(new TlsTransport(fd, ssl));
    if (SSL_set_fd(ssl, fd) != 1) return nullptr;
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (t->Retry([ssl] { return SSL_accept(ssl); }, deadline, stop_fd) <= 0) return nullptr;
    return t;
  }
  ~TlsTransport() override { SSL_free(ssl_); }

  ssize_t Read(char* buf, size_t size, Deadline deadline, int stop_fd) override {
    const int n = static_cast<int>(std::min<size_t>(size, INT_MAX));
    return Retry([&] { return SSL_read(ssl_, buf, n); }, deadline, stop_fd);
  }
  ssize_t Write(const char* buf, size_t size, Deadline deadline) override {
    const int n = static_cast<int>(std::min<size_t>(size, INT_MAX));
    return Retry([&] { return SSL_write(ssl_, buf, n); }, deadline, -1);
  }
  void Close() override {
    // One non-blocking try: the peer need not answer close_notify.
    if (!broken_) SSL_shutdown(ssl_);
  }
  bool Pending() const override { return SSL_pending(ssl_) > 0; }

 private:
  TlsTransport(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}

  template <typename Op>
  ssize_t Retry(Op op, Deadline deadline, int stop_fd) {
    for (;;) {
      ERR_clear_error();  // SSL_get_error reads this thread's error queue
      const int n = op();
      if (n > 0) return n;
      const int err = SSL_get_error(ssl_, n);
      short events = 0;
      if (err == SSL_ERROR_WANT_READ) {
        events = POLLIN;
      } else if (err == SSL_ERROR_WANT_WRITE) {
        events = POLLOUT;
      } else if (err == SSL_ERROR_ZERO_RETURN) {
        return 0;
      } else {
        // SSL_ERROR_SYSCALL / SSL_ERROR_SSL: no SSL_shutdown after these.
        broken_ = true;
        return kIoError;
      }
      if (const ssize_t w = PollUntil(fd_, events, deadline, stop_fd); w < 0) {
        broken_ = true;  // mid-record or mid-handshake
        return w;
      }
    }
  }

  int fd_;
  SSL* ssl_;
  bool broken_ = false;
};

// The key the per-client cap counts under: the IPv4 address, or the /64
// of an IPv6 address (one host usually has a whole /64 to pick from).
std::string ClientKey(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    return text;
  }
  if (addr.ss_family == AF_INET6) {
    in6_addr a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
      return text;
    }
    std::memset(&a.s6_addr[8], 0, 8);
    inet_ntop(AF_INET6, &a, text, sizeof(text));
    return absl::StrCat(text, "/64");
  }
  return "?";
}

void IpAndPort(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    port = ntohs(a->sin6_port);
  }
  ip = text;
}

// httplib::TaskQueue with a thread per task, created on demand up to
// `max_threads` and kept for reuse: idle connections cost a thread each
// but no processing slot, and a quiet server keeps few threads.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(fn));
      if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
        try {
          threads_.emplace_back([this] { Loop(); });
        } catch (const std::system_error& e) {
          // Out of threads: the connection waits for a busy one.
          LOG_EVERY_T(ERROR, 10.0) << "http: cannot start a connection thread: " << e.what();
        }
      }
    }
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    // Left only when no thread could be started; they close at once now.
    for (std::function<void()>& fn : jobs_) fn();
    jobs_.clear();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
      --idle_;
      if (jobs_.empty()) return;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a job
  bool shutdown_ = false;
};

// The per-connection loop of a guarded server, run by
// process_and_close_socket() on a ConnectionThreads thread.
class ConnectionGuard {
 public:
  // httplib's request handling on a stream: Server::process_request.
  using ProcessFn =
      std::function<bool(httplib::Stream& strm, bool close_connection, bool& connection_closed)>;

  ConnectionGuard(const HttpGuardOptions& options, int threads);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Serves `sock` until done with it, then closes it. `tls`: the context
  // to accept TLS with, or null for plain HTTP.
  void Serve(int sock, SSL_CTX* tls, const ProcessFn& process);
  void Shutdown();
  httplib::TaskQueue* NewTaskQueue() const;
  HttpGuardStats Stats() const;

 private:
  friend class Connection;

  // Admission under the caps: the client's key, or "" when refused
  // (`reason` says why).
  std::string Admit(int sock, const char** reason);
  void Release(const std::string& client);
  void Count(const char* reason);

  const HttpGuardOptions options_;
  std::counting_semaphore<> slots_;  // processing slots: `threads`
  int stop_fd_ = -1;                 // eventfd, readable once Shutdown() ran
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  int64_t open_ = 0;
  std::map<std::string, int> per_client_;
  std::map<std::string, int64_t> closed_;
};

// One admitted connection: the loop over its requests, and the
// httplib::Stream that process_request reads the request from. Bytes read
// past a request's header stay in `buf_` for the body or the next request.
class Connection final : public httplib::Stream {
 public:
  Connection(ConnectionGuard& guard, int fd) : guard_(guard), fd_(fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      IpAndPort(addr, remote_ip_, remote_port_);
    }
    len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      IpAndPort(addr, local_ip_, local_port_);
    }
    const int flags = fcntl(fd, F_GETFL, 0);
    if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }

  void Run(SSL_CTX* tls, const ConnectionGuard::ProcessFn& process) {
    const HttpGuardOptions& o = guard_.options_;
    const Deadline accepted = Clock::now();
    if (tls != nullptr) {
      transport_ =
          TlsTransport::Accept(fd_, tls, accepted + Seconds(o.header_timeout_s), guard_.stop_fd_);
      if (transport_ == nullptr) {
        if (!guard_.stopping_) guard_.Count("tls_handshake");
        return Close();
      }
    } else {
      transport_ = std::make_unique<PlainTransport>(fd_);
    }
    for (int served = 0; served < o.keep_alive_max_requests && !guard_.stopping_; ++served) {
      switch (WaitForHeader(served == 0 ? std::optional(accepted) : std::nullopt)) {
        case Header::kReady:
          break;
        case Header::kGone:
          return Close();
        case Header::kTimeout:
          guard_.Count("header_timeout");
          // Nothing sent at all: a browser's speculative preconnect, which
          // must not see a response it never asked for.
          if (buf_.size() > pos_) Reply(408, "Request Timeout", "request header timeout");
          return Close();
        case Header::kTooLarge:
          guard_.Count("header_too_large");
          Reply(431, "Request Header Fields Too Large", "request header too large");
          return Close();
      }
      if (!AcquireSlot(Clock::now() + Seconds(o.queue_timeout_s))) {
        if (guard_.stopping_) return Close();
        guard_.Count("busy");
        Reply(503, "Service Unavailable", "server busy");
        return Close();
      }
      read_deadline_ = Clock::now() + Seconds(o.body_timeout_s);
      write_deadline_.reset();  // set by the response's first byte
      const bool last = served + 1 >= o.keep_alive_max_requests || guard_.stopping_;
      bool closed = false;
      const bool ok = process(*this, last, closed);
      guard_.slots_.release();
      if (read_timed_out_) {
        guard_.Count("body_timeout");
      } else if (write_timed_out_) {
        guard_.Count("response_timeout");
      }
      if (!ok || closed || last || read_timed_out_ || write_timed_out_) break;
    }
    Close();
  }

  // An error response outside httplib (no request was parsed), then the
  // caller closes. Best effort under a short deadline.
  void Reply(int code, const char* phrase, const std::string& message) {
    if (transport_ == nullptr) transport_ = std::make_unique<PlainTransport>(fd_);
    const std::string body = nlohmann::json{{"error", message}}.dump();
    std::string out =
        absl::StrCat("HTTP/1.1 ", code, " ", phrase, "\r\nContent-Type: application/json\r\n",
                     "Content-Length: ", body.size(), "\r\nConnection: close\r\n",
                     code == 503 ? "Retry-After: 1\r\n" : "", "\r\n", body);
    const Deadline deadline = Clock::now() + kReplyTime;
    for (size_t off = 0; off < out.size();) {
      const ssize_t n = transport_->Write(out.data() + off, out.size() - off, deadline);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  ~Connection() override { Close(); }

  // Shuts the socket down after draining its input for up to `drain`
  // (see kDrainTime) and closes it. Idempotent.
  void Close(Clock::duration drain = kDrainTime) {
    if (closed_) return;
    closed_ = true;
    if (transport_ != nullptr) transport_->Close();
    shutdown(fd_, SHUT_WR);
    const Deadline deadline = Clock::now() + drain;
    char sink[4096];
    for (size_t drained = 0; drained < (64 << 10);) {
      const ssize_t n = recv(fd_, sink, sizeof(sink), MSG_DONTWAIT);
      if (n == 0) break;
      if (n > 0) {
        drained += static_cast<size_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || PollUntil(fd_, POLLIN, deadline, -1) < 0) {
        break;
      }
    }
    transport_.reset();  // SSL_free before the descriptor goes
    close(fd_);
  }

  // httplib::Stream, used by process_request between WaitForHeader and
  // the next one; reads and writes end at this request's deadlines.
  bool is_readable() const override {
    return pos_ < buf_.size() || transport_->Pending() ||
           PollUntil(fd_, POLLIN, read_deadline_, -1) == 0;
  }
  bool is_writable() const override { return PollUntil(fd_, POLLOUT, WriteDeadline(), -1) == 0; }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buf_.size()) {
      pos_ = 0;
      buf_.clear();
      if (size >= kChunk) return Result(transport_->Read(ptr, size, read_deadline_, -1), true);
      // httplib reads lines a byte at a time: buffer them.
      const ssize_t n = ReadMore(read_deadline_, -1);
      if (n <= 0) return Result(n, true);
    }
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    return Result(transport_->Write(ptr, size, WriteDeadline()), false);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return fd_; }

 private:
  static constexpr size_t kChunk = 4096;
  enum class Header { kReady, kGone, kTimeout, kTooLarge };

  // Reads until buf_ holds a complete request header. `accepted`: the
  // connection's first request, whose deadline runs from the accept;
  // later ones first wait up to keep_alive_timeout_s for a byte.
  Header WaitForHeader(std::optional<Deadline> accepted) {
    const HttpGuardOptions& o = guard_.options_;
    buf_.erase(0, pos_);
    pos_ = 0;
    Deadline deadline;
    if (accepted.has_value()) {
      deadline = *accepted + Seconds(o.header_timeout_s);
    } else {
      if (buf_.empty()) {
        const ssize_t n = ReadMore(Clock::now() + Seconds(o.keep_alive_timeout_s), guard_.stop_fd_);
        if (n <= 0) return Header::kGone;  // idle, closed or stopping: nothing to answer
      }
      deadline = Clock::now() + Seconds(o.header_timeout_s);
    }
    size_t scanned = 0;
    for (;;) {
      // RFC 9112 2.2: ignore empty lines before a request line.
      while (pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
      scanned = std::max(scanned, pos_);
      // httplib ends the header at an empty CRLF line and skips lines that
      // end in a bare LF: "\n\r\n" covers both.
      const size_t end = buf_.find("\n\r\n", scanned);
      if (end != std::string::npos) {
        return end + 3 - pos_ > o.max_header_bytes ? Header::kTooLarge : Header::kReady;
      }
      if (buf_.size() - pos_ >= o.max_header_bytes) return Header::kTooLarge;
      scanned = std::max(buf_.size(), scanned + 2) - 2;
      const ssize_t n = ReadMore(deadline, guard_.stop_fd_);
      if (n == kIoTimeout) return Header::kTimeout;
      if (n <= 0) return Header::kGone;
    }
  }

  // The response's deadline, running from the first call.
  Deadline WriteDeadline() const {
    if (!write_deadline_.has_value()) {
      write_deadline_ = Clock::now() + Seconds(guard_.options_.response_timeout_s);
    }
    return *write_deadline_;
  }

  ssize_t ReadMore(Deadline deadline, int stop_fd) {
    const size_t old = buf_.size();
    buf_.resize(old + kChunk);
    const ssize_t n = transport_->Read(buf_.data() + old, kChunk, deadline, stop_fd);
    buf_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    return n;
  }

  // A transport result as httplib expects it (-1 for any failure), noting
  // a deadline that passed.
  ssize_t Result(ssize_t n, bool reading) {
    if (n == kIoTimeout) (reading ? read_timed_out_ : write_timed_out_) = true;
    return n < 0 ? -1 : n;
  }

  bool AcquireSlot(Deadline deadline) {
    // In slices, so that Shutdown() is noticed.
    constexpr auto kSlice = std::chrono::milliseconds(100);
    for (;;) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero() || guard_.stopping_) return false;
      if (guard_.slots_.try_acquire_for(std::min<Clock::duration>(left, kSlice))) return true;
    }
  }

  ConnectionGuard& guard_;
  const int fd_;
  std::unique_ptr<Transport> transport_;
  std::string remote_ip_, local_ip_;
  int remote_port_ = 0, local_port_ = 0;
  std::string buf_;
  size_t pos_ = 0;  // buf_[0, pos_) is consumed
  Deadline read_deadline_;
  mutable std::optional<Deadline> write_deadline_;
  bool read_timed_out_ = false, write_timed_out_ = false;
  bool closed_ = false;
};

ConnectionGuard::ConnectionGuard(const HttpGuardOptions& options, int threads)
    : options_(options), slots_(threads) {
  CHECK(ValidateHttpGuardOptions(options).ok()) << ValidateHttpGuardOptions(options);
  CHECK_GE(threads, 1);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  PCHECK(stop_fd_ >= 0) << "eventfd";
  for (const char* r : kReasons) closed_[r] = 0;
}

ConnectionGuard::~ConnectionGuard() { close(stop_fd_); }

void ConnectionGuard::Serve(int sock, SSL_CTX* tls, const ProcessFn& process) {
  Connection c(*this, sock);
  if (stopping_) return c.Close();
  const char* reason = nullptr;
  const std::string client = Admit(sock, &reason);
  if (client.empty()) {
    Count(reason);
    // Under TLS a 503 would need the handshake that the cap is there to
    // avoid: such clients just see the connection closed.
    if (tls == nullptr) {
      c.Reply(503, "Service Unavailable",
              std::string(reason) == "client_limit" ? "too many connections from this client"
                                                    : "too many connections");
    }
    // Only what has arrived is drained: a flood of connections must not
    // tie up the few refusal threads.
    return c.Close(Clock::duration::zero());
  }
  c.Run(tls, process);
  Release(client);
}

void ConnectionGuard::Shutdown() {
  stopping_ = true;
  const uint64_t one = 1;
  // Level-triggered: every poll() on it wakes from now on.
  if (write(stop_fd_, &one, sizeof(one)) != sizeof(one)) PLOG(ERROR) << "http: eventfd";
}

httplib::TaskQueue* ConnectionGuard::NewTaskQueue() const {
  return new ConnectionThreads(static_cast<size_t>(options_.max_connections) + kRefusalThreads);
}

HttpGuardStats ConnectionGuard::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {.open_connections = open_, .closed = closed_};
}

std::string ConnectionGuard::Admit(int sock, const char** reason) {
  std::string client = ClientKey(sock);
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ >= options_.max_connections) {
    *reason = "total_limit";
    return "";
  }
  int& n = per_client_[client];
  if (n >= options_.max_connections_per_client) {
    *reason = "client_limit";
    return "";
  }
  ++n;
  ++open_;
  return client;
}

void ConnectionGuard::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

void ConnectionGuard::Count(const char* reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++closed_[reason];
  }
  LOG_EVERY_T(WARNING, 10.0) << "http: closed a connection (" << reason
                             << "); counts in braid_http_connections_closed_total";
}

// httplib::Server or SSLServer with the guard's connection loop: Server's
// process_and_close_socket() is a private virtual, there to be replaced,
// and process_request() is protected. Both are httplib internals (0.11.4):
// should an upgrade change them, `override` makes this fail to compile.
template <typename Base>
class Guarded final : public Base {
 public:
  template <typename... Args>
  Guarded(const HttpGuardOptions& options, int threads, Args&&... args)
      : Base(std::forward<Args>(args)...), guard_(options, threads) {
    this->new_task_queue = [this] { return guard_.NewTaskQueue(); };
  }
  ConnectionGuard& guard() { return guard_; }

  // Server::stop() does nothing unless listen_after_bind() is already
  // running; closing the socket here also ends one that starts later.
  void StopListening() {
    const socket_t sock = this->svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) {
      shutdown(sock, SHUT_RDWR);  // wakes accept()
      close(sock);
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    SSL_CTX* tls = nullptr;
    // The guard does the handshake, under the header deadline, with the
    // context SSLServer loaded.
    if constexpr (std::is_same_v<Base, httplib::SSLServer>) tls = this->ssl_context();
    guard_.Serve(sock, tls, [this](httplib::Stream& strm, bool close, bool& closed) {
      return this->process_request(strm, close, closed, nullptr);
    });
    return true;
  }

  ConnectionGuard guard_;
};

}  // namespace

absl::Status ValidateHttpGuardOptions(const HttpGuardOptions& o) {
  auto seconds = [](double v, const char* flag) {
    return v > 0 && v <= 86400
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrCat(flag, " must be in (0, 86400] seconds"));
  };
  for (absl::Status s : {seconds(o.header_timeout_s, "--http-header-timeout-s"),
                         seconds(o.queue_timeout_s, "--http-queue-timeout-s"),
                         seconds(o.body_timeout_s, "--http-body-timeout-s"),
                         seconds(o.response_timeout_s, "--http-response-timeout-s"),
                         seconds(o.keep_alive_timeout_s, "--http-keep-alive-timeout-s")}) {
    RETURN_IF_ERROR(s);
  }
  if (o.keep_alive_max_requests < 1) {
    return absl::InvalidArgumentError("--http-keep-alive-max-requests must be at least 1");
  }
  if (o.max_connections < 1 || o.max_connections > 65536) {
    return absl::InvalidArgumentError("--http-max-connections must be in [1, 65536]");
  }
  if (o.max_connections_per_client < 1 || o.max_connections_per_client > o.max_connections) {
    return absl::InvalidArgumentError(
        "--http-max-connections-per-client must be in [1, --http-max-connections]");
  }
  if (o.max_header_bytes < 1024 || o.max_header_bytes > (16 << 20)) {
    return absl::InvalidArgumentError("--http-max-header-bytes must be in [1024, 16 MiB]");
  }
  return absl::OkStatus();
}

struct GuardedHttpServer::Impl {
  std::unique_ptr<httplib::Server> server;
  ConnectionGuard* guard = nullptr;  // owned by `server`
  std::function<void()> stop_listening;
  bool tls = false;
  bool shut_down = false;
};

absl::StatusOr<std::unique_ptr<GuardedHttpServer>> GuardedHttpServer::Create(
    const HttpGuardOptions& options, int threads, const std::string& tls_cert_path,
    const std::string& tls_key_path) {
  RETURN_IF_ERROR(ValidateHttpGuardOptions(options));
  if (threads < 1) return absl::InvalidArgumentError("--http-threads must be at least 1");
  if (tls_cert_path.empty() != tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  auto impl = std::make_unique<Impl>();
  if (!tls_cert_path.empty()) {
    auto tls = std::make_unique<Guarded<httplib::SSLServer>>(
        options, threads, tls_cert_path.c_str(), tls_key_path.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert/--tls-key: cannot load ", tls_cert_path, " and ", tls_key_path));
    }
    impl->guard = &tls->guard();
    impl->stop_listening = [s = tls.get()] { s->StopListening(); };
    impl->server = std::move(tls);
    impl->tls = true;
  } else {
    auto plain = std::make_unique<Guarded<httplib::Server>>(options, threads);
    impl->guard = &plain->guard();
    impl->stop_listening = [s = plain.get()] { s->StopListening(); };
    impl->server = std::move(plain);
  }
  return std::unique_ptr<GuardedHttpServer>(new GuardedHttpServer(std::move(impl)));
}

GuardedHttpServer::GuardedHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GuardedHttpServer::~GuardedHttpServer() { Shutdown(); }

httplib::Server& GuardedHttpServer::http() { return *impl_->server; }

bool GuardedHttpServer::tls() const { return impl_->tls; }

void GuardedHttpServer::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->guard->Shutdown();
  impl_->stop_listening();
}

HttpGuardStats GuardedHttpServer::Stats() const { return impl_->guard->Stats(); }

}  // namespace braid::server
