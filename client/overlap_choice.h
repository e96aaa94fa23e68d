// braid's choice of an overlap method per pair of the overlapped
// tensor-parallel training (worker/overlap_train.h), from braid's search
// (search/overlap_plan.h) fed with times MEASURED on the ranks:
//
//  1. OverlapTrainingGraph: the executor's per-device training graph as a
//     graph::Graph: forward and backward with explicit AllGather /
//     ReduceScatter ops (group_size = ranks, named as the pairs of
//     OverlapPairs), MatMuls with their flops (graph::AnnotateCosts).
//     The weight gradients read the gathered rows the decomposed forward
//     kept (worker/collective_matmul_ops.h: `gathered`): in the graph an op
//     "KeptGather" (no group_size, no time: not a collective) stands for that
//     buffer, so the gathered tensor's only consumer is the pair's MatMul,
//     as search::ChooseOverlaps' FindPairs requires.
//  2. MeasureOverlapPrimitives: RunCollectiveMatMul with spec.parts on every
//     distinct pair shape (every method too, so the pair's measured times can
//     be printed beside the predictions), pinned ranks: GEMMs at the whole,
//     chunk and half-chunk shapes, the accumulator additions, ring-step
//     transfers of chunks and halves (plus a sweep of AllGather chunks of
//     widths d/4, d/2, 2d, 4d, so the SendRecv line is fitted on several
//     sizes), the undecomposed collective and the transfer's CPU share rho.
//     The line is fitted through each transfer size's median
//     (FailedPrecondition when the times do not grow with the size: too
//     noisy a host).
//  3. MeasuredOverlapCostModel: a costmodel::CostModel answering GEMM and Add
//     times from those measurements (a shape it has no measurement for is
//     recorded and ChooseTrainingOverlaps fails naming it), SendRecv from the
//     line costmodel::FitLinear fits over the transfer samples; the graph's
//     collectives carry their measured time (comm_time_s), which
//     ChooseOverlaps uses for the undecomposed collective.
//  4. ChooseTrainingOverlaps: search::ChooseOverlaps on the graph with rho
//     measured (OverlapSearchOptions.transfer_cpu_fraction), and the
//     per-pair method list the ranks run.
//
//   absl::StatusOr<OverlapMeasurements> m = MeasureOverlapPrimitives(spec, 7, {});
//   absl::StatusOr<TrainingOverlapChoice> c = ChooseTrainingOverlaps(spec, *m);
//   spec.variants = {c->methods};  // RunOverlapTraining(spec, {})
#ifndef BRAID_CLIENT_OVERLAP_CHOICE_H_
#define BRAID_CLIENT_OVERLAP_CHOICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/comm_model.h"
#include "graph/graph.h"
#include "search/overlap_plan.h"
#include "worker/collective_matmul.h"
#include "worker/overlap_train.h"

namespace braid::client {

// The overlapped trainer's types (worker/overlap_train.h, collective_matmul.h).
using worker::CollectiveMatMulOptions;
using worker::CollectivePattern;
using worker::DecomposeMethod;
using worker::OverlapModel;
using worker::OverlapPair;
using worker::OverlapPairs;
using worker::OverlapTrainSpec;

// The per-device training graph of `spec` on one of spec.ranks ranks.
absl::StatusOr<graph::Graph> OverlapTrainingGraph(const OverlapTrainSpec& spec);

struct PairShapeKey {
  CollectivePattern pattern;
  int64_t m, k, nout;
  auto operator<=>(const PairShapeKey&) const = default;
};

struct OverlapMeasurements {
  int ranks = 2;
  // Medians: GEMM (rows, k, nout) and Add (rows, cols) seconds.
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> gemm_s;
  std::map<std::pair<int64_t, int64_t>, double> add_s;
  // Per pair shape: the undecomposed collective's median and each method's
  // measured median (the pair alone, slowest rank).
  std::map<PairShapeKey, double> collective_s;
  std::map<PairShapeKey, std::map<DecomposeMethod, double>> method_s;
  // (bytes, seconds) of every ring-step transfer sample, and the line
  // fitted through each size's median.
  std::vector<std::pair<double, double>> transfer_samples;
  costmodel::LinearCost transfer_line;
  double transfer_cpu_fraction = 0;  // rho: median over all samples
};

// See the file comment. `repetitions` per shape (after one warm-up).
absl::StatusOr<OverlapMeasurements> MeasureOverlapPrimitives(
    const OverlapTrainSpec& spec, int repetitions, const CollectiveMatMulOptions& options);

struct TrainingOverlapChoice {
  std::vector<search::OverlapChoice> choices;  // per pair, OverlapPairs' order
  std::vector<DecomposeMethod> methods;        // per pair, what the ranks run
};

// ChooseOverlaps on OverlapTrainingGraph(spec) with the measured cost model
// (cluster: cpu-local restricted to spec.ranks). Internal naming the pair
// when the search did not find one of OverlapPairs, or naming the GEMM / Add
// shape the measurements lack.
absl::StatusOr<TrainingOverlapChoice> ChooseTrainingOverlaps(const OverlapTrainSpec& spec,
                                                             const OverlapMeasurements& m);

// kUnrolled -> kLoopedUnrolled, ...; InvalidArgument for fused tiles (no CPU kernels).
absl::StatusOr<DecomposeMethod> DecomposeMethodOf(costmodel::OverlapMethod m);

}  // namespace braid::client

#endif  // BRAID_CLIENT_OVERLAP_CHOICE_H_
