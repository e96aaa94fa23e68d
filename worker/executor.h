// The timing executor: runs real data-parallel training iterations on this
// machine to check the simulator. Each of N rank processes (the
// `braid-train-rank` program, started with posix_spawn like the collective
// benchmark; one LibTorch thread each; c10d ProcessGroupGloo on 127.0.0.1 with
// one Gloo thread) parses the training graph, makes one CpuKernel
// (worker/cpu_kernels.h) per compute op ONCE, and per iteration runs the ops
// in the given order, reducing gradients as a bucket assignment says:
//
//  - one flat buffer per bucket (the sum of its gradients' elements);
//  - once the last gradient of a bucket is produced (or, for an
//    `after_backward` strategy, once the last backward op has run), its
//    gradients are copied into the buffer (the copy is timed, as DDP's is) and
//    an asynchronous allreduce is started on it; buckets are started strictly
//    in bucket order (a ready bucket waits for the earlier ones), as DDP does
//    and as the simulator's comm_order assumes;
//  - before the first update op that reads a reduced gradient of a bucket,
//    the executor wait()s on that bucket's work.
//
// What this measures and what it does not: every op runs its real LibTorch
// kernel on tensors of its real shapes, and each floating-point result is
// handed to the ops that read it (worker::TensorSlots swaps the consumer's
// input storage to the producer's fresh output, no copy), so kernels touch
// memory as a training step does. The values start random (no dataset), and
// the update ops read the gradients as produced, not the reduced buffers.
// A strategy's fused groups run as one kernel each through braid's CPU fused
// executor (worker/fused_kernels.h: oneDNN primitives with post-ops, the
// elementwise tile interpreter), at the position of their first member in
// the order; without groups every op runs separately. Collective op types in
// the graph (AllReduce) are replaced by the buckets.
//
// Strategies are interleaved iteration by iteration (strategy 0, 1, ...,
// then the next iteration) so machine noise hits all of them equally; each
// iteration starts with a barrier and its time is the slowest rank's.
//
//   std::vector<ExecStrategy> s = {{.name = "ddp", .buckets = {{w2_grad}, {w1_grad}}}};
//   TrainBenchOptions o;
//   o.ranks = 2;
//   absl::StatusOr<std::vector<StrategyMeasurement>> m = RunTrainingBench(training, s, o);
//   // m->at(0).median_s: median iteration time of "ddp"
#ifndef BRAID_WORKER_EXECUTOR_H_
#define BRAID_WORKER_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::worker {

// How one iteration reduces gradients and orders its compute ops.
struct ExecStrategy {
  std::string name;
  // Fused kernels (a plan's fusion groups): `ops` are the members and the
  // duplicated copies, `duplicated` the copies (their op also runs at its own
  // place). Each must be a group the CPU fusion backend implements
  // (costmodel::CpuFusionBackend).
  struct FusedGroup {
    std::vector<graph::OpId> ops;
    std::vector<graph::OpId> duplicated;
  };
  std::vector<FusedGroup> groups;
  // Gradient tensors (role kGradient) per bucket, in buffer order; buckets in
  // issue order. Every gradient of the graph in exactly one bucket.
  std::vector<std::vector<graph::TensorId>> buckets;
  // Start the buckets only after the last backward op has run (the naive
  // "allreduce after backward" baseline); otherwise each as soon as it is
  // complete.
  bool after_backward = false;
  // Every non-collective op once, in an order consistent with the graph's
  // dependencies (a reduced gradient counts as produced by its gradient's
  // producer). Empty: the graph's TopologicalOrder without collectives.
  std::vector<graph::OpId> order;
  // Diagnostics: run the compute ops only (no copies, no allreduce, no
  // waits), to compare the compute alone with the sum of profiled op times.
  bool compute_only = false;
  // With compute_only: time every op as it runs in the iteration (the
  // in-graph profile, worker/graph_profiler.h). Adds two clock reads per op.
  bool time_ops = false;
  // Non-empty: a collective probe instead of a training iteration: no ops
  // run; each iteration all-reduces one f32 buffer of each size (bytes, a
  // multiple of 4), after a barrier, and times it. Interleaved with the other
  // strategies it measures the collectives in the same minutes as they run.
  std::vector<int64_t> probe_allreduce_bytes;
};

