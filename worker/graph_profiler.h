// The in-graph CPU profiler: times every op of a training graph where it runs
// in a real training iteration, instead of alone. It starts the timing
// executor's ranks (worker/executor.h: N processes, one LibTorch thread each,
// every op's result feeding its consumers) in compute-only mode with a clock
// around each op, and stores per (op type, signature) the median over all its
// instances and iterations (the mean: see costmodel::ProfileSample), taking
// in each iteration the times of the rank that was slowest in it (the one
// the others wait for) and only the iterations whose compute lies in the
// interquartile range, under device kind CpuDeviceKind() ("cpu-1t:<isa>:<CPU
// model>").
//
// Why: an op timed alone reads inputs that its own previous repetition left
// in the caches; in training it reads what its producer just wrote, shares
// the memory bus with the other ranks and follows other kernels. On the
// bandwidth-bound ops of small models the difference is tens of percent
// (BENCHMARKS.md, simulator accuracy), so the simulator predicts real
// iterations only from profiles taken this way. The isolated CpuProfiler stays
// for single ops (the service's profiling tasks, fused-op candidates).
//
//   GraphProfileOptions o;
//   o.ranks = 2;
//   absl::StatusOr<GraphProfileReport> r = ProfileGraphInGraph(training, *store, o);
//   // r->keys_stored distinct keys written; r->iteration_s: compute-only median
#ifndef BRAID_WORKER_GRAPH_PROFILER_H_
#define BRAID_WORKER_GRAPH_PROFILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "worker/executor.h"

namespace braid::worker {

struct GraphProfileOptions {
  int ranks = 2;        // processes running the graph at once, as training will
  int warmup = 2;       // untimed iterations
  int iterations = 8;   // timed iterations
  // Compute ops in the order to run them (ExecStrategy::order): the order
  // training will use, since it changes what is in the caches when each op
  // runs. Empty: the graph's topological order.
  std::vector<graph::OpId> order;
  std::string rank_binary;  // empty: braid-train-rank found as the executor finds it
  double timeout_s = 900;
};

struct GraphProfileReport {
  int ops_timed = 0;     // compute ops timed in the graph
  int keys_stored = 0;   // distinct (type, signature) keys written to the store
  int communication = 0;  // collective ops (the collective benchmark's job)
  int64_t samples = 0;   // op timings behind the stored means (slowest rank, typical iterations)
  // Compute-only iteration (median over timed iterations, slowest rank), and
  // the sum of every op's stored median: the two agree when per-op clocks
  // miss nothing of the iteration.
  double iteration_s = 0;
  double sum_of_medians_s = 0;
  double sum_of_means_s = 0;  // the same with each op's mean
  double untimed_iteration_s = 0;  // iteration_s without the per-op clocks
  // Packing every gradient into one bucket buffer after the backward pass
  // (stored per byte as costmodel::kBucketPackOp); 0 without backward ops.
  double pack_s = 0;
  int64_t pack_bytes = 0;
};

// InvalidArgument for bad options or a graph the executor cannot run (not
// data-parallel); Unimplemented/Internal from the ranks when an op has no
// LibTorch mapping (callers fall back to the isolated profiler); errors from
// the store.
absl::StatusOr<GraphProfileReport> ProfileGraphInGraph(const graph::Graph& training,
                                                       costmodel::ProfileStore& store,
                                                       const GraphProfileOptions& options = {});

// The pieces, for a caller that runs the profile among its own strategies
// (`braid run --profile`: interleaved iteration by iteration with the runs it
// predicts, so machine drift between separate runs does not enter):
// the strategy to add to RunTrainingBench, and the storing of its measurement
// (`ranks` and `iterations` as run).
// With `groups`, each fused group runs as one kernel of the CPU fused
// executor and is timed as one: StoreGraphProfile then stores it under
// costmodel::kFusedOp and its FusedSignature (measured fused-op costs).
ExecStrategy GraphProfileStrategy(std::vector<graph::OpId> order,
                                  std::vector<ExecStrategy::FusedGroup> groups = {});
absl::StatusOr<GraphProfileReport> StoreGraphProfile(const graph::Graph& training,
                                                     const StrategyMeasurement& run, int ranks,
                                                     int iterations,
                                                     costmodel::ProfileStore& store,
                                                     const ExecStrategy* strategy = nullptr);

}  // namespace braid::worker

#endif  // BRAID_WORKER_GRAPH_PROFILER_H_
