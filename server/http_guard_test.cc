// Tests of the connection guard: a GuardedHttpServer on a free loopback port
// with a few routes, driven by raw sockets (slow, silent, oversized and
// pipelined clients) and httplib clients (the well-behaved ones). Deadlines
// are short and margins wide: these run beside other work on 2 cores.
#include "server/http_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/slow_http_client.h"
#include "httplib.h"

namespace braid::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = http_testing::Clock;

using http_testing::Connect;
using http_testing::ReadUntilClosed;
using http_testing::SecondsSince;

bool SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until `out` holds `count` complete responses with Content-Length.
bool ReadResponses(int fd, int count, double timeout_s, std::string* out) {
  const auto start = Clock::now();
  char buf[4096];
  auto complete = [&] {
    size_t pos = 0;
    for (int i = 0; i < count; ++i) {
      const size_t head = out->find("\r\n\r\n", pos);
      if (head == std::string::npos) return false;
      const size_t cl = out->find("Content-Length: ", pos);
      if (cl == std::string::npos || cl > head) return false;
      pos = head + 4 + std::stoul(out->substr(cl + 16));
      if (pos > out->size()) return false;
    }
    return true;
  };
  while (!complete()) {
    if (SecondsSince(start) > timeout_s) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return complete();
    out->append(buf, static_cast<size_t>(n));
  }
  return true;
}

bool WaitFor(const std::function<bool()>& pred, double seconds) {
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// A guarded server with /healthz, /block (waits for Unblock()) and POST
// /echo, listening on its own thread.
class TestServer {
 public:
  explicit TestServer(HttpGuardOptions o, int threads = 2, const std::string& cert = "",
                      const std::string& key = "") {
    absl::StatusOr<std::unique_ptr<GuardedHttpServer>> s =
        GuardedHttpServer::Create(o, threads, cert, key);
    CHECK(s.ok()) << s.status();
    server_ = *std::move(s);
    httplib::Server& h = server_->http();
    h.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    h.Get("/block", [this](const httplib::Request&, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      ++blocked_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return unblocked_; });
      res.set_content("done", "text/plain");
    });
    h.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
    h.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(64 << 20, 'x'), "text/plain");
    });
    port_ = h.bind_to_any_port("127.0.0.1");
    CHECK_GT(port_, 0);
    thread_ = std::thread([this] { server_->http().listen_after_bind(); });
    CHECK(WaitFor([this] { return server_->http().is_running(); }, 5));
  }
  ~TestServer() {
    Unblock();
    server_->Shutdown();
    thread_.join();
  }

  int port() const { return port_; }
  GuardedHttpServer& guarded() { return *server_; }
  int64_t Closed(const std::string& reason) { return server_->Stats().closed.at(reason); }
  bool WaitBlocked(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return blocked_ >= n; });
  }
  void Unblock() {
    std::lock_guard<std::mutex> lock(mu_);
    unblocked_ = true;
    cv_.notify_all();
  }
  void Join() { thread_.join(); }

 private:
  std::unique_ptr<GuardedHttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;
  bool unblocked_ = false;
};

// GET /healthz on a fresh connection: the seconds it took, or -1.
double TimedHealthz(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  c.set_read_timeout(5);
  const auto start = Clock::now();
  httplib::Result r = c.Get("/healthz");
  if (!r || r->status != 200) return -1;
  return SecondsSince(start);
}

using SlowClient = http_testing::SlowHeaderClient;

TEST(HttpGuardTest, SlowHeadersAreClosedAtTheDeadlineWhileHealthzAnswers) {
  // One processing slot: before the guard, one slow client was enough.
  TestServer s({.header_timeout_s = 1.5}, /*threads=*/1);
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < 4; ++i) slow.push_back(std::make_unique<SlowClient>(s.port(), 0.25));
  for (int i = 0; i < 5; ++i) {
    const double t = TimedHealthz(s.port());
    EXPECT_GE(t, 0) << "healthz failed while slow clients were connected";
    EXPECT_LT(t, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& c : slow) {
    const double closed = c->WaitClosed();
    EXPECT_GE(closed, 1.2);  // not before the deadline...
    EXPECT_LT(closed, 4.0);  // ...and soon after it, though it kept sending
    EXPECT_THAT(c->received(), StartsWith("HTTP/1.1 408 Request Timeout\r\n"));
    EXPECT_THAT(c->received(), HasSubstr(R"({"error":"request header timeout"})"));
  }
  EXPECT_EQ(s.Closed("header_timeout"), 4);
  EXPECT_GE(TimedHealthz(s.port()), 0);
}

