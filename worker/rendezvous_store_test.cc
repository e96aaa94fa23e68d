#include "worker/rendezvous_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/rendezvous_auth.h"
#include "worker/rendezvous_wire.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using rendezvous::Clock;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A raw TCP connection to 127.0.0.1:port, as a foreign process makes it.
int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Everything the peer sends until it closes (or 5 s pass).
std::string ReadToEnd(int fd) {
  std::string all;
  while (true) {
    absl::StatusOr<std::string> b = rendezvous::ReadExactly(fd, 1, Clock::now() + std::chrono::seconds(5));
    if (!b.ok()) break;
    all += *b;
  }
  return all;
}

class RendezvousStoreTest : public ::testing::Test {
 protected:
  RendezvousOptions Options(int rank, const std::string& secret) const {
    return RendezvousOptions{.address = absl::StrCat("127.0.0.1:", port_), .host = "127.0.0.1",
                             .port = static_cast<uint16_t>(port_), .rank = rank, .world = 2,
                             .key = DeriveRendezvousKey(secret),
                             .timeout = std::chrono::seconds(20)};
  }
  RendezvousContext Context() const { return {absl::StrCat("127.0.0.1:", port_), 2}; }

  const int port_ = FreePort();
  const std::string secret_ = "rendezvous-test-secret-0123456789";
};

TEST_F(RendezvousStoreTest, RanksWithTheKeyShareKeysAndValues) {
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> zero = RendezvousStore::Open(Options(0, secret_));
  ASSERT_TRUE(zero.ok()) << zero.status();
  auto joining = std::async(std::launch::async, [&] { return RendezvousStore::Open(Options(1, secret_)); });
  ASSERT_TRUE((*zero)->AwaitJoin(Clock::now() + std::chrono::seconds(20)).ok());
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> one = joining.get();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE((*one)->AwaitJoin(Clock::now() + std::chrono::seconds(20)).ok());

  c10d::Store& a = **zero;
  c10d::Store& b = **one;
  // A get waits for the other rank's set.
  auto got = std::async(std::launch::async, [&] { return b.get("from-zero"); });
  a.set("from-zero", {1, 2, 3});
  EXPECT_EQ(got.get(), (std::vector<uint8_t>{1, 2, 3}));
  b.set("from-one", {9});
  EXPECT_EQ(a.get("from-one"), std::vector<uint8_t>{9});
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(a.add("n", -2), 3);
  EXPECT_TRUE(b.check({"n", "from-zero"}));
  EXPECT_FALSE(b.check({"n", "absent"}));
  EXPECT_EQ(b.compareSet("cas", {}, {7}), std::vector<uint8_t>{7});
  EXPECT_EQ(b.compareSet("cas", {8}, {9}), std::vector<uint8_t>{7});
  EXPECT_EQ(a.compareSet("cas", {7}, {9}), std::vector<uint8_t>{9});
  EXPECT_EQ(b.getNumKeys(), 4);
  EXPECT_TRUE(b.deleteKey("cas"));
  EXPECT_FALSE(a.deleteKey("cas"));
  EXPECT_EQ(a.getNumKeys(), 3);
  EXPECT_THROW(b.wait({"never"}, std::chrono::milliseconds(200)), std::exception);
  b.wait({"n"}, std::chrono::milliseconds(200));
}

