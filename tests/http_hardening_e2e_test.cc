// End to end: the HTTP slowloris against a real braid-server
// process. With --http-threads 2, three connections that sent one header
// line every 2 s used to make /healthz time out for as long as they stayed
// open. Now, with a 2 s header deadline:
//  - /healthz answers within 1 s while slow clients are connected;
//  - each slow client gets 408 and is closed by the deadline (+ margin),
//    though it keeps sending;
//  - a client over --http-max-connections-per-client gets 503 at once while
//    other clients are served;
//  - the server is still up, and serves the former attacker afterwards.
// Slow clients connect from 127.0.0.2 (local on Linux), /healthz comes from
// 127.0.0.1: two clients as far as the per-client cap is concerned.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/slow_http_client.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = http_testing::Clock;

constexpr char kClientToken[] = "e2e-client";
constexpr char kWorkerToken[] = "e2e-worker";
constexpr double kHeaderTimeoutS = 2;
constexpr int kPerClient = 4;

using http_testing::Connect;
using http_testing::SecondsSince;

// Sends `request`, then reads until the server closes (or `timeout_s`).
std::string Exchange(int fd, const std::string& request, double timeout_s) {
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  http_testing::ReadUntilClosed(fd, timeout_s, &got);
  return got;
}

// The attack: a header line every 0.5 s, for at most 15 s.
class SlowClient : public http_testing::SlowHeaderClient {
 public:
  SlowClient(int port, const char* source)
      : SlowHeaderClient(port, /*interval_s=*/0.5, source, /*max_s=*/15) {}
};

TEST(HttpHardeningE2eTest, SlowlorisIsClosedAtTheHeaderDeadlineAndHealthzKeepsAnswering) {
  const std::string dir = e2e::TempDir("http_hardening");
  const int port = e2e::FreePort();
  const int http_port = e2e::FreePort();
  e2e::Process server(
      {BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port), "--db", dir + "/server.db",
       "--client-token", kClientToken, "--worker-token", kWorkerToken, "--http-listen",
       absl::StrCat("127.0.0.1:", http_port), "--http-threads", "2", "--http-header-timeout-s",
       absl::StrCat(kHeaderTimeoutS), "--http-max-connections-per-client",
       absl::StrCat(kPerClient)},
      dir + "/server.log");
  ASSERT_TRUE(e2e::WaitFor([&] { return e2e::HttpGet(http_port, "/healthz").status == 200; }, 15))
      << "braid-server did not come up; see " << dir << "/server.log";

  // kPerClient slow clients: more than --http-threads, all a client may open.
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < kPerClient; ++i) {
    slow.push_back(std::make_unique<SlowClient>(http_port, "127.0.0.2"));
    if (!slow.back()->connected()) GTEST_SKIP() << "cannot connect from 127.0.0.2 here";
  }
  const auto attack = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // One more from the same client is over the cap: 503 and closed at once.
  const int extra = Connect(http_port, "127.0.0.2");
  ASSERT_GE(extra, 0);
  const auto extra_start = Clock::now();
  const std::string refused =
      Exchange(extra, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 5);
  EXPECT_LT(SecondsSince(extra_start), 1.0);
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(refused, HasSubstr(R"({"error":"too many connections from this client"})"));
  close(extra);

  // /healthz from another client answers within 1 s, again and again,
  // while the slow clients are open (up to the header deadline).
  int answered = 0;
  while (SecondsSince(attack) < kHeaderTimeoutS - 0.5) {
    const auto start = Clock::now();
    e2e::HttpResponse r = e2e::HttpGet(http_port, "/healthz", /*timeout_s=*/1);
    EXPECT_EQ(r.status, 200) << "/healthz did not answer within 1 s during the attack";
    EXPECT_LT(SecondsSince(start), 1.0);
    EXPECT_EQ(r.body, R"({"status":"ok"})");
    ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(answered, 3);

  // Each slow client is closed at the deadline, though it kept sending.
  for (auto& c : slow) {
    const double closed = c->WaitClosed();
    EXPECT_GE(closed, kHeaderTimeoutS - 0.5);
    EXPECT_LT(closed, kHeaderTimeoutS + 3.0) << "a slow client was not closed at the deadline";
    EXPECT_THAT(c->received(), StartsWith("HTTP/1.1 408 Request Timeout\r\n"));
  }

  // Still up; the former attacker's places are free again (the server
  // drains a closed connection for up to 0.1 s before it lets go of it).
  EXPECT_TRUE(server.Alive());
  std::string again;
  EXPECT_TRUE(e2e::WaitFor(
      [&] {
        const int fd = Connect(http_port, "127.0.0.2");
        again = fd >= 0 ? Exchange(fd, "GET /healthz HTTP/1.0\r\n\r\n", 5) : "";
        if (fd >= 0) close(fd);
        return again.rfind("HTTP/1.1 200 OK\r\n", 0) == 0;
      },
      5))
      << again;
  e2e::HttpResponse m = e2e::HttpGet(http_port, "/metrics", 5,
                                     absl::StrCat("Authorization: Bearer ", kClientToken, "\r\n"));
  EXPECT_EQ(m.status, 200);
  EXPECT_THAT(m.body, HasSubstr(absl::StrCat(
                          "braid_http_connections_closed_total{reason=\"header_timeout\"} ",
                          kPerClient, "\n")));
  EXPECT_THAT(m.body, HasSubstr("braid_http_connections_closed_total{reason=\"client_limit\"} "));
  EXPECT_THAT(m.body,
              Not(HasSubstr("braid_http_connections_closed_total{reason=\"client_limit\"} 0\n")));
  EXPECT_TRUE(server.Alive());
}

}  // namespace
}  // namespace braid
