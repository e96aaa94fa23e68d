// Client ends of the HTTP guard's tests (server/http_guard_test.cc and the
// end-to-end tests/http_hardening_e2e_test.cc): a TCP connection from a
// chosen loopback address, and the slowloris client that sends a request
// line and then one header line per interval, never ending the header.
//
//   SlowHeaderClient c(port, /*interval_s=*/0.5, "127.0.0.2");
//   double closed_after = c.WaitClosed();   // the server's header deadline
//   EXPECT_THAT(c.received(), StartsWith("HTTP/1.1 408"));
#ifndef BRAID_TESTS_SLOW_HTTP_CLIENT_H_
#define BRAID_TESTS_SLOW_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace braid::http_testing {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A blocking TCP connection to 127.0.0.1:port, from `source` when given (any
// address in 127/8 is local on Linux: a second "client" for the per-client
// cap); -1 on failure.
inline int Connect(int port, const char* source = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (source != nullptr) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    inet_pton(AF_INET, source, &s.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&s), sizeof(s)) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes (true) or `timeout_s` passes (false).
inline bool ReadUntilClosed(int fd, double timeout_s, std::string* out) {
  const auto start = Clock::now();
  char buf[4096];
  while (SecondsSince(start) < timeout_s) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // EOF or reset
    out->append(buf, static_cast<size_t>(n));
  }
  return false;
}

// The slowloris attack: a request line, then a header line every
// `interval_s`, never the empty line that ends the header, for at most
// `max_s`. Notes what the server answered and when it closed.
class SlowHeaderClient {
 public:
  SlowHeaderClient(int port, double interval_s, const char* source = nullptr, double max_s = 30)
      : fd_(Connect(port, source)), connected_(fd_ >= 0), start_(Clock::now()) {
    if (fd_ < 0) return;
    thread_ = std::thread([this, interval_s, max_s] {
      std::string line = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
      auto next = Clock::now();
      char buf[4096];
      for (int i = 0; SecondsSince(start_) < max_s; ++i) {
        if (Clock::now() >= next) {
          // A failed send (reset) shows up as EOF or an error below.
          send(fd_, line.data(), line.size(), MSG_NOSIGNAL);
          line = "X-Slow-" + std::to_string(i) + ": 1\r\n";
          next += std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(interval_s));
        }
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) break;
        received_.append(buf, static_cast<size_t>(n));
      }
      closed_after_s_ = SecondsSince(start_);
      close(fd_);  // as a client would once the server closed
      fd_ = -1;
    });
  }
  ~SlowHeaderClient() {
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  SlowHeaderClient(const SlowHeaderClient&) = delete;
  SlowHeaderClient& operator=(const SlowHeaderClient&) = delete;

  bool connected() const { return connected_; }
  // Seconds from connect until the server closed it (max_s: never).
  double WaitClosed() {
    if (thread_.joinable()) thread_.join();
    return closed_after_s_;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  const bool connected_;
  Clock::time_point start_;
  std::thread thread_;
  double closed_after_s_ = -1;
  std::string received_;
};

}  // namespace braid::http_testing

#endif  // BRAID_TESTS_SLOW_HTTP_CLIENT_H_