struct TrainBenchOptions {
  int ranks = 2;
  int warmup = 3;       // untimed iterations per strategy
  int iterations = 10;  // timed iterations per strategy
  // Checks in the first warm-up iteration of every strategy that each bucket's
  // allreduce produced world * the local buffer (every rank builds identical
  // kernel inputs from the same seed). Costs a clone per bucket.
  bool verify_allreduce = true;
  // The rank program; empty: $BRAID_TRAIN_RANK, else braid-train-rank next to
  // this executable or in ../bin (the build tree's layout).
  std::string rank_binary;
  double timeout_s = 600;  // whole run; ranks still running then are killed
};

// Bookkeeping of one strategy over all timed iterations of all ranks (sums),
// so a caller can check that each gradient was reduced exactly once per
// iteration and that updates never ran ahead of their bucket's wait.
struct ExecBookkeeping {
  int64_t allreduces_started = 0;  // buckets started
  int64_t gradients_reduced = 0;   // gradient copies into started buckets
  // Gradients that were not reduced exactly once in an iteration.
  int64_t gradients_not_once = 0;
  int64_t waits = 0;                // Work::wait() calls
  int64_t updates_before_wait = 0;  // update ops that read an unwaited bucket
  int64_t bytes_copied = 0;         // into bucket buffers
  int64_t buckets_verified = 0;     // allreduce results checked (warm-up)
  int64_t verify_failures = 0;      // of those, wrong results
  // Seconds the compute thread spent copying gradients into bucket buffers,
  // and blocked in Work::wait(), summed like the counts (divide by
  // iterations * ranks for a per-iteration figure).
  double pack_s = 0;
  double wait_s = 0;
};

struct StrategyMeasurement {
  std::string name;
  std::vector<double> iteration_s;  // per timed iteration, max over ranks
  double median_s = 0;
  double iqr_s = 0;
  // CPU time of the compute thread per timed iteration (max over ranks) and
  // its median: the iteration without the time the thread was not running
  // (preempted by other processes, or blocked in a wait on a collective). On a
  // loaded machine the wall time includes the share other processes took;
  // op profiles (medians of short runs) mostly do not.
  std::vector<double> cpu_s;
  double median_cpu_s = 0;
  ExecBookkeeping bookkeeping;
  // time_ops: per op id, its seconds in every timed iteration of every rank,
  // rank-major: op_s[op][rank * iterations + i] (empty for ops that did not run).
  std::vector<std::vector<double>> op_s;
  // time_ops, graphs with backward ops: seconds to pack every gradient into
  // one buffer after the last backward op (pack_bytes), per timed iteration
  // and rank, rank-major like op_s.
  std::vector<double> pack_s;
  int64_t pack_bytes = 0;
  // Probes: per size, its seconds in every timed iteration of every rank.
  std::map<int64_t, std::vector<double>> probe_s;
};

// Spawns the ranks, waits for them, and returns one measurement per strategy
// in the order given. InvalidArgument for a bad strategy (a gradient in no or
// two buckets, a non-gradient in a bucket, an order that is not a valid
// permutation of the compute ops) or options; NotFound when the rank program
// is missing; DeadlineExceeded on timeout; Internal with the rank's log when a
// rank fails (Unimplemented ops are reported there, naming the op type).
absl::StatusOr<std::vector<StrategyMeasurement>> RunTrainingBench(
    const graph::Graph& training, const std::vector<ExecStrategy>& strategies,
    const TrainBenchOptions& options);

// An order for ExecStrategy::order when the strategy has fused groups but no
// schedule of its own (the activator; `braid run` takes the simulator's):
// every compute op once, consistent with the dependencies, each group's
// members back to back so that the group, run at its first member, finds its
// inputs produced. Among ready ops the graph's topological order decides, so
// without groups this is the default order. InvalidArgument when the groups
// form a cycle (no order can run them).
absl::StatusOr<std::vector<graph::OpId>> ExecOrderFor(
    const graph::Graph& g, const std::vector<ExecStrategy::FusedGroup>& groups);

// Checks one strategy against the graph (the checks RunTrainingBench makes).
absl::Status ValidateStrategy(const graph::Graph& training, const ExecStrategy& strategy);

// One rank's part, run by braid-train-rank: reads the graph (braid text
// format) and the strategies (JSON written by RunTrainingBench), joins the
// group through the c10d FileStore at `store_path`, runs warm-up and timed
// iterations and writes one line per timed iteration and strategy to
// `output_path`.
struct TrainRankConfig {
  std::string store_path;
  std::string graph_path;
  std::string strategies_path;
  std::string output_path;
  int rank = 0;
  int world = 0;
};
absl::Status RunTrainRank(const TrainRankConfig& config);

}  // namespace braid::worker

#endif  // BRAID_WORKER_EXECUTOR_H_
