// Helpers shared by the end-to-end tests that drive real braid processes on
// loopback: a free port, a child process killed at scope exit, polling with
// a deadline, a fresh temporary directory, and a blocking HTTP GET.
//
//   const int port = e2e::FreePort();
//   e2e::Process server({BRAID_SERVER_BIN, "--listen", ...}, dir + "/server.log");
//   ASSERT_TRUE(e2e::WaitFor([&] { return e2e::HttpGet(http_port, "/healthz").status == 200; }, 10));
#ifndef BRAID_TESTS_E2E_UTIL_H_
#define BRAID_TESTS_E2E_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "glog/logging.h"
#include "gtest/gtest.h"

namespace braid::e2e {

inline std::string TempDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/braid_e2e_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  CHECK_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A child process (stdout and stderr to `log`); killed with SIGKILL when
// still running at destruction.
class Process {
 public:
  Process(std::vector<std::string> argv, const std::string& log) {
    pid_ = fork();
    CHECK_GE(pid_, 0);
    if (pid_ == 0) {
      FILE* f = fopen(log.c_str(), "w");
      if (f != nullptr) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> args;
      for (std::string& s : argv) args.push_back(s.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() { Kill(SIGKILL); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // True while the process runs (reaps it once it has exited).
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }
  // The waitpid() status once the process has exited (see Alive()).
  int exit_status() const { return exit_status_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

inline bool WaitFor(const std::function<bool()>& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

struct CommandResult {
  std::string out;  // stdout (and whatever the command redirects into it)
  int exit_code = -1;
};

// Runs `cmd` with /bin/sh and collects its stdout and exit code.
inline CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct HttpResponse {
  int status = 0;  // 0: no response
  std::string body;
};

// One HTTP/1.0 GET to 127.0.0.1:port with a receive timeout.
inline HttpResponse HttpGet(int port, const std::string& path, double timeout_s = 2,
                            const std::string& headers = "") {
  HttpResponse r;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  timeval tv{static_cast<time_t>(timeout_s),
             static_cast<suseconds_t>((timeout_s - static_cast<time_t>(timeout_s)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return r;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return r;
  }
  std::string raw;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12) r.status = std::atoi(raw.c_str() + 9);
  const size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

}  // namespace braid::e2e

#endif  // BRAID_TESTS_E2E_UTIL_H_
