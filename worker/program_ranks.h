// Training a per-device program (graph/program.h) on its world of braid-rank
// processes on this host (Gloo on loopback), and reading back what they
// report: `braid run --check` and the runtime's tests use it. LibTorch-free
// (it spawns the ranks, worker/rank_processes.h).
//
//   absl::StatusOr<ProgramRun> r = TrainProgramOnRanks(program, {.steps = 3});
//   r->losses;  r->checkpoint.tensors;
#ifndef BRAID_WORKER_PROGRAM_RANKS_H_
#define BRAID_WORKER_PROGRAM_RANKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/program.h"
#include "worker/runtime/checkpoint.h"

namespace braid::worker {

struct ProgramRunOptions {
  int steps = 1;
  bool dropout = false;
  // The rank program; empty: $BRAID_RANK, else braid-rank next to this
  // executable or in ../bin.
  std::string rank_binary;
  double timeout_s = 1800;      // the whole run
  std::string what = "braid-rank ranks";  // names the caller in errors
};

struct ProgramRun {
  std::vector<double> losses;        // per step, the global loss
  std::vector<double> step_s;        // per step, rank 0's wall time
  std::vector<int64_t> peak_bytes;   // per rank
  runtime::Checkpoint checkpoint;    // after the last step
};

absl::StatusOr<ProgramRun> TrainProgramOnRanks(const graph::Program& p,
                                               const ProgramRunOptions& options);

}  // namespace braid::worker

#endif  // BRAID_WORKER_PROGRAM_RANKS_H_
