// The store the activator's ranks meet through (worker/activator.h): a
// c10d::Store that rank 0 serves on the rendezvous address only, and that
// the other ranks reach only after proving the ranks' key (a mutual,
// nonce-based HMAC challenge, worker/rendezvous_auth.h), every later frame
// MAC'd. LibTorch 1.13's TCPStore listens on every interface and lets anyone
// in; a process that cannot prove the key here gets the server's nonce and a
// refusal, never a key or value (the Gloo addresses, the plan, a refusal
// reason). Its Gloo group is made through it (ProcessGroupGloo uses set, get
// and wait).
//
//   RendezvousOptions o{.address = "10.0.0.1:29500", .host = "10.0.0.1", .port = 29500,
//                       .rank = r, .world = 4, .key = DeriveRendezvousKey(secret),
//                       .timeout = std::chrono::seconds(300)};
//   ASSIGN_OR_RETURN(c10::intrusive_ptr<RendezvousStore> store, RendezvousStore::Open(o));
//   RETURN_IF_ERROR(store->AwaitJoin(start + std::chrono::seconds(300)));
//   auto pg = MakeGlooGroup(store, r, 4, bind_host, o.timeout);
//
// Includes LibTorch's c10d headers: for worker/ sources only.
#ifndef BRAID_WORKER_RENDEZVOUS_STORE_H_
#define BRAID_WORKER_RENDEZVOUS_STORE_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/rendezvous_auth.h"
#include "worker/rendezvous_wire.h"

namespace braid::worker {

namespace rendezvous {
class KeyValueMap;
class Server;
}  // namespace rendezvous

struct RendezvousOptions {
  std::string address;  // HOST:PORT as every rank gives it (the proofs cover it)
  std::string host;     // the address rank 0 binds and the others connect to
  uint16_t port = 0;
  int rank = 0;
  int world = 1;
  // DeriveRendezvousKey of the ranks' shared secret. Empty: no secret;
  // the proofs then prove nothing, which the caller allows on loopback only.
  std::string key;
  // How long a request may wait for a key, and a connection for the rest of
  // a frame; rank r > 0 retries connecting to rank 0 until it passes.
  std::chrono::milliseconds timeout{300000};
};

class RendezvousStore final : public c10d::Store {
 private:
  struct Tag {
    explicit Tag() = default;
  };

 public:
  // Rank 0: serving (world > 1) when it returns. Rank r > 0: connected and
  // mutually authenticated; PermissionDenied when rank 0 refused this rank's
  // proof or the process at the address failed its own, DeadlineExceeded
  // when nothing answered within the timeout.
  static absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> Open(const RendezvousOptions& options);

  // Until every rank has joined: rank 0 waits for their proofs, the others
  // ask rank 0. DeadlineExceeded naming the missing ranks (and any refused
  // claims) when `deadline` passes first, on every rank that waits.
  absl::Status AwaitJoin(rendezvous::Clock::time_point deadline);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Made by Open only (the tag is private).
  RendezvousStore(Tag, const RendezvousOptions& options);
  ~RendezvousStore() override;

 private:
  class Connection;

  // Rank r > 0: one request to rank 0 and its reply's body; throws
  // std::runtime_error (c10d's stores throw) on a refusal or a broken link,
  // its what() possibly rank 0's words: escape them (EscapePeerText) before
  // printing.
  std::string Call(const std::string& request, const std::string& what,
                   std::chrono::milliseconds wait);

  RendezvousOptions options_;
  std::shared_ptr<rendezvous::KeyValueMap> map_;  // rank 0
  std::unique_ptr<rendezvous::Server> server_;    // rank 0, world > 1
  std::unique_ptr<Connection> connection_;        // rank r > 0
  std::mutex call_mu_;
};

}  // namespace braid::worker

#endif  // BRAID_WORKER_RENDEZVOUS_STORE_H_
