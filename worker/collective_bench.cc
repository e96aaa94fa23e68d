#include "worker/collective_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "worker/timing.h"

extern char** environ;

namespace braid::worker {
namespace {

namespace fs = std::filesystem;
using costmodel::Collective;

// A temporary directory removed with everything in it on destruction.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/braid-coll-XXXXXX");
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("collective bench: mkdtemp ", tmpl, ": ",
                                              std::strerror(errno)));
    }
    return TempDir(buf.data());
  }
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, "")) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

std::string ReadTail(const std::string& path, size_t max_chars) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_chars ? s.substr(s.size() - max_chars) : s;
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("collective bench: spawn ", args[0], ": ",
                                            std::strerror(rc)));
  }
  return pid;
}

// Per (collective, bytes): per-repetition times of one rank.
using RankTimes = std::map<std::pair<std::string, int64_t>, std::vector<double>>;

absl::StatusOr<RankTimes> ParseRankOutput(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("collective bench: no output ", path));
  RankTimes times;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    int64_t bytes = 0;
    if (!(ls >> name >> bytes)) {
      return absl::InternalError(absl::StrCat("collective bench: bad line in ", path, ": ", line));
    }
    std::vector<double>& t = times[{name, bytes}];
    for (double x; ls >> x;) t.push_back(x);
  }
  return times;
}

absl::Status Validate(const CollectiveBenchOptions& o) {
  if (o.ranks < 2) return absl::InvalidArgumentError("collective bench: ranks must be >= 2");
  if (o.collectives.empty() || o.sizes.empty()) {
    return absl::InvalidArgumentError("collective bench: collectives and sizes must be non-empty");
  }
  if (o.repetitions < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("collective bench: repetitions >= 1 and warmup >= 0");
  }
  for (Collective c : o.collectives) {
    if (c == Collective::kReduceScatter || c == Collective::kSendRecv) {
      return absl::UnimplementedError(absl::StrCat(
          "collective bench: ", std::string(costmodel::CollectiveName(c)),
          " is not available in LibTorch 1.13's ProcessGroupGloo"));
    }
  }
  for (int64_t b : o.sizes) {
    if (b <= 0 || b % (4 * o.ranks) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective bench: size ", b, " is not a positive multiple of 4 * ranks = ", 4 * o.ranks));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FindRankBinary(const std::string& configured) {
  std::vector<std::string> tried;
  auto usable = [&](const fs::path& p) {
    tried.push_back(p.string());
    return !p.empty() && access(p.c_str(), X_OK) == 0;
  };
  if (!configured.empty()) {
    if (usable(configured)) return fs::absolute(configured).string();
  } else {
    if (const char* env = std::getenv("BRAID_COLLECTIVE_RANK"); env != nullptr && usable(env)) {
      return fs::absolute(env).string();
    }
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      for (fs::path p : {self.parent_path() / "braid-collective-rank",
                         self.parent_path().parent_path() / "bin" / "braid-collective-rank"}) {
        if (usable(p)) return p.string();
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("collective bench: rank program braid-collective-rank not "
                                          "found or not executable; tried ",
                                          absl::StrJoin(tried, ", ")));
}

absl::StatusOr<std::vector<CollectiveMeasurement>> RunCollectiveBench(
    const CollectiveBenchOptions& options, costmodel::ProfileStore* store) {
  if (auto s = Validate(options); !s.ok()) return s;
  absl::StatusOr<std::string> binary = FindRankBinary(options.rank_binary);
  if (!binary.ok()) return binary.status();
  absl::StatusOr<TempDir> dir = TempDir::Create();
  if (!dir.ok()) return dir.status();

  std::vector<std::string> names;
  for (Collective c : options.collectives) names.push_back(std::string(costmodel::CollectiveName(c)));
  std::vector<pid_t> pids;
  auto kill_all = [&pids] {
    for (pid_t p : pids) {
      if (p > 0) kill(p, SIGKILL);
    }
    for (pid_t& p : pids) {
      if (p > 0) waitpid(p, nullptr, 0);
      p = 0;
    }
  };
  for (int r = 0; r < options.ranks; ++r) {
    std::vector<std::string> args = {
        *binary,
        "--store", dir->path() + "/store",
        "--out", absl::StrCat(dir->path(), "/rank", r, ".txt"),
        "--rank", absl::StrCat(r),
        "--world", absl::StrCat(options.ranks),
        "--collectives", absl::StrJoin(names, ","),
        "--sizes", absl::StrJoin(options.sizes, ","),
        "--warmup", absl::StrCat(options.warmup),
        "--repetitions", absl::StrCat(options.repetitions)};
    absl::StatusOr<pid_t> pid = Spawn(args, absl::StrCat(dir->path(), "/rank", r, ".log"));
    if (!pid.ok()) {
      kill_all();
      return pid.status();
    }
    pids.push_back(*pid);
  }

  // Wait for every rank; a failed rank fails the run (the others would block
  // in the collective, so they are killed).
  auto start = std::chrono::steady_clock::now();
  int remaining = options.ranks;
  while (remaining > 0) {
    for (int r = 0; r < options.ranks; ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got == 0) continue;
      pids[r] = 0;
      --remaining;
      if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        kill_all();
        return absl::InternalError(
            absl::StrCat("collective bench: rank ", r, " failed (status ", status, "): ",
                         ReadTail(absl::StrCat(dir->path(), "/rank", r, ".log"), 2000)));
      }
    }
    if (remaining > 0) {
      if (SecondsSince(start) > options.timeout_s) {
        kill_all();
        return absl::DeadlineExceededError(absl::StrCat(
            "collective bench: ranks still running after ", options.timeout_s, " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::vector<RankTimes> ranks;
  for (int r = 0; r < options.ranks; ++r) {
    absl::StatusOr<RankTimes> t = ParseRankOutput(absl::StrCat(dir->path(), "/rank", r, ".txt"));
    if (!t.ok()) return t.status();
    ranks.push_back(*std::move(t));
  }
  std::vector<CollectiveMeasurement> result;
  for (const std::string& name : names) {
    for (int64_t bytes : options.sizes) {
      // A collective ends when its slowest rank does: per repetition, the max.
      std::vector<double> slowest(options.repetitions, 0.0);
      for (int r = 0; r < options.ranks; ++r) {
        auto it = ranks[r].find({name, bytes});
        if (it == ranks[r].end() || static_cast<int>(it->second.size()) != options.repetitions) {
          return absl::InternalError(absl::StrCat("collective bench: rank ", r, " reported no ",
                                                  options.repetitions, " times for ", name, " ",
                                                  bytes));
        }
        for (int i = 0; i < options.repetitions; ++i) {
          slowest[i] = std::max(slowest[i], it->second[i]);
        }
      }
      TimingSummary s = Summarize(slowest);
      CollectiveMeasurement m{{name, options.ranks, bytes, s.median_s}, s.iqr_s};
      if (store != nullptr) {
        if (auto st = store->PutComm(options.device_kind, m.sample); !st.ok()) return st;
      }
      result.push_back(m);
    }
  }
  return result;
}

}  // namespace braid::worker
