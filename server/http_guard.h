// Connection hardening for cpp-httplib servers (slowloris and friends).
//
// cpp-httplib 0.11 serves a connection on one pool thread from accept to
// close and only bounds each read (5 s): a client that sends one header line
// every few seconds holds a thread forever, and `threads` such clients stop
// the server. The servers here replace httplib's per-connection loop:
//
//  - a connection is admitted only under max_connections in all and
//    max_connections_per_client per client (IPv4 address, IPv6 /64); over
//    either cap it gets 503 (plain HTTP; TLS connections are just closed, a
//    handshake would be the expensive part) and is closed at once;
//  - the complete request header (up to max_header_bytes, else 431) must
//    arrive within header_timeout_s: of the accept for the first request,
//    of its first byte for later keep-alive requests; past it the connection
//    gets 408 (nothing if it sent nothing: a browser's preconnect) and is
//    closed. The TLS handshake falls under the same deadline;
//  - waiting for a header does not hold one of the `threads` processing
//    slots: connections wait on cheap threads (a pool that grows to
//    max_connections), and only a complete header takes a slot;
//  - a complete request waits at most queue_timeout_s for a slot (else
//    503); its body must arrive within body_timeout_s of getting one, and
//    the response be written within response_timeout_s of its first byte;
//  - a connection serves at most keep_alive_max_requests requests and is
//    closed after keep_alive_timeout_s without one.
//
// Pipelining works (bytes past one request are kept for the next), but the
// requests of a connection are answered one at a time.
//
//   HttpGuardOptions g{.header_timeout_s = 10, .max_connections_per_client = 32};
//   absl::StatusOr<std::unique_ptr<GuardedHttpServer>> s =
//       GuardedHttpServer::Create(g, /*threads=*/16);
//   (*s)->http().Get("/healthz", ...);
//   int port = (*s)->http().bind_to_any_port("127.0.0.1");
//   std::thread t([&] { (*s)->http().listen_after_bind(); });
//   (*s)->Shutdown();  // not http().stop(): also wakes idle connections
//   t.join();
#ifndef BRAID_SERVER_HTTP_GUARD_H_
#define BRAID_SERVER_HTTP_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace braid::server {

struct HttpGuardOptions {
  // Request line and headers, complete. Browsers and curl send them in one
  // packet; 10 s leaves room for a bad mobile link.
  double header_timeout_s = 10;
  // How long a complete request waits for a processing slot when all
  // `threads` are busy; then 503.
  double queue_timeout_s = 10;
  // The request body, from when the request gets a processing slot. Bodies
  // here are small (HttpStatusOptions::max_payload_bytes).
  double body_timeout_s = 10;
  // Writing the response, from its first byte: bounds how long a client
  // that reads slowly holds a slot (handlers themselves are not timed).
  // Large enough for a multi-megabyte Chrome trace over a slow link.
  double response_timeout_s = 60;
  // Idle time between two requests of a keep-alive connection. Longer than
  // the dashboard's 2 s refresh, so its connection stays open.
  double keep_alive_timeout_s = 5;
  // Requests per connection before "Connection: close".
  int keep_alive_max_requests = 1000;
  // Open connections at once (each costs a mostly idle thread) and per
  // client address: a browser opens about 6; clients behind one proxy or
  // NAT share the per-client cap.
  int max_connections = 256;
  int max_connections_per_client = 32;
  // Request line plus headers (nginx's default allowance is 4 x 8 KiB).
  size_t max_header_bytes = 32 << 10;
};

// InvalidArgument naming the braid-server flag of the first bad field.
absl::Status ValidateHttpGuardOptions(const HttpGuardOptions& options);

// What the guard did, for /metrics. The counters count since start.
struct HttpGuardStats {
  int64_t open_connections = 0;
  // Connections the guard closed, by reason: "client_limit", "total_limit",
  // "tls_handshake", "header_timeout", "header_too_large", "busy" (no
  // processing slot within queue_timeout_s), "body_timeout",
  // "response_timeout". Every reason is present, zeros included.
  std::map<std::string, int64_t> closed;
};

// A cpp-httplib server (plain or TLS) whose connections the guard serves.
// httplib stays out of this header: callers that only need the options
// (server/server.h) do not compile it.
class GuardedHttpServer {
 public:
  // `threads`: requests processed at once. InvalidArgument for bad options
  // or TLS files (both or neither) that do not load.
  static absl::StatusOr<std::unique_ptr<GuardedHttpServer>> Create(
      const HttpGuardOptions& options, int threads, const std::string& tls_cert_path = "",
      const std::string& tls_key_path = "");
  ~GuardedHttpServer();  // Shutdown()
  GuardedHttpServer(const GuardedHttpServer&) = delete;
  GuardedHttpServer& operator=(const GuardedHttpServer&) = delete;

  // Routes, handlers, bind_to_port() and listen_after_bind() as usual; not
  // new_task_queue (the guard's own) or stop() (use Shutdown()).
  httplib::Server& http();
  bool tls() const;
  // Stops listening; connections waiting for a request close at once,
  // those being processed finish their request. listen_after_bind()
  // returns when all are closed. Idempotent.
  void Shutdown();
  HttpGuardStats Stats() const;

 private:
  struct Impl;
  explicit GuardedHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_HTTP_GUARD_H_
