// Overlap choice per tensor-parallel layer: for every
// AllGather->MatMul and MatMul->ReduceScatter pair of a per-device graph,
// the overlap model (costmodel/overlap_model.h) prices no overlap, the
// looped decomposition, its unrolled and bidirectional variants and, where
// the device's backend has the kernels, Flux's tile-fused GEMM at several
// communication tile sizes; the fastest is the pair's choice. No other
// system chooses between decomposition and fusion per layer; the plan
// records each choice with every candidate's time, so `plan explain` can
// show the gain of each.
//
// Pairs found (any phase, so backward pairs, the collectives' adjoints, are
// chosen too):
//  - AllGather along a non-last dim (rows) with the MatMuls that read the
//    gathered tensor as their left operand (not transposed): one pair, nout
//    summed over them (Q, K and V projections reading one gathered input
//    decompose together). Its other readers (the weight gradient's
//    transposed MatMul) read the gathered tensor, which every method fills.
//  - a MatMul whose only consumer is a ReduceScatter along a non-last dim.
// m is the product of the MatMul output's leading dims, nout its last dim
// (times the group on AllGather pairs), k from the op's flops.
//
// ApplyOverlaps writes each choice onto its collective op: comm_time_s
// becomes the chosen method's effective communication time (Flux eq. 1:
// time - non-split GEMM), which is what the simulator then charges before
// the MatMul, and the attributes overlap_method / overlap_tile_rows say what
// the ranks run. A method is chosen over the simpler current choice only
// when the model predicts it at least `min_gain` (relative) faster.
//
//   absl::StatusOr<std::vector<OverlapChoice>> c =
//       ChooseOverlaps(training, cluster, cm, {});
//   ApplyOverlaps(*c, training);
#ifndef BRAID_SEARCH_OVERLAP_PLAN_H_
#define BRAID_SEARCH_OVERLAP_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/overlap_model.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"

namespace braid::search {

struct OverlapSearchOptions {
  // Candidates: the decompositions; Flux's tile-fused kernels only where
  // the device backend has them (kernels/cuda: GPU clusters) and the caller
  // asks (see ParallelPlanOptions::overlap).
  bool decompositions = true;
  bool fused_tiles = false;
  std::vector<int64_t> tile_rows = {64, 128, 256};
  // Measured CPU share of a transfer (rho); < 0: the cluster's prior.
  double transfer_cpu_fraction = -1;
  // A method replaces the simpler current choice (none, then looped, then
  // unrolled, bidirectional, fused tiles) only when predicted at least
  // min_gain faster than it. 5%: the overlap model's error on cpu-local
  // pairs measured alone was several percent (BENCHMARKS.md), and on the
  // first transformer measurement a 2.7% predicted edge of unrolled over
  // looped came out 2.9 ms per step slower.
  double min_gain = 0.05;
};

struct OverlapCandidateTime {
  costmodel::OverlapMethod method = costmodel::OverlapMethod::kNone;
  int64_t tile_rows = 0;
  double time_s = 0;
};

struct OverlapChoice {
  costmodel::OverlapShape shape;
  std::string collective_op;
  std::vector<std::string> matmul_ops;
  graph::Phase phase = graph::Phase::kForward;
  costmodel::OverlapMethod method = costmodel::OverlapMethod::kNone;
  int steps = 0;          // ring steps of a decomposition (the group size)
  int64_t tile_rows = 0;  // fused tiles
  double gemm_s = 0;      // the non-split GEMM
  double none_s = 0;      // collective + GEMM
  double chosen_s = 0;
  double efficiency = 0;  // Flux eq. 2 of the choice (0 for none)
  costmodel::TimeSource gemm_source = costmodel::TimeSource::kPrior;
  costmodel::TimeSource comm_source = costmodel::TimeSource::kPrior;
  std::vector<OverlapCandidateTime> candidates;  // every method costed
  double gain_s() const { return none_s - chosen_s; }
};

// Every pair of `g` (see the top), in graph order, with its choice.
absl::StatusOr<std::vector<OverlapChoice>> ChooseOverlaps(const graph::Graph& g,
                                                          const costmodel::ClusterSpec& cluster,
                                                          costmodel::CostModel& cm,
                                                          const OverlapSearchOptions& options);

// Writes the choices onto their collective ops of `g` (see the top).
// NotFound when a choice names an op `g` does not have.
absl::Status ApplyOverlaps(const std::vector<OverlapChoice>& choices, graph::Graph& g);

// The "overlap" array of plan files and the stored parallel section, and
// back: what ApplyOverlaps needs (collective, method, tile, times, shape);
// InvalidArgument naming the entry for a malformed one.
nlohmann::json OverlapChoicesJson(const std::vector<OverlapChoice>& choices);
absl::StatusOr<std::vector<OverlapChoice>> OverlapChoicesFromJson(const nlohmann::json& j);

}  // namespace braid::search

#endif  // BRAID_SEARCH_OVERLAP_PLAN_H_
