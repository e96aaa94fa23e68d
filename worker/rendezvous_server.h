// Rank 0's side of the rendezvous store (worker/rendezvous_store.h): the
// keys and values, bounded, and the TCP server that lets the other ranks at
// them once they proved the key (worker/rendezvous_auth.h).
//
// The server listens on the rendezvous address only (127.0.0.1 for a
// loopback rendezvous, never every interface unless that address is
// 0.0.0.0). Each connection gets a thread; one that has not proved the key
// gets min(timeout, 10 s) for it and nothing but the server's nonce and a
// refusal, and at most kMaxPendingHandshakes such connections are open at
// once. A refused claim is remembered (a few) so a join timeout can say who
// tried.
#ifndef BRAID_WORKER_RENDEZVOUS_SERVER_H_
#define BRAID_WORKER_RENDEZVOUS_SERVER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/rendezvous_auth.h"
#include "worker/rendezvous_wire.h"

namespace braid::worker::rendezvous {

inline constexpr int kMaxPendingHandshakes = 64;

// The store's contents: thread-safe, bounded in keys and bytes (kMaxStore*),
// waits end at their timeout or when the map is closed. A timeout of 0
// waits for ever (c10d's kNoTimeout).
class KeyValueMap {
 public:
  absl::Status Set(const std::string& key, std::string value);
  // DeadlineExceeded naming the key; Cancelled once closed.
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);
  // The value is the decimal text of an integer, as c10d's stores keep it.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // c10d's semantics: sets `desired` when the key holds `expected` (or is
  // absent and `expected` is empty); returns the value the key then holds
  // (`expected` when absent).
  absl::StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         std::string desired);
  bool Check(const std::vector<std::string>& keys);
  bool Delete(const std::string& key);
  int64_t NumKeys();
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void Close();

 private:
  absl::Status Put(const std::string& key, std::string value);  // mu_ held
  bool AllPresent(const std::vector<std::string>& keys) const;   // mu_ held

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::string> map_;
  size_t bytes_ = 0;
  bool closed_ = false;
};

struct ServerOptions {
  std::string host;  // the address to bind (resolved; every address it names is tried)
  uint16_t port = 0;
  RendezvousContext context;
  std::string key;   // the rendezvous key (DeriveRendezvousKey)
  std::chrono::milliseconds timeout{300000};  // a frame's rest, a request's wait cap
};

class Server {
 public:
  // Listening when it returns; Unavailable naming the address when it
  // cannot be bound (in use, or not an address of this host).
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       std::shared_ptr<KeyValueMap> map);
  // Stops accepting, ends every connection and waits for their threads.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Until every rank 1..world-1 has proved the key, or `deadline`:
  // DeadlineExceeded naming the ranks missing and any refused claims; the
  // ranks waiting in their own AwaitJoin get the same message.
  absl::Status AwaitJoin(Clock::time_point deadline);

 private:
  Server(const ServerOptions& options, std::shared_ptr<KeyValueMap> map, int listen_fd);
  void AcceptLoop();
  void Serve(int fd, std::string peer);
  // The rank `fd` proved, or why not (the peer was refused).
  absl::StatusOr<int> Handshake(int fd, const std::string& peer, std::string* session_key);
  // The reply to one request of `rank`.
  std::string Handle(const std::string& request, int rank);
  std::string JoinReply(std::chrono::milliseconds timeout);
  std::string MissingLocked() const;  // mu_ held

  const ServerOptions options_;
  const std::shared_ptr<KeyValueMap> map_;
  const int listen_fd_;
  int stop_pipe_[2] = {-1, -1};
  std::thread acceptor_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<int> live_fds_;   // connections whose thread runs
  int pending_ = 0;          // of them, not yet authenticated
  std::vector<bool> joined_;
  std::vector<std::string> refused_;  // the first few refused claims
  std::string join_failure_;          // set when rank 0 gave up waiting
};

}  // namespace braid::worker::rendezvous

#endif  // BRAID_WORKER_RENDEZVOUS_SERVER_H_
