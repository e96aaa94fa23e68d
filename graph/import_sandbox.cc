#include "graph/import_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "graph/text_format.h"

namespace braid::graph {
namespace {

// Framing of the child's answer: one record per field, each a 1-byte tag,
// an 8-byte little-endian length and the bytes.
constexpr char kTagCode = 'c';     // absl::StatusCode as decimal text
constexpr char kTagMessage = 'm';  // status message (code != OK)
constexpr char kTagGraph = 'g';    // ToText of the graph (code == OK)
constexpr char kTagWarning = 'w';  // one warning

void Put(std::string& out, char tag, std::string_view bytes) {
  out.push_back(tag);
  uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(bytes);
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int64_t MappedBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  if (!(statm >> pages)) return 0;
  return pages * sysconf(_SC_PAGESIZE);
}

[[noreturn]] void RunChild(int fd, const std::function<absl::StatusOr<Graph>(std::vector<std::string>*)>& import,
                           const SandboxOptions& options) {
  if (options.extra_address_space_bytes > 0) {
    const rlim_t limit = static_cast<rlim_t>(MappedBytes() + options.extra_address_space_bytes);
    rlimit r{limit, limit};
    setrlimit(RLIMIT_AS, &r);
  }
  std::vector<std::string> warnings;
  std::string out;
  try {
    absl::StatusOr<Graph> g = import(&warnings);
    for (const std::string& w : warnings) Put(out, kTagWarning, w);
    Put(out, kTagCode, std::to_string(static_cast<int>(g.status().code())));
    if (g.ok()) {
      Put(out, kTagGraph, ToText(*g));
    } else {
      Put(out, kTagMessage, std::string(g.status().message()));
    }
  } catch (const std::bad_alloc&) {
    out.clear();
    Put(out, kTagCode, std::to_string(static_cast<int>(absl::StatusCode::kResourceExhausted)));
    Put(out, kTagMessage, "the import ran out of memory (address-space limit of the import process)");
  } catch (const std::exception& e) {
    out.clear();
    Put(out, kTagCode, std::to_string(static_cast<int>(absl::StatusCode::kInvalidArgument)));
    Put(out, kTagMessage, absl::StrCat("the import failed: ", e.what()));
  }
  _exit(WriteAll(fd, out) ? 0 : 3);
}

}  // namespace

absl::StatusOr<Graph> ImportIsolated(const std::function<absl::StatusOr<Graph>(std::vector<std::string>*)>& import,
                                     std::string_view what_view, const SandboxOptions& options,
                                     std::vector<std::string>* warnings) {
  const std::string what(what_view);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return import(warnings);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return import(warnings);
  }
  if (pid == 0) {
    close(fds[0]);
    RunChild(fds[1], import, options);
  }
  close(fds[1]);
  // Read the whole answer before waiting: the child blocks on a full pipe.
  std::string data;
  char buf[1 << 16];
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options.timeout_s));
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child exited or closed its end
    data.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": the import did not finish within ", options.timeout_s, " s and was stopped"));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the model crashed the importer (signal ", sig, ", ", strsignal(sig),
        ", inside ONNX shape inference or import): it is malformed; nothing was imported"));
  }
  // Parse the records.
  int code = -1;
  std::string message, text;
  std::vector<std::string> got_warnings;
  size_t i = 0;
  while (i + 9 <= data.size()) {
    const char tag = data[i];
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= static_cast<uint64_t>(static_cast<unsigned char>(data[i + 1 + k])) << (8 * k);
    i += 9;
    if (n > data.size() - i) break;
    std::string field = data.substr(i, n);
    i += n;
    if (tag == kTagCode) code = std::atoi(field.c_str());
    if (tag == kTagMessage) message = std::move(field);
    if (tag == kTagGraph) text = std::move(field);
    if (tag == kTagWarning) got_warnings.push_back(std::move(field));
  }
  if (code < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(what, ": the import process ended without an answer (",
                                            WIFEXITED(status) ? "exit code " : "status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : status, ")"));
  }
  if (warnings != nullptr) {
    warnings->insert(warnings->end(), got_warnings.begin(), got_warnings.end());
  }
  if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), message);
  absl::StatusOr<Graph> g = ParseText(text);
  if (!g.ok()) {
    return absl::InternalError(absl::StrCat(what, ": the imported graph did not survive the "
                                            "round trip from the import process: ",
                                            std::string(g.status().message())));
  }
  return g;
}

}  // namespace braid::graph
