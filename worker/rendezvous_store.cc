#include "worker/rendezvous_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "worker/rendezvous_server.h"

namespace braid::worker {

using rendezvous::Clock;
using rendezvous::Decoder;
using rendezvous::Encoder;
using rendezvous::Reply;
using rendezvous::StoreOp;

namespace {

// A request's reply may come this long after its wait ended.
constexpr std::chrono::seconds kReplyGrace(30);

// One non-blocking connect to `a` by `deadline`: the socket, or -1.
int ConnectOnce(const addrinfo* a, Clock::time_point deadline, std::string* why) {
  const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *why = strerror(errno);
      close(fd);
      return -1;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLOUT, 0};
    int err = ETIMEDOUT;
    socklen_t len = sizeof(err);
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      *why = strerror(err);
      close(fd);
      return -1;
    }
  }
  return fd;
}

// Connects to rank 0, retrying (it may not serve yet) until `deadline`.
absl::StatusOr<int> ConnectWithRetry(const RendezvousOptions& o, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string why = "nothing answered";
  auto pause = std::chrono::milliseconds(20);
  while (true) {
    addrinfo* found = nullptr;
    const std::string port = absl::StrCat(o.port);
    if (int rc = getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      why = gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ConnectOnce(a, deadline, &why);
        if (fd >= 0) {
          freeaddrinfo(found);
          return fd;
        }
      }
      freeaddrinfo(found);
    }
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(500));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rank ", o.rank, ": rank 0's rendezvous at ", o.address, " did not answer within ",
      o.timeout.count() / 1000.0, " s (", why, ")"));
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

[[noreturn]] void Throw(const absl::Status& s) { throw std::runtime_error(std::string(s.message())); }

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return *std::move(v);
}

}  // namespace

// Rank r > 0's authenticated link to rank 0.
class RendezvousStore::Connection {
 public:
  Connection(int fd, std::string session_key, std::chrono::milliseconds timeout)
      : fd_(fd), channel_(fd, std::move(session_key), HandshakeRole::kClient, timeout) {}
  ~Connection() { close(fd_); }
  rendezvous::FramedChannel& channel() { return channel_; }

 private:
  int fd_;
  rendezvous::FramedChannel channel_;
};

namespace {

// The client half of the handshake (worker/rendezvous_auth.h) on `fd`.
absl::StatusOr<std::string> ProveKey(int fd, const RendezvousOptions& o, Clock::time_point deadline) {
  const RendezvousContext ctx{o.address, o.world};
  const size_t magic = sizeof(rendezvous::kHelloMagic) - 1;
  absl::StatusOr<std::string> hello = rendezvous::ReadExactly(fd, magic + kRendezvousNonceBytes, deadline);
  if (!hello.ok() || hello->compare(0, magic, rendezvous::kHelloMagic) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", o.rank, ": the process at ", o.address, " does not serve braid's rendezvous",
        hello.ok() ? "" : absl::StrCat(" (", hello.status().message(), ")")));
  }
  const std::string server_nonce = hello->substr(magic);
  const std::string client_nonce = RandomBytes(kRendezvousNonceBytes);
  std::string claim;
  for (int i = 0; i < 4; ++i) claim.push_back(static_cast<char>((o.rank >> (8 * i)) & 0xff));
  claim += client_nonce;
  claim += HandshakeProof(o.key, ctx, HandshakeRole::kClient, o.rank, server_nonce, client_nonce);
  if (absl::Status s = rendezvous::WriteAll(fd, claim, deadline); !s.ok()) return s;
  absl::StatusOr<std::string> verdict = rendezvous::ReadExactly(fd, 1, deadline);
  if (!verdict.ok() || static_cast<uint8_t>((*verdict)[0]) != rendezvous::kAccept) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", o.rank, ": rank 0 at ", o.address, " refused this rank's key proof: the ranks "
        "must share the key (the plan secret for a plan file, the job's credential for a server "
        "job), the --rendezvous address and the --world-size"));
  }
  absl::StatusOr<std::string> proof = rendezvous::ReadExactly(fd, kRendezvousMacBytes, deadline);
  if (!proof.ok() ||
      !DigestsEqual(*proof, HandshakeProof(o.key, ctx, HandshakeRole::kServer, o.rank, server_nonce,
                                           client_nonce))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", o.rank, ": the process serving ", o.address,
        " failed the key challenge: it is not rank 0 of these ranks"));
  }
  return SessionKey(o.key, ctx, o.rank, server_nonce, client_nonce);
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> RendezvousStore::Open(const RendezvousOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: rank ", o.rank, " of ", o.world));
  }
  auto store = c10::make_intrusive<RendezvousStore>(Tag{}, o);
  if (o.rank == 0) {
    store->map_ = std::make_shared<rendezvous::KeyValueMap>();
    if (o.world > 1) {
      rendezvous::ServerOptions so{.host = o.host, .port = o.port,
                                   .context = {o.address, o.world}, .key = o.key,
                                   .timeout = o.timeout};
      absl::StatusOr<std::unique_ptr<rendezvous::Server>> server =
          rendezvous::Server::Start(so, store->map_);
      if (!server.ok()) return server.status();
      store->server_ = *std::move(server);
    }
    return store;
  }
  const Clock::time_point deadline = Clock::now() + o.timeout;
  absl::StatusOr<int> fd = ConnectWithRetry(o, deadline);
  if (!fd.ok()) return fd.status();
  absl::StatusOr<std::string> session = ProveKey(*fd, o, deadline);
  if (!session.ok()) {
    close(*fd);
    return session.status();
  }
  store->connection_ = std::make_unique<Connection>(*fd, *std::move(session), o.timeout);
  return store;
}

