// Training a per-device program (graph/program.h) on its world of braid-rank
// processes on this host (Gloo on loopback), and reading back what they
// report: `braid run --check` and the runtime's tests use it. LibTorch-free
// (it spawns the ranks, worker/rank_processes.h).
//
//   absl::StatusOr<ProgramRun> r = TrainProgramOnRanks(program, {.steps = 3});
//   r->losses;  r->checkpoint.tensors;
#ifndef BRAID_WORKER_PROGRAM_RANKS_H_
#define BRAID_WORKER_PROGRAM_RANKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/program.h"
#include "worker/runtime/checkpoint.h"

namespace braid::worker {

struct ProgramRunOptions {
  int steps = 1;
  bool dropout = true;
  bool float64 = false;  // braid-rank --float64
  // Time mode (braid-rank --clock-ops): every op clocked in the steps after
  // the first `warmup`.
  bool clock_ops = false;
  int warmup = 1;
  // braid-rank --pin-cores: rank r bound to core r mod cores.
  bool pin_cores = false;
  // The rank program; empty: $BRAID_RANK, else braid-rank next to this
  // executable or in ../bin.
  std::string rank_binary;
  double timeout_s = 1800;      // the whole run
  std::string what = "braid-rank ranks";  // names the caller in errors
};

// One op's clock over the clocked steps of one rank.
struct ProgramOpClock {
  std::string op, type;
  double median_s = 0, min_s = 0;
};

struct ProgramRun {
  std::vector<double> losses;        // per step, the global loss
  std::vector<double> step_s;        // per step, rank 0's wall time
  std::vector<int> collectives;      // per step, rank 0's collectives (a bucket once)
  std::vector<int> groups_fused;     // per step, rank 0's fusion groups run fused
  std::vector<int> groups_unfused;   // ... and run op by op
  std::map<std::string, std::string> unfused_why;  // rank 0: group (first op) -> why
  std::vector<int64_t> peak_bytes;   // per rank
  runtime::Checkpoint checkpoint;    // after the last step
  // With clock_ops: per rank, every op in program order.
  std::vector<std::vector<ProgramOpClock>> op_clocks;
};

absl::StatusOr<ProgramRun> TrainProgramOnRanks(const graph::Program& p,
                                               const ProgramRunOptions& options);

}  // namespace braid::worker

#endif  // BRAID_WORKER_PROGRAM_RANKS_H_