TEST_F(RendezvousStoreTest, ARankWithAnotherKeyIsRefusedAndNamedWhenTheJoinTimesOut) {
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> zero = RendezvousStore::Open(Options(0, secret_));
  ASSERT_TRUE(zero.ok()) << zero.status();
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> other =
      RendezvousStore::Open(Options(1, "another-secret-of-enough-length"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << other.status();
  EXPECT_THAT(other.status().message(), HasSubstr("refused this rank's key proof"));
  const absl::Status joined = (*zero)->AwaitJoin(Clock::now() + std::chrono::milliseconds(300));
  EXPECT_EQ(joined.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(joined.message(), HasSubstr("rank 1 of 2 did not join the rendezvous at 127.0.0.1:"));
  EXPECT_THAT(joined.message(), HasSubstr("claiming rank 1 failed the key challenge"));
}

// A foreign process that replays an honest rank's claim, recorded against an
// earlier server nonce, gets the nonce and a refusal byte, nothing else; a
// claim for rank 0 or outside the world is refused the same way.
TEST_F(RendezvousStoreTest, AReplayedOrForeignClaimGetsNothingButARefusal) {
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> zero = RendezvousStore::Open(Options(0, secret_));
  ASSERT_TRUE(zero.ok()) << zero.status();
  (*zero)->set("gloo-address", {'s', 'e', 'c', 'r', 'e', 't'});
  const std::string key = DeriveRendezvousKey(secret_);
  const std::string old_server_nonce = RandomBytes(kRendezvousNonceBytes);
  const std::string client_nonce = RandomBytes(kRendezvousNonceBytes);
  const std::string recorded =
      HandshakeProof(key, Context(), HandshakeRole::kClient, 1, old_server_nonce, client_nonce);
  for (const uint8_t claimed : {uint8_t{1}, uint8_t{0}, uint8_t{7}}) {
    const int fd = Dial(port_);
    absl::StatusOr<std::string> hello = rendezvous::ReadExactly(fd, 5 + kRendezvousNonceBytes,
                                                                Clock::now() + std::chrono::seconds(5));
    ASSERT_TRUE(hello.ok()) << hello.status();
    EXPECT_EQ(hello->substr(0, 5), "BRDZ1");
    EXPECT_NE(hello->substr(5), old_server_nonce);  // fresh
    std::string claim = {static_cast<char>(claimed), 0, 0, 0};
    claim += client_nonce + recorded;
    ASSERT_TRUE(rendezvous::WriteAll(fd, claim, Clock::now() + std::chrono::seconds(5)).ok());
    // The refusal byte, then the server closes: nothing else comes.
    EXPECT_EQ(ReadToEnd(fd), std::string(1, '\0')) << "claimed rank " << int{claimed};
    close(fd);
  }
  // A connection that never speaks is dropped at the handshake deadline; the
  // honest rank still joins meanwhile.
  const int idle = Dial(port_);
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> one = RendezvousStore::Open(Options(1, secret_));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->get("gloo-address"), (std::vector<uint8_t>{'s', 'e', 'c', 'r', 'e', 't'}));
  const absl::Status joined = (*zero)->AwaitJoin(Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(joined.ok()) << joined;
  close(idle);
}

// Rank 1 checks rank 0 too: a process at the address that cannot prove the
// key (here one that accepts any claim) is refused by the joining rank.
TEST_F(RendezvousStoreTest, AJoiningRankRefusesAServerWithoutTheKey) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port_));
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  std::thread fake([&] {
    const int fd = accept(listener, nullptr, nullptr);
    const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
    (void)rendezvous::WriteAll(fd, "BRDZ1" + RandomBytes(kRendezvousNonceBytes), end);
    (void)rendezvous::ReadExactly(fd, 4 + kRendezvousNonceBytes + kRendezvousMacBytes, end);
    (void)rendezvous::WriteAll(fd, std::string(1, '\1') + std::string(kRendezvousMacBytes, '0'), end);
    ReadToEnd(fd);
    close(fd);
  });
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> one = RendezvousStore::Open(Options(1, secret_));
  EXPECT_EQ(one.status().code(), absl::StatusCode::kPermissionDenied) << one.status();
  EXPECT_THAT(one.status().message(), HasSubstr("failed the key challenge"));
  fake.join();
  close(listener);
}

TEST_F(RendezvousStoreTest, TheServerListensOnTheRendezvousAddressOnly) {
  absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> zero = RendezvousStore::Open(Options(0, secret_));
  ASSERT_TRUE(zero.ok()) << zero.status();
  // Another loopback address of this host is not the rendezvous address.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  a.sin_port = htons(static_cast<uint16_t>(port_));
  EXPECT_NE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  close(fd);
}

TEST(EscapePeerTextTest, TerminalEscapesAndControlBytesBecomeVisible) {
  EXPECT_EQ(EscapePeerText("ok \"quoted\" text"), "ok \"quoted\" text");
  EXPECT_EQ(EscapePeerText("\x1b[2J\x1b]0;owned\x07"), "\\x1b[2J\\x1b]0;owned\\x07");
  EXPECT_EQ(EscapePeerText("a\\x1b\nb\xff"), "a\\\\x1b\\x0ab\\xff");
  EXPECT_EQ(EscapePeerText(std::string(10, 'x'), 4), "xxxx...");
  EXPECT_THAT(EscapePeerText(std::string("\0\r", 2)), Not(HasSubstr("\r")));
}

TEST(HandshakeProofTest, EachFieldOfTheTranscriptMatters) {
  const std::string k = DeriveRendezvousKey("some-secret-of-enough-length");
  const RendezvousContext ctx{"10.0.0.1:29500", 4};
  const std::string ns(32, 'a'), nc(32, 'b');
  const std::string p = HandshakeProof(k, ctx, HandshakeRole::kClient, 2, ns, nc);
  EXPECT_EQ(p.size(), kRendezvousMacBytes);
  EXPECT_EQ(p, HandshakeProof(k, ctx, HandshakeRole::kClient, 2, ns, nc));
  EXPECT_NE(p, HandshakeProof(k, ctx, HandshakeRole::kServer, 2, ns, nc));
  EXPECT_NE(p, HandshakeProof(k, ctx, HandshakeRole::kClient, 3, ns, nc));
  EXPECT_NE(p, HandshakeProof(k, {"10.0.0.1:29501", 4}, HandshakeRole::kClient, 2, ns, nc));
  EXPECT_NE(p, HandshakeProof(k, {"10.0.0.1:29500", 5}, HandshakeRole::kClient, 2, ns, nc));
  EXPECT_NE(p, HandshakeProof(k, ctx, HandshakeRole::kClient, 2, std::string(32, 'c'), nc));
  EXPECT_NE(p, HandshakeProof(k, ctx, HandshakeRole::kClient, 2, ns, std::string(32, 'c')));
  EXPECT_NE(p, HandshakeProof(DeriveRendezvousKey("other-secret-of-enough-len"), ctx,
                              HandshakeRole::kClient, 2, ns, nc));
  // The rendezvous key is not the secret (a plan tag keyed by it differs).
  EXPECT_NE(k, "some-secret-of-enough-length");
}

}  // namespace
}  // namespace braid::worker