RendezvousStore::RendezvousStore(Tag, const RendezvousOptions& options)
    : c10d::Store(options.timeout), options_(options) {}

RendezvousStore::~RendezvousStore() = default;

absl::Status RendezvousStore::AwaitJoin(Clock::time_point deadline) {
  if (server_ != nullptr) return server_->AwaitJoin(deadline);
  if (connection_ == nullptr) return absl::OkStatus();  // a world of one
  const auto left = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(1),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kAwaitJoin)).I64(left.count());
  try {
    Call(e.data(), "join", left);
  } catch (const std::runtime_error& err) {
    // Rank 0 proved the key, but its words are still printed escaped.
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", options_.rank, ": ", EscapePeerText(err.what())));
  }
  return absl::OkStatus();
}

std::string RendezvousStore::Call(const std::string& request, const std::string& what,
                                  std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> l(call_mu_);
  rendezvous::FramedChannel& ch = connection_->channel();
  if (absl::Status s = ch.Send(request); !s.ok()) {
    Throw(absl::UnavailableError(absl::StrCat("rendezvous ", what, ": ", s.message())));
  }
  rendezvous::Deadline deadline;
  if (wait.count() > 0) deadline = Clock::now() + wait + kReplyGrace;
  absl::StatusOr<std::string> reply = ch.Receive(deadline);
  if (!reply.ok()) {
    Throw(absl::UnavailableError(absl::StrCat("rendezvous ", what, ": rank 0 at ", options_.address,
                                              ": ", reply.status().message())));
  }
  Decoder d(*reply);
  const uint8_t status = ValueOrThrow(d.U8());
  if (status != static_cast<uint8_t>(Reply::kOk)) {
    Throw(absl::UnavailableError(ValueOrThrow(d.Bytes(rendezvous::kMaxKeyBytes * 4))));
  }
  return reply->substr(1);
}

void RendezvousStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (map_ != nullptr) {
    if (absl::Status s = map_->Set(key, Text(value)); !s.ok()) Throw(s);
    return;
  }
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kSet)).Bytes(key).Bytes(Text(value));
  Call(e.data(), "set", timeout_);
}

std::vector<uint8_t> RendezvousStore::get(const std::string& key) {
  if (map_ != nullptr) return Bytes(ValueOrThrow(map_->Get(key, timeout_)));
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kGet)).Bytes(key).I64(timeout_.count());
  const std::string reply = Call(e.data(), "get", timeout_);
  Decoder d(reply);
  return Bytes(ValueOrThrow(d.Bytes(rendezvous::kMaxValueBytes)));
}

std::vector<uint8_t> RendezvousStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  if (map_ != nullptr) return Bytes(ValueOrThrow(map_->CompareSet(key, Text(expected), Text(desired))));
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kCompareSet)).Bytes(key).Bytes(Text(expected)).Bytes(Text(desired));
  const std::string reply = Call(e.data(), "compareSet", timeout_);
  Decoder d(reply);
  return Bytes(ValueOrThrow(d.Bytes(rendezvous::kMaxValueBytes)));
}

int64_t RendezvousStore::add(const std::string& key, int64_t value) {
  if (map_ != nullptr) return ValueOrThrow(map_->Add(key, value));
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kAdd)).Bytes(key).I64(value);
  const std::string reply = Call(e.data(), "add", timeout_);
  Decoder d(reply);
  return ValueOrThrow(d.I64());
}

bool RendezvousStore::deleteKey(const std::string& key) {
  if (map_ != nullptr) return map_->Delete(key);
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kDelete)).Bytes(key);
  const std::string reply = Call(e.data(), "deleteKey", timeout_);
  Decoder d(reply);
  return ValueOrThrow(d.I64()) != 0;
}

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  if (map_ != nullptr) return map_->Check(keys);
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kCheck)).Strings(keys);
  const std::string reply = Call(e.data(), "check", timeout_);
  Decoder d(reply);
  return ValueOrThrow(d.I64()) != 0;
}

int64_t RendezvousStore::getNumKeys() {
  if (map_ != nullptr) return map_->NumKeys();
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kNumKeys));
  const std::string reply = Call(e.data(), "getNumKeys", timeout_);
  Decoder d(reply);
  return ValueOrThrow(d.I64());
}

void RendezvousStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  if (map_ != nullptr) {
    if (absl::Status s = map_->Wait(keys, timeout); !s.ok()) Throw(s);
    return;
  }
  Encoder e;
  e.U8(static_cast<uint8_t>(StoreOp::kWait)).Strings(keys).I64(timeout.count());
  Call(e.data(), "wait", timeout);
}

}  // namespace braid::worker
