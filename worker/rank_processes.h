// Runs N rank programs as real processes (the collective benchmark's and the
// timing executor's ranks) and waits for them. Ranks are started with
// posix_spawn, never a bare fork(): a process that has loaded LibTorch
// already runs OpenBLAS and OpenMP threads, and a forked child of a threaded
// process may deadlock in them.
//
//   absl::StatusOr<RankDir> dir = RankDir::Create("braid-coll");
//   std::vector<std::vector<std::string>> argv = ...;  // one argument list per rank
//   absl::Status s = RunRanks(argv, *dir, /*timeout_s=*/300, "collective bench");
//   // each rank's stdout and stderr are in dir->LogPath(r)
#ifndef BRAID_WORKER_RANK_PROCESSES_H_
#define BRAID_WORKER_RANK_PROCESSES_H_

#include <map>
#include <utility>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"

namespace braid::worker {

struct CollectiveMeasurement;  // worker/collective_bench.h

// A fresh temporary directory for the ranks' rendezvous store, inputs and
// outputs, removed with everything in it on destruction.
class RankDir {
 public:
  // Under $TMPDIR (or /tmp), named `prefix`-XXXXXX.
  static absl::StatusOr<RankDir> Create(std::string_view prefix);
  RankDir(RankDir&& o) noexcept;
  RankDir(const RankDir&) = delete;
  RankDir& operator=(const RankDir&) = delete;
  ~RankDir();

  const std::string& path() const { return path_; }
  std::string LogPath(int rank) const;  // <dir>/rank<r>.log

 private:
  explicit RankDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

// Spawns one process per argument list (argv[0] is the program's path) with
// stdout and stderr in dir.LogPath(r), and waits for all of them. A rank that
// fails makes the others wait forever in a collective, so they are killed:
// Internal with the failed rank's log tail; DeadlineExceeded after timeout_s.
// `what` names the caller in errors.
absl::Status RunRanks(const std::vector<std::vector<std::string>>& argv, const RankDir& dir,
                      double timeout_s, std::string_view what);

// One collective-benchmark rank's output: lines "<Collective> <bytes> <t_1>
// ... <t_n>" (seconds) -> per (collective, bytes) the times. Internal naming
// `what` and the line when a line does not parse.
using RankTimes = std::map<std::pair<std::string, int64_t>, std::vector<double>>;
absl::StatusOr<RankTimes> ParseRankTimes(const std::string& path, std::string_view what);

// Reads every rank's output (dir/rank<r>.txt), and per (collective name,
// size) summarizes the slowest rank's time per repetition (a collective ends
// when its slowest rank does) into a CollectiveMeasurement, writing it to
// `store` under `device_kind` when the store is not null: the median over
// the repetitions, or with `mean` their mean. Internal naming `what` when a
// rank reported fewer times.
absl::StatusOr<std::vector<CollectiveMeasurement>> CollectRankMeasurements(
    const RankDir& dir, int ranks, const std::vector<std::string>& names,
    const std::vector<int64_t>& sizes, int repetitions, std::string_view what,
    costmodel::ProfileStore* store, const std::string& device_kind, bool mean = false);

// Binds this process to core rank mod cores (threads it starts later, such
// as Gloo's, inherit the binding), as a launcher binding ranks to cores
// does: on a 2-core host the scheduler otherwise sometimes runs both ranks'
// compute on one core and step times turn bimodal. Internal naming `what`
// and the rank when the kernel refuses.
absl::Status PinToCore(int rank, std::string_view what);

// Absolute path of a rank program: `configured` when not empty; otherwise
// $`env_var`, then `program` next to this executable or in ../bin (the build
// tree's layout). NotFound listing every path tried; `what` names the caller.
absl::StatusOr<std::string> FindRankProgram(const std::string& configured, std::string_view program,
                                            const char* env_var, std::string_view what);

}  // namespace braid::worker

#endif  // BRAID_WORKER_RANK_PROCESSES_H_