TEST(HttpGuardTest, SilentConnectionIsClosedWithoutAResponse) {
  TestServer s({.header_timeout_s = 0.5});
  const int fd = Connect(s.port());
  ASSERT_GE(fd, 0);
  const auto start = Clock::now();
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, 5, &got));
  EXPECT_GE(SecondsSince(start), 0.4);
  EXPECT_EQ(got, "");  // a browser's preconnect must not see a 408
  close(fd);
  EXPECT_EQ(s.Closed("header_timeout"), 1);
}

TEST(HttpGuardTest, PerClientCapAnswers503AndSparesOtherClients) {
  TestServer s({.header_timeout_s = 10, .max_connections_per_client = 2});
  const int a = Connect(s.port(), "127.0.0.2");
  if (a < 0) GTEST_SKIP() << "cannot bind 127.0.0.2 here";
  const int b = Connect(s.port(), "127.0.0.2");
  ASSERT_GE(b, 0);
  ASSERT_TRUE(WaitFor([&] { return s.guarded().Stats().open_connections == 2; }, 5));
  const int c = Connect(s.port(), "127.0.0.2");
  ASSERT_GE(c, 0);
  SendAll(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(c, 5, &got));
  EXPECT_THAT(got, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(got, HasSubstr("Retry-After: 1\r\n"));
  EXPECT_THAT(got, HasSubstr(R"({"error":"too many connections from this client"})"));
  close(c);
  EXPECT_EQ(s.Closed("client_limit"), 1);
  // 127.0.0.1 is another client.
  EXPECT_GE(TimedHealthz(s.port()), 0);
  // Closing one frees its place.
  close(a);
  ASSERT_TRUE(WaitFor([&] { return s.guarded().Stats().open_connections == 1; }, 5));
  const int d = Connect(s.port(), "127.0.0.2");
  SendAll(d, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  got.clear();
  EXPECT_TRUE(ReadResponses(d, 1, 5, &got));
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200 OK\r\n"));
  close(b);
  close(d);
}

TEST(HttpGuardTest, TotalCapAnswers503) {
  TestServer s({.max_connections = 2, .max_connections_per_client = 2});
  const int a = Connect(s.port());
  const int b = Connect(s.port());
  ASSERT_TRUE(WaitFor([&] { return s.guarded().Stats().open_connections == 2; }, 5));
  const int c = Connect(s.port());
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(c, 5, &got));
  EXPECT_THAT(got, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(got, HasSubstr(R"({"error":"too many connections"})"));
  EXPECT_EQ(s.Closed("total_limit"), 1);
  for (int fd : {a, b, c}) close(fd);
}

TEST(HttpGuardTest, OversizedHeaderGets431) {
  TestServer s({.max_header_bytes = 1024});
  const int fd = Connect(s.port());
  SendAll(fd, "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, 5, &got));
  EXPECT_THAT(got, StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  close(fd);
  EXPECT_EQ(s.Closed("header_too_large"), 1);
  // A header just under the cap is fine.
  const int ok = Connect(s.port());
  SendAll(ok, "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(900, 'a') + "\r\n\r\n");
  got.clear();
  EXPECT_TRUE(ReadResponses(ok, 1, 5, &got));
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200 OK\r\n"));
  close(ok);
}

TEST(HttpGuardTest, SlowBodyIsCutAtTheBodyDeadline) {
  TestServer s({.body_timeout_s = 0.5});
  const int fd = Connect(s.port());
  SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789");
  const auto start = Clock::now();
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, 5, &got));
  EXPECT_GE(SecondsSince(start), 0.4);
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_THAT(got, Not(HasSubstr("200 OK")));
  close(fd);
  EXPECT_EQ(s.Closed("body_timeout"), 1);
  // The slot it held is free again.
  EXPECT_GE(TimedHealthz(s.port()), 0);
}

TEST(HttpGuardTest, SlowReaderIsCutAtTheResponseDeadline) {
  TestServer s({.response_timeout_s = 0.5}, /*threads=*/1);
  const int fd = Connect(s.port());
  SendAll(fd, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  // Never reading: 64 MiB do not fit in the socket buffers.
  ASSERT_TRUE(WaitFor([&] { return s.Closed("response_timeout") == 1; }, 10));
  // The one slot is free again.
  EXPECT_GE(TimedHealthz(s.port()), 0);
  close(fd);
}

TEST(HttpGuardTest, KeepAliveEndsAfterMaxRequestsOrWhenIdle) {
  TestServer s({.keep_alive_timeout_s = 0.5, .keep_alive_max_requests = 2});
  const int fd = Connect(s.port());
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string got;
  SendAll(fd, get);
  ASSERT_TRUE(ReadResponses(fd, 1, 5, &got));
  EXPECT_THAT(got, Not(HasSubstr("Connection: close")));
  got.clear();
  SendAll(fd, get);
  EXPECT_TRUE(ReadUntilClosed(fd, 5, &got));  // the second request was the last
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(got, HasSubstr("Connection: close\r\n"));
  close(fd);

  const int idle = Connect(s.port());
  SendAll(idle, get);
  got.clear();
  ASSERT_TRUE(ReadResponses(idle, 1, 5, &got));
  const auto start = Clock::now();
  EXPECT_TRUE(ReadUntilClosed(idle, 5, &got));
  EXPECT_GE(SecondsSince(start), 0.3);
  EXPECT_LT(SecondsSince(start), 3.0);
  close(idle);
  // Idle keep-alive closes are normal: not counted.
  EXPECT_EQ(s.Closed("header_timeout"), 0);
}

TEST(HttpGuardTest, PipelinedRequestsAreAnsweredInOrder) {
  TestServer s({});
  const int fd = Connect(s.port());
  SendAll(fd,
          "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
          "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
          "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  ASSERT_TRUE(ReadResponses(fd, 3, 5, &got)) << got;
  const size_t ok = got.find(R"({"status":"ok"})");
  const size_t hello = got.find("\r\n\r\nhello");
  const size_t missing = got.find("HTTP/1.1 404 Not Found");
  EXPECT_NE(ok, std::string::npos);
  EXPECT_LT(ok, hello);
  EXPECT_LT(hello, missing);
  EXPECT_NE(missing, std::string::npos);
  close(fd);
}

TEST(HttpGuardTest, CompleteRequestWaitsForASlotThen503) {
  TestServer s({.queue_timeout_s = 0.5}, /*threads=*/1);
  std::thread blocker([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(20);
    httplib::Result r = c.Get("/block");
    EXPECT_TRUE(r && r->status == 200 && r->body == "done");
  });
  ASSERT_TRUE(s.WaitBlocked(1));
  const int fd = Connect(s.port());
  SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto start = Clock::now();
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, 5, &got));
  EXPECT_GE(SecondsSince(start), 0.4);
  EXPECT_THAT(got, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(got, HasSubstr(R"({"error":"server busy"})"));
  close(fd);
  EXPECT_EQ(s.Closed("busy"), 1);
  s.Unblock();
  blocker.join();
}

TEST(HttpGuardTest, ShutdownClosesIdleConnectionsAndLetsRequestsFinish) {
  auto s = std::make_unique<TestServer>(HttpGuardOptions{.keep_alive_timeout_s = 60});
  const int idle = Connect(s->port());  // would wait for a header for 10 s
  std::thread blocker([&] {
    httplib::Client c("127.0.0.1", s->port());
    c.set_read_timeout(20);
    httplib::Result r = c.Get("/block");
    EXPECT_TRUE(r && r->status == 200 && r->body == "done");
  });
  ASSERT_TRUE(s->WaitBlocked(1));
  const auto start = Clock::now();
  std::thread stopper([&] { s->guarded().Shutdown(); });
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(idle, 5, &got));
  EXPECT_LT(SecondsSince(start), 2.0);
  s->Unblock();  // the request in flight still gets its answer
  blocker.join();
  stopper.join();
  s.reset();  // joins the listening thread
  EXPECT_LT(SecondsSince(start), 3.0);
  close(idle);
}

TEST(HttpGuardTest, RejectsBadOptions) {
  const HttpGuardOptions good;
  EXPECT_TRUE(ValidateHttpGuardOptions(good).ok());
  auto code = [](HttpGuardOptions o) { return GuardedHttpServer::Create(o, 2).status().code(); };
  HttpGuardOptions o = good;
  o.header_timeout_s = 0;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ValidateHttpGuardOptions(o).message()),
              HasSubstr("--http-header-timeout-s"));
  o = good;
  o.max_connections_per_client = good.max_connections + 1;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = good;
  o.keep_alive_max_requests = 0;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = good;
  o.max_header_bytes = 100;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GuardedHttpServer::Create(good, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GuardedHttpServer::Create(good, 2, "/nonexistent/cert.pem", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GuardedHttpServer::Create(good, 2, "/nonexistent/cert.pem", "/nonexistent/key.pem")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A self-signed P-256 certificate for 127.0.0.1, valid for an hour.
void WriteSelfSigned(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  ASSERT_GT(X509_sign(x, key, EVP_sha256()), 0);
  FILE* f = fopen(cert_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  PEM_write_X509(f, x);
  fclose(f);
  f = fopen(key_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
}

class HttpGuardTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Per process: two runs at once must not overwrite each other's files.
    const std::string dir = ::testing::TempDir() + "/http_guard_tls_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    cert_ = dir + "/cert.pem";
    key_ = dir + "/key.pem";
    WriteSelfSigned(cert_, key_);
  }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(cert_).parent_path());
  }
  std::string cert_, key_;
};

TEST_F(HttpGuardTlsTest, ServesHttpsAndClosesStalledHandshakesAndSlowHeaders) {
  TestServer s({.header_timeout_s = 1}, /*threads=*/1, cert_, key_);
  ASSERT_TRUE(s.guarded().tls());
  httplib::SSLClient client("127.0.0.1", s.port());
  client.enable_server_certificate_verification(false);
  client.set_read_timeout(5);
  httplib::Result r = client.Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
  httplib::Result echo = client.Post("/echo", "over tls", "text/plain");  // same connection
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->body, "over tls");

  // A TCP connection that never starts the handshake.
  const int silent = Connect(s.port());
  // A TLS client that sends half a header.
  const int slow = Connect(s.port());
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, slow);
  ASSERT_EQ(SSL_connect(ssl), 1);
  const std::string half = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(SSL_write(ssl, half.data(), static_cast<int>(half.size())),
            static_cast<int>(half.size()));
  const auto start = Clock::now();
  // Meanwhile the one processing slot is free for others.
  httplib::Result during = client.Get("/healthz");
  ASSERT_TRUE(during);
  EXPECT_EQ(during->status, 200);
  EXPECT_LT(SecondsSince(start), 0.9);
  char buf[1024];
  const int n = SSL_read(ssl, buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), StartsWith("HTTP/1.1 408 Request Timeout"));
  EXPECT_LE(SSL_read(ssl, buf, sizeof(buf)), 0);  // then closed
  EXPECT_LT(SecondsSince(start), 3.0);
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(silent, 5, &got));
  EXPECT_EQ(got, "");
  EXPECT_EQ(s.Closed("tls_handshake"), 1);
  EXPECT_EQ(s.Closed("header_timeout"), 1);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(slow);
  close(silent);
}

}  // namespace
}  // namespace braid::server
