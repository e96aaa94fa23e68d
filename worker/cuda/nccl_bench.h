// The NCCL collective benchmark: the GPU counterpart of the Gloo benchmark in
// worker/collective_bench.h. One `braid-nccl-rank` process per GPU (spawned
// with posix_spawn through worker/rank_processes.h); rank 0 writes the
// ncclUniqueId to a file in a fresh temporary directory, the others wait for
// it, all join one communicator and time AllReduce, AllGather, ReduceScatter,
// Broadcast (and AllToAll) over each size with CUDA events. The medians over
// repetitions of the slowest rank's time go to the profile store as
// CommSample rows, which the communication model fits (costmodel/comm_model.h,
// whose byte conventions the sizes follow).
//
//   NcclBenchOptions o;
//   o.ranks = 8;                                   // one per GPU on this node
//   o.sizes = {1 << 20, 64 << 20};
//   o.device_kind = costmodel::CommProfileKey(spec);   // "dgx-h100:cuda:NVIDIA H100 80GB HBM3"
//   absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunNcclBench(o, store.get());
//
// With fewer GPUs than ranks (or none) it fails with FailedPrecondition
// naming how many devices there are, before spawning anything.
#ifndef BRAID_WORKER_CUDA_NCCL_BENCH_H_
#define BRAID_WORKER_CUDA_NCCL_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"
#include "worker/collective_bench.h"

namespace braid::worker {

struct NcclBenchOptions {
  int ranks = 2;  // >= 2: a group of one costs 0 in the comm model
  std::vector<costmodel::Collective> collectives = {
      costmodel::Collective::kAllReduce, costmodel::Collective::kAllGather,
      costmodel::Collective::kReduceScatter, costmodel::Collective::kBroadcast};
  // Bytes as costmodel/comm_model.h counts them; multiples of 4 * ranks (f32).
  std::vector<int64_t> sizes = {64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
  int warmup = 5;
  int repetitions = 20;
  int first_device = 0;  // rank r runs on device first_device + r
  // Profile-store key, costmodel::CommProfileKey(spec) of the cluster the
  // ranks run on; empty: "gpu-local:" + the device kind of first_device.
  std::string device_kind;
  // The rank program; empty: $BRAID_NCCL_RANK, else next to this executable
  // or in ../bin (the build tree's layout).
  std::string rank_binary;
  double timeout_s = 300;  // whole run; ranks still running then are killed
};

// Spawns the ranks, waits for them and writes one CommSample per
// (collective, size) to `store` when not null. Errors: InvalidArgument for
// bad options, FailedPrecondition with too few devices, NotFound when the
// rank program is missing, DeadlineExceeded on timeout, Internal (with the
// rank's log) when a rank fails.
absl::StatusOr<std::vector<CollectiveMeasurement>> RunNcclBench(const NcclBenchOptions& options,
                                                                costmodel::ProfileStore* store);

// One rank's part, run by braid-nccl-rank: rank 0 creates the ncclUniqueId
// and writes it to `id_path` (atomically, by rename); the others poll for
// it. Writes lines "<CollectiveName> <bytes> <t_1> ... <t_n>" (seconds) to
// `output_path`.
struct NcclRankConfig {
  std::string id_path;
  std::string output_path;
  int rank = 0;
  int world = 0;
  int device = 0;
  std::vector<costmodel::Collective> collectives;
  std::vector<int64_t> sizes;
  int warmup = 5;
  int repetitions = 20;
  double rendezvous_timeout_s = 120;
};
absl::Status RunNcclRank(const NcclRankConfig& config);

// InvalidArgument naming what is wrong (shared by the launcher and the ranks).
// The benchmark needs two ranks (a group of one costs 0 in the comm model);
// a rank program alone may run a one-rank communicator (a smoke test).
absl::Status ValidateNcclBench(int ranks, const std::vector<costmodel::Collective>& collectives,
                               const std::vector<int64_t>& sizes, int warmup, int repetitions,
                               int min_ranks = 2);

}  // namespace braid::worker

#endif  // BRAID_WORKER_CUDA_NCCL_BENCH_H_
