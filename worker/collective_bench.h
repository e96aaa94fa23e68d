// The collective benchmark: measures Gloo collectives (LibTorch c10d
// ProcessGroupGloo) between real processes on loopback and writes the medians
// to the profile store as CommSample rows, which the communication model fits
// (costmodel/comm_model.h). Ranks are separate processes started with
// posix_spawn of the `braid-collective-rank` program (fork+exec, never a bare
// fork: a process that has loaded LibTorch already runs OpenBLAS and OpenMP
// threads, and a forked child of a threaded process may deadlock in them).
// They rendezvous through a c10d::FileStore in a fresh temporary directory.
//
//   CollectiveBenchOptions o;
//   o.ranks = 2;
//   o.sizes = {4 << 10, 1 << 20};
//   absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunCollectiveBench(o, store.get());
//   // m->at(0).sample: {"AllReduce", 2, 4096, 3.1e-5}; also in the store under o.device_kind
#ifndef BRAID_WORKER_COLLECTIVE_BENCH_H_
#define BRAID_WORKER_COLLECTIVE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"

namespace braid::worker {

struct CollectiveBenchOptions {
  int ranks = 2;
  // AllReduce, AllGather, Broadcast and AllToAll are Gloo's own;
  // ReduceScatter (which Gloo in LibTorch 1.13 lacks) is braid's
  // GlooReduceScatter, an all-to-all and a local sum, as the parallel ranks
  // run it.
  std::vector<costmodel::Collective> collectives = {
      costmodel::Collective::kAllReduce, costmodel::Collective::kAllGather,
      costmodel::Collective::kBroadcast};
  // Buffer sizes in bytes, as costmodel/comm_model.h counts them (the whole
  // tensor for AllReduce/Broadcast, the gathered output for AllGather, the
  // per-rank send buffer for AllToAll); multiples of 4 * ranks (f32 elements).
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  int warmup = 2;
  int repetitions = 10;
  // Profile-store key: costmodel::CommProfileKey(spec) of the cluster the
  // ranks run on; the default, "cpu-local:" + costmodel::LocalCpuDeviceKind()
  // ("cpu-local:cpu-1t:<isa>:<CPU model>"), is the cpu-local preset's.
  std::string device_kind = "cpu-local:" + costmodel::LocalCpuDeviceKind();
  // The rank program; empty: $BRAID_COLLECTIVE_RANK, else next to this
  // executable or in ../bin (the build tree's layout).
  std::string rank_binary;
  double timeout_s = 300;  // whole run; ranks still running then are killed
  // Bind rank r to core r mod cores (PinToCore) and wait for each collective
  // by polling (WaitPolling, worker/gloo_group.h), as bound training ranks
  // (braid-parallel-rank --pin-cores) wait for theirs; off, ranks float and
  // block in Work::wait(), as the data-parallel executor's ranks.
  bool pin_cores = false;
  bool poll = true;  // with pin_cores: poll (false: block, as unbound ranks)
  // Store the mean over the repetitions (of the slowest rank's time) instead
  // of the median: for a prediction that sums a step's collectives, as it
  // sums its kernels' means. On cpu-local a 512 KiB all-reduce has a median
  // of 0.3 ms and a tail of multi-millisecond calls (a rank's Gloo thread
  // losing a scheduler tick) that training steps pay too.
  bool store_mean = false;
};

struct CollectiveMeasurement {
  costmodel::CommSample sample;  // median (store_mean: mean) over repetitions of the slowest rank's time
  double spread_s = 0;           // interquartile range of the same
};

// Spawns the ranks, waits for them, and writes one CommSample per
// (collective, size) to `store` when it is not null. Errors: InvalidArgument
// for bad options, NotFound when the rank program is missing,
// DeadlineExceeded on timeout, Internal (with the rank's log) when a rank fails.
absl::StatusOr<std::vector<CollectiveMeasurement>> RunCollectiveBench(
    const CollectiveBenchOptions& options, costmodel::ProfileStore* store);

// One rank's part, run by braid-collective-rank: joins the group through the
// FileStore at `store_path`, runs every collective over every size (a barrier
// before each timed repetition) and writes lines
// "<CollectiveName> <bytes> <t_1> ... <t_n>" (seconds) to `output_path`.
struct RankConfig {
  std::string store_path;
  std::string output_path;
  int rank = 0;
  int world = 0;
  std::vector<costmodel::Collective> collectives;
  std::vector<int64_t> sizes;
  int warmup = 2;
  int repetitions = 10;
  bool pin_cores = false;  // CollectiveBenchOptions::pin_cores
  bool poll = false;       // poll for the collectives and barriers (with pin_cores)
};
absl::Status RunCollectiveRank(const RankConfig& config);

// Absolute path of the rank program as RunCollectiveBench resolves it.
absl::StatusOr<std::string> FindRankBinary(const std::string& configured);

}  // namespace braid::worker

#endif  // BRAID_WORKER_COLLECTIVE_BENCH_H_
