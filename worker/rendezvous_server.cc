#include "worker/rendezvous_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/digest.h"
#include "glog/logging.h"

namespace braid::worker::rendezvous {
namespace {

constexpr size_t kMaxRefusedKept = 8;
constexpr std::chrono::seconds kMaxHandshake(10);

std::string PeerName(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

std::string Answer(Reply r, const std::string& body = "") {
  Encoder e;
  e.U8(static_cast<uint8_t>(r)).Bytes(body);
  return e.data();
}

std::string AnswerI64(int64_t v) {
  Encoder e;
  e.U8(static_cast<uint8_t>(Reply::kOk)).I64(v);
  return e.data();
}

std::string AnswerOf(const absl::Status& s) {
  if (s.ok()) return Answer(Reply::kOk);
  return Answer(s.code() == absl::StatusCode::kDeadlineExceeded ? Reply::kTimeout : Reply::kError,
               std::string(s.message()));
}

}  // namespace

// --- KeyValueMap -----------------------------------------------------------

bool KeyValueMap::AllPresent(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return map_.contains(k); });
}

absl::Status KeyValueMap::Put(const std::string& key, std::string value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: a key of ", key.size(),
                                                   " bytes or a value of ", value.size(),
                                                   " bytes is over the limit"));
  }
  auto it = map_.find(key);
  const size_t old = it == map_.end() ? 0 : key.size() + it->second.size();
  const size_t now = bytes_ - old + key.size() + value.size();
  if (now > kMaxStoreBytes || (it == map_.end() && map_.size() >= kMaxStoreKeys)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous store: full (at most ", kMaxStoreKeys, " keys and ", kMaxStoreBytes, " bytes)"));
  }
  bytes_ = now;
  map_[key] = std::move(value);
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status KeyValueMap::Set(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> l(mu_);
  return Put(key, std::move(value));
}

absl::Status KeyValueMap::Wait(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  auto ready = [&] { return closed_ || AllPresent(keys); };
  if (timeout.count() <= 0) {
    cv_.wait(l, ready);
  } else if (!cv_.wait_for(l, timeout, ready)) {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (!map_.contains(k)) missing.push_back(EscapePeerText(k, 256));
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous store: key(s) ",
                                                    absl::StrJoin(missing, ", "), " not set within ",
                                                    timeout.count() / 1000.0, " s"));
  }
  if (!AllPresent(keys)) return absl::CancelledError("rendezvous store: closed");
  return absl::OkStatus();
}

absl::StatusOr<std::string> KeyValueMap::Get(const std::string& key,
                                             std::chrono::milliseconds timeout) {
  if (absl::Status s = Wait({key}, timeout); !s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return absl::NotFoundError("rendezvous store: key deleted while read");
  return it->second;
}

absl::StatusOr<int64_t> KeyValueMap::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t v = 0;
  if (auto it = map_.find(key); it != map_.end() && !absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError("rendezvous store: add to a key that holds no integer");
  }
  v += delta;
  if (absl::Status s = Put(key, absl::StrCat(v)); !s.ok()) return s;
  return v;
}

absl::StatusOr<std::string> KeyValueMap::CompareSet(const std::string& key,
                                                    const std::string& expected,
                                                    std::string desired) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = map_.find(key);
  if ((it == map_.end() && expected.empty()) || (it != map_.end() && it->second == expected)) {
    if (absl::Status s = Put(key, desired); !s.ok()) return s;
    return desired;
  }
  if (it == map_.end()) return expected;
  return it->second;
}

bool KeyValueMap::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> l(mu_);
  return AllPresent(keys);
}

bool KeyValueMap::Delete(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  bytes_ -= key.size() + it->second.size();
  map_.erase(it);
  cv_.notify_all();
  return true;
}

int64_t KeyValueMap::NumKeys() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(map_.size());
}

void KeyValueMap::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  cv_.notify_all();
}

// --- Server ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& o,
                                                      std::shared_ptr<KeyValueMap> map) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(o.port);
  if (int rc = getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous host '", o.host, "' does not resolve: ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // not SO_REUSEPORT
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      why = strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "rank 0 cannot serve the rendezvous on ", o.host, ":", o.port, ": ", why,
        " (rank 0 must run on the rendezvous host, and the port be free)"));
  }
  std::unique_ptr<Server> s(new Server(o, std::move(map), fd));
  if (pipe2(s->stop_pipe_, O_CLOEXEC) != 0) return absl::InternalError("rendezvous: pipe2 failed");
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

Server::Server(const ServerOptions& options, std::shared_ptr<KeyValueMap> map, int listen_fd)
    : options_(options), map_(std::move(map)), listen_fd_(listen_fd) {
  joined_.assign(std::max(1, options.context.world), false);
  joined_[0] = true;
}

