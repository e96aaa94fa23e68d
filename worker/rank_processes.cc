#include "worker/rank_processes.h"

#include <fcntl.h>
#include <sched.h>
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
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/collective_bench.h"
#include "worker/timing.h"

extern char** environ;

namespace braid::worker {
namespace {

std::string ReadTail(const std::string& path, size_t max_chars) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_chars ? s.substr(s.size() - max_chars) : s;
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log,
                            std::string_view what) {
  if (args.empty()) return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": empty argv"));
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
    return absl::InternalError(
        absl::StrCat(std::string(what), ": spawn ", args[0], ": ", std::strerror(rc)));
  }
  return pid;
}

void KillAll(std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0) kill(p, SIGKILL);
  }
  for (pid_t& p : pids) {
    if (p > 0) waitpid(p, nullptr, 0);
    p = 0;
  }
}

}  // namespace

absl::StatusOr<RankDir> RankDir::Create(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base ? base : "/tmp", "/", std::string(prefix), "-XXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return RankDir(buf.data());
}

RankDir::RankDir(RankDir&& o) noexcept : path_(std::exchange(o.path_, "")) {}

RankDir::~RankDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string RankDir::LogPath(int rank) const { return absl::StrCat(path_, "/rank", rank, ".log"); }

absl::Status RunRanks(const std::vector<std::vector<std::string>>& argv, const RankDir& dir,
                      double timeout_s, std::string_view what) {
  std::vector<pid_t> pids;
  for (size_t r = 0; r < argv.size(); ++r) {
    absl::StatusOr<pid_t> pid = Spawn(argv[r], dir.LogPath(static_cast<int>(r)), what);
    if (!pid.ok()) {
      KillAll(pids);
      return pid.status();
    }
    pids.push_back(*pid);
  }
  const auto start = std::chrono::steady_clock::now();
  int remaining = static_cast<int>(pids.size());
  while (remaining > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got == 0) continue;
      pids[r] = 0;
      --remaining;
      if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        KillAll(pids);
        return absl::InternalError(absl::StrCat(std::string(what), ": rank ", r, " failed (status ",
                                                status, "): ",
                                                ReadTail(dir.LogPath(static_cast<int>(r)), 2000)));
      }
    }
    if (remaining > 0) {
      if (SecondsSince(start) > timeout_s) {
        KillAll(pids);
        return absl::DeadlineExceededError(
            absl::StrCat(std::string(what), ": ranks still running after ", timeout_s, " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return absl::OkStatus();
}

absl::Status PinToCore(int rank, std::string_view what) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<unsigned>(rank) % hw, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(
        absl::StrCat(std::string(what), " rank ", rank, ": sched_setaffinity failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindRankProgram(const std::string& configured, std::string_view program,
                                            const char* env_var, std::string_view what) {
  namespace fs = std::filesystem;
  std::vector<std::string> tried;
  auto usable = [&](const fs::path& p) {
    tried.push_back(p.string());
    return !p.empty() && access(p.c_str(), X_OK) == 0;
  };
  if (!configured.empty()) {
    if (usable(configured)) return fs::absolute(configured).string();
  } else {
    if (const char* env = std::getenv(env_var); env != nullptr && usable(env)) {
      return fs::absolute(env).string();
    }
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      for (fs::path p : {self.parent_path() / std::string(program),
                         self.parent_path().parent_path() / "bin" / std::string(program)}) {
        if (usable(p)) return p.string();
      }
    }
  }
  return absl::NotFoundError(absl::StrCat(std::string(what), ": rank program ", std::string(program),
                                          " not found or not executable; tried ",
                                          absl::StrJoin(tried, ", ")));
}

absl::StatusOr<RankTimes> ParseRankTimes(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat(std::string(what), ": no output ", path));
  RankTimes times;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    int64_t bytes = 0;
    if (!(ls >> name >> bytes)) {
      return absl::InternalError(
          absl::StrCat(std::string(what), ": bad line in ", path, ": ", line));
    }
    std::vector<double>& t = times[{name, bytes}];
    for (double x; ls >> x;) t.push_back(x);
  }
  return times;
}

absl::StatusOr<std::vector<CollectiveMeasurement>> CollectRankMeasurements(
    const RankDir& dir, int ranks, const std::vector<std::string>& names,
    const std::vector<int64_t>& sizes, int repetitions, std::string_view what,
    costmodel::ProfileStore* store, const std::string& device_kind, bool mean) {
  std::vector<RankTimes> per_rank;
  for (int r = 0; r < ranks; ++r) {
    ASSIGN_OR_RETURN(RankTimes t,
                     ParseRankTimes(absl::StrCat(dir.path(), "/rank", r, ".txt"), what));
    per_rank.push_back(std::move(t));
  }
  std::vector<CollectiveMeasurement> result;
  for (const std::string& name : names) {
    for (int64_t bytes : sizes) {
      std::vector<double> slowest(repetitions, 0.0);
      for (int r = 0; r < ranks; ++r) {
        auto it = per_rank[r].find({name, bytes});
        if (it == per_rank[r].end() || static_cast<int>(it->second.size()) != repetitions) {
          return absl::InternalError(absl::StrCat(std::string(what), ": rank ", r, " reported no ",
                                                  repetitions, " times for ", name, " ", bytes));
        }
        for (int i = 0; i < repetitions; ++i) slowest[i] = std::max(slowest[i], it->second[i]);
      }
      TimingSummary s = Summarize(slowest);
      double avg = 0;
      for (double x : slowest) avg += x / static_cast<double>(slowest.size());
      CollectiveMeasurement m{{name, ranks, bytes, mean ? avg : s.median_s}, s.iqr_s};
      if (store != nullptr) {
        RETURN_IF_ERROR(store->PutComm(device_kind, m.sample));
      }
      result.push_back(m);
    }
  }
  return result;
}

}  // namespace braid::worker