Server::~Server() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  map_->Close();  // waiting requests answer now
  if (stop_pipe_[1] >= 0) (void)!write(stop_pipe_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  std::unique_lock<std::mutex> l(mu_);
  // Reads end at once; replies being written (a join failure to the ranks
  // that wait for it) get a moment, then writes end too.
  for (int fd : live_fds_) shutdown(fd, SHUT_RD);
  if (!cv_.wait_for(l, std::chrono::seconds(2), [&] { return live_fds_.empty(); })) {
    for (int fd : live_fds_) shutdown(fd, SHUT_RDWR);
    cv_.wait(l, [&] { return live_fds_.empty(); });
  }
  l.unlock();
  close(listen_fd_);
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void Server::AcceptLoop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "rendezvous: poll";
      return;
    }
    if (p[1].revents != 0) return;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || pending_ >= kMaxPendingHandshakes) {
      close(fd);
      continue;
    }
    ++pending_;
    live_fds_.insert(fd);
    std::thread([this, fd, peer = PeerName(a)] { Serve(fd, peer); }).detach();
  }
}

absl::StatusOr<int> Server::Handshake(int fd, const std::string& peer, std::string* session_key) {
  const Clock::time_point deadline =
      Clock::now() + std::min<std::chrono::milliseconds>(options_.timeout, kMaxHandshake);
  const std::string server_nonce = RandomBytes(kRendezvousNonceBytes);
  if (absl::Status s = WriteAll(fd, absl::StrCat(kHelloMagic, server_nonce), deadline); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> claim =
      ReadExactly(fd, 4 + kRendezvousNonceBytes + kRendezvousMacBytes, deadline);
  if (!claim.ok()) return claim.status();
  uint32_t rank = 0;
  for (int i = 0; i < 4; ++i) rank |= uint32_t{static_cast<uint8_t>((*claim)[i])} << (8 * i);
  const std::string client_nonce = claim->substr(4, kRendezvousNonceBytes);
  const std::string proof = claim->substr(4 + kRendezvousNonceBytes);
  const RendezvousContext& ctx = options_.context;
  const bool in_range = rank >= 1 && rank < static_cast<uint32_t>(ctx.world);
  const int r = static_cast<int>(std::min<uint32_t>(rank, 1 << 30));
  if (!in_range ||
      !DigestsEqual(proof, HandshakeProof(options_.key, ctx, HandshakeRole::kClient, r,
                                          server_nonce, client_nonce))) {
    (void)WriteAll(fd, std::string(1, static_cast<char>(kRefuse)), deadline);
    const std::string why =
        in_range ? absl::StrCat("a peer at ", peer, " claiming rank ", rank, " failed the key challenge")
                 : absl::StrCat("a peer at ", peer, " claimed rank ", rank, ", not one of 1..",
                                ctx.world - 1);
    return absl::PermissionDeniedError(why);
  }
  const std::string reply = absl::StrCat(
      std::string(1, static_cast<char>(kAccept)),
      HandshakeProof(options_.key, ctx, HandshakeRole::kServer, r, server_nonce, client_nonce));
  if (absl::Status s = WriteAll(fd, reply, deadline); !s.ok()) return s;
  *session_key = SessionKey(options_.key, ctx, r, server_nonce, client_nonce);
  return r;
}

void Server::Serve(int fd, std::string peer) {
  std::string session_key;
  absl::StatusOr<int> rank = Handshake(fd, peer, &session_key);
  {
    std::lock_guard<std::mutex> l(mu_);
    --pending_;
    if (rank.ok()) {
      joined_[*rank] = true;
      cv_.notify_all();
    } else if (rank.status().code() == absl::StatusCode::kPermissionDenied) {
      LOG(WARNING) << "rendezvous " << options_.context.address << ": "
                   << rank.status().message() << ": refused";
      if (refused_.size() < kMaxRefusedKept) refused_.emplace_back(rank.status().message());
    }
  }
  if (rank.ok()) {
    FramedChannel ch(fd, session_key, HandshakeRole::kServer, options_.timeout);
    while (true) {
      absl::StatusOr<std::string> request = ch.Receive(std::nullopt);
      if (!request.ok()) {
        if (request.status().code() != absl::StatusCode::kUnavailable) {
          LOG(WARNING) << "rendezvous: rank " << *rank << " (" << peer
                       << "): " << request.status().message();
        }
        break;
      }
      if (!ch.Send(Handle(*request, *rank)).ok()) break;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  live_fds_.erase(fd);
  close(fd);
  cv_.notify_all();  // under the lock: the destructor may free cv_ right after
}

std::string Server::Handle(const std::string& request, int rank) {
  Decoder d(request);
  absl::StatusOr<uint8_t> op = d.U8();
  if (!op.ok()) return Answer(Reply::kError, std::string(op.status().message()));
  auto bad = [](const absl::Status& s) { return Answer(Reply::kError, std::string(s.message())); };
  // A request's wait is capped at the store's timeout (0: for ever).
  auto wait_of = [&](int64_t ms) {
    const int64_t cap = options_.timeout.count();
    return std::chrono::milliseconds(ms <= 0 ? cap : cap <= 0 ? ms : std::min(ms, cap));
  };
#define BRAID_RDZV_GET(var, expr)              \
  auto var##_or = (expr);                      \
  if (!var##_or.ok()) return bad(var##_or.status()); \
  auto var = *std::move(var##_or)
  switch (static_cast<StoreOp>(*op)) {
    case StoreOp::kSet: {
      BRAID_RDZV_GET(key, d.Bytes(kMaxKeyBytes));
      BRAID_RDZV_GET(value, d.Bytes(kMaxValueBytes));
      return AnswerOf(map_->Set(key, std::move(value)));
    }
    case StoreOp::kGet: {
      BRAID_RDZV_GET(key, d.Bytes(kMaxKeyBytes));
      BRAID_RDZV_GET(ms, d.I64());
      absl::StatusOr<std::string> v = map_->Get(key, wait_of(ms));
      return v.ok() ? Answer(Reply::kOk, *v) : AnswerOf(v.status());
    }
    case StoreOp::kAdd: {
      BRAID_RDZV_GET(key, d.Bytes(kMaxKeyBytes));
      BRAID_RDZV_GET(delta, d.I64());
      absl::StatusOr<int64_t> v = map_->Add(key, delta);
      return v.ok() ? AnswerI64(*v) : AnswerOf(v.status());
    }
    case StoreOp::kCompareSet: {
      BRAID_RDZV_GET(key, d.Bytes(kMaxKeyBytes));
      BRAID_RDZV_GET(expected, d.Bytes(kMaxValueBytes));
      BRAID_RDZV_GET(desired, d.Bytes(kMaxValueBytes));
      absl::StatusOr<std::string> v = map_->CompareSet(key, expected, std::move(desired));
      return v.ok() ? Answer(Reply::kOk, *v) : AnswerOf(v.status());
    }
    case StoreOp::kCheck: {
      BRAID_RDZV_GET(keys, d.Strings(kMaxKeysPerRequest, kMaxKeyBytes));
      return AnswerI64(map_->Check(keys) ? 1 : 0);
    }
    case StoreOp::kDelete: {
      BRAID_RDZV_GET(key, d.Bytes(kMaxKeyBytes));
      return AnswerI64(map_->Delete(key) ? 1 : 0);
    }
    case StoreOp::kNumKeys:
      return AnswerI64(map_->NumKeys());
    case StoreOp::kWait: {
      BRAID_RDZV_GET(keys, d.Strings(kMaxKeysPerRequest, kMaxKeyBytes));
      BRAID_RDZV_GET(ms, d.I64());
      return AnswerOf(map_->Wait(keys, wait_of(ms)));
    }
    case StoreOp::kAwaitJoin: {
      BRAID_RDZV_GET(ms, d.I64());
      return JoinReply(wait_of(ms));
    }
  }
#undef BRAID_RDZV_GET
  return Answer(Reply::kError, absl::StrCat("rendezvous: unknown request ", *op, " from rank ", rank));
}

std::string Server::MissingLocked() const {
  std::vector<int> missing;
  for (size_t r = 0; r < joined_.size(); ++r) {
    if (!joined_[r]) missing.push_back(static_cast<int>(r));
  }
  std::string msg = absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
                                 " of ", joined_.size(), " did not join the rendezvous at ",
                                 options_.context.address);
  if (!refused_.empty()) absl::StrAppend(&msg, " (refused: ", absl::StrJoin(refused_, "; "), ")");
  return msg;
}

absl::Status Server::AwaitJoin(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  const auto all = [&] { return std::all_of(joined_.begin(), joined_.end(), [](bool b) { return b; }); };
  if (cv_.wait_until(l, deadline, all)) return absl::OkStatus();
  join_failure_ = MissingLocked();
  cv_.notify_all();
  return absl::DeadlineExceededError(join_failure_);
}

std::string Server::JoinReply(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const auto all = [&] { return std::all_of(joined_.begin(), joined_.end(), [](bool b) { return b; }); };
  const auto done = [&] { return stopping_ || !join_failure_.empty() || all(); };
  if (timeout.count() <= 0) {
    cv_.wait(l, done);
  } else {
    cv_.wait_for(l, timeout, done);
  }
  if (all()) return Answer(Reply::kOk);
  if (!join_failure_.empty()) return Answer(Reply::kTimeout, join_failure_);
  if (stopping_) return Answer(Reply::kError, "rank 0 stopped serving the rendezvous");
  return Answer(Reply::kTimeout, MissingLocked());
}

}  // namespace braid::worker::rendezvous
