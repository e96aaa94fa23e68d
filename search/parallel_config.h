// Per-operator parallel configurations and their costs: the leaf costs of
// Unity's machine-mapping DP (papers/unity-joint-algebraic-parallelization.txt
// §2.1, §3). A ParallelConfig says how one forward op of a braid graph is
// split over `degree` devices; from it follow the ParallelTensorShape each
// input must have and the one the output gets, the op's per-device compute
// time, the weight-gradient synchronization training needs, and, between two
// configs, the parallel ops (graph/parallel_ops.h) that turn one layout into
// the other, costed by costmodel/parallel_comm.h.
//
// MatMul (numpy, batched) and Gemm: the split space is the output dims plus
// the contraction dim. Unity's parallelism types are its points:
//   data        output dim 0 (batch rows) split; weights replicated
//   column      last output dim (weight columns) split; x replicated
//   row         contraction dim split (reduction_degree): x split on its last
//               dim, W on dim 0; the output holds partial sums (replica degree
//               = reduction degree) that need a Reduce
//   head        a batch dim other than 0 of a batched MatMul (attention heads)
//   spatial     the row dim (M) of a >= 3-D output (sequence)
// Elementwise ops split their output dims; every input follows the output.
// Softmax over the last dim and LayerNorm split like elementwise ops except
// on the last dim. Transpose: the input dim perm[j] takes output dim j's
// degree. Reshape: dims group into runs of equal element count; a run's
// degree sits on its first output dim and goes to its first input dim
// (H/8 <-> heads/8 x dh).
//
// CNN and recommendation ops (FlexFlow's per-operator parallelism, Unity §3:
// every op splits its output's dims, plus a reduction dim where one exists):
//   Conv (NCHW)  data (N); channel: C_out split, W split on dim 0, X
//                replicated (FlexFlow Conv2D's output-channel split); reduction:
//                C_in split (X on C, W on dim 1), the output holds partial
//                sums like a row-parallel MatMul; spatial: H split, X split on
//                H. ConfigLayouts describes a spatial split of any conv, but
//                CandidateConfigs offers it only where a piece needs no halo
//                rows from its neighbours (a 1-row, unstrided, unpadded kernel
//                along H): nothing moves halos (InexactConfig). A grouped conv
//                (ResNeXt) splits C_out only by a degree dividing its groups,
//                taking the groups' input channels along (X split on C, the
//                shard runs group/degree groups); it has no reduction split.
//   MaxPool, AveragePool, GlobalAveragePool: N and C (windows span H, W).
//   BatchNormalization: N and C; scale/bias/running stats split with C.
//                Under a data split each shard normalizes with its own batch
//                statistics, as PyTorch DDP does without SyncBN. In training
//                mode its outputs after Y (running or saved mean and
//                variance, [C]) are split with C and copied under an N split
//                (each shard's own statistics, as DDP keeps them).
//   Concat       follows the output's split; the concat axis is never split.
//   Flatten      like Reshape.
//   ReduceSum/ReduceMean  split the kept dims (DLRM's bag pooling).
//   Gather       out = data[:axis] + indices + data[axis+1:]. An embedding
//                lookup (data a parameter table): data = batch split, table
//                replicated; row = the table's rows split (reduction_degree),
//                indices replicated, output partial sums; column = the
//                embedding dim split (output last dim, table dim 1).
//                ConfigLayouts describes the row split, but CandidateConfigs
//                leaves it out: each device would have to mask the ids
//                outside its rows, which no per-device program does.
//   Split        every output follows the input's layout. Off the split
//                axis: any dim the outputs share. On the axis: a *segmented*
//                layout. A Split input split on the split axis by d means
//                each device holds the d-th share of every segment (not a
//                contiguous block of the input): the fused QKV of GPT-2 /
//                nanoGPT, a column-parallel c_attn whose output is split into
//                q, k, v, each device holding its heads of each. Allowed when
//                d divides every output's size along the axis; every output
//                is split on the axis by d, and the shard's `split` sizes are
//                divided by d. The lowering holds the producer's weight and
//                bias in segments to match (graph::LoadSpec::segments) where
//                the Split's input comes straight from a MatMul/Gemm and
//                bias Adds; elsewhere it gathers the input. The search
//                costs it as a column split.
//   Several outputs: Split (above); elementwise ops (training-mode Dropout's
//                y and mask: every output follows the input); training-mode
//                BatchNormalization (above). Other ops with several outputs
//                have no configs.
// Ops still without configs (opaque in parallelize.h): LSTM/GRU/RNN, Expand,
// Pad, Slice and multi-output ops other than the three above. The planner
// runs them replicated, or split on dim 0 where that is exact for the kind.
//
//   GraphBuilder b("mlp"); ... (x[2048,4096] @ w[4096,16384])
//   auto cfgs = *CandidateConfigs(g, mm, 8);       // data first, then the rest
//   ParallelConfig col{.output_degrees = {1, 8}};
//   OpLayouts l = *ConfigLayouts(g, mm, col);      // x f32[2048,4096]x8,
//                                                  // w f32[4096,16384/8]
//   OpTime t = *OpTimeUnderConfig(cm, g, mm, col);  // one shard, one device
//   Transition tr = *LayoutTransition(l.output, want, ReplicaKind::kPartialSums);
//   double s = *TransitionTime(comm, tr);
#ifndef BRAID_SEARCH_PARALLEL_CONFIG_H_
#define BRAID_SEARCH_PARALLEL_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_model.h"
#include "costmodel/parallel_comm.h"
#include "graph/graph.h"
#include "graph/parallel_ops.h"
#include "graph/parallel_shape.h"

namespace braid::search {

// How one op runs on TotalDegree() devices: the degree of each output dim,
// the reduction split (MatMul/Gemm contraction, Conv C_in, Gather table
// rows: the output then holds
// reduction_degree partial sums), and extra copies of the whole computation
// (replica_degree; an elementwise op following a replicated input).
struct ParallelConfig {
  std::vector<int> output_degrees;
  int reduction_degree = 1;
  int replica_degree = 1;

  int TotalDegree() const;
  bool operator==(const ParallelConfig&) const = default;
};

// "out[1,8]", "out[1,1] red8", "out[2,4] rep2".
std::string ParallelConfigString(const ParallelConfig& c);

// Unity's name of a MatMul/Gemm config: "data", "column", "row", "head",
// "spatial" when one kind carries every degree, "replicated" for degree 1,
// else "mixed". Conv, pooling, BatchNormalization: "data", "channel",
// "spatial", "reduction" (Conv's C_in); Gather: "data", "row", "column"; Split:
// "segmented" (split on its axis), else "elementwise".
// Elementwise and other ops: "elementwise".
std::string ConfigKindName(const graph::Graph& g, graph::OpId op, const ParallelConfig& c);

// A config CandidateConfigs leaves out because no per-device program
// executes it exactly: `config_kind` names the inexact part ("spatial" for a
// Conv's H split with halo rows, "row" for a Gather's vocabulary split),
// `why` says what is missing.
struct DroppedConfig {
  ParallelConfig config;
  std::string config_kind;
  std::string why;
};
// The reason `c` (valid for `op`) cannot run exactly, or nullopt.
std::optional<DroppedConfig> InexactConfig(const graph::Graph& g, graph::OpId op,
                                           const ParallelConfig& c);

// The valid configs of `op` at total degree `degree`: every way to spread
// `degree` over the output dims (and the contraction dim of MatMul/Gemm) so
// that each degree divides its size; no replica (recomputing a whole op is
// never cheaper than splitting it). The data-parallel one (all of `degree` on
// output dim 0) comes first where dim 0 divides; the rest in lexicographic
// order of (output degrees..., reduction degree). Unimplemented for op kinds
// other than MatMul, Gemm, elementwise ops, Softmax/LogSoftmax over the last
// dim, LayerNorm, Transpose, Reshape, Split and the CNN/lookup ops listed at
// the top; InvalidArgument for degree < 1. Configs InexactConfig refuses are
// left out and, when `dropped` is given, appended to it.
absl::StatusOr<std::vector<ParallelConfig>> CandidateConfigs(
    const graph::Graph& g, graph::OpId op, int degree,
    std::vector<DroppedConfig>* dropped = nullptr);

// The layouts a config implies. Input replicas are copies (every task that
// needs a piece holds it); the output's replica degree is
// reduction_degree * replica_degree, of which the reduction part are partial
// sums (`output_partial_sums`; only single-output ops have a reduction
// split). A config's output_degrees are output 0's; `outputs` holds the
// layout of every output (Split's segments, Dropout's mask,
// BatchNormalization's statistics), `output` is outputs[0].
struct OpLayouts {
  std::vector<graph::ParallelTensorShape> inputs;   // one per op input, in order
  graph::ParallelTensorShape output;                // = outputs[0]
  std::vector<graph::ParallelTensorShape> outputs;  // one per op output, in order
  bool output_partial_sums = false;
};
// InvalidArgument when the config does not fit the op (rank, a degree that
// does not divide its size, a reduction degree on a non-MatMul).
absl::StatusOr<OpLayouts> ConfigLayouts(const graph::Graph& g, graph::OpId op,
                                        const ParallelConfig& c);

// The op's attributes restated for its piece under `c`: a grouped Conv's
// group count, a segmented Split's `split` sizes.
graph::Attrs PieceAttrs(const graph::Graph& g, graph::OpId op, const ParallelConfig& c);

// The op alone in a graph of its own, every tensor at its piece shape under
// `c`, costs annotated: what one device runs.
absl::StatusOr<graph::Graph> ShardGraph(const graph::Graph& g, graph::OpId op,
                                        const ParallelConfig& c);

// Per-device compute time of `op` under `c`: the cost model's time for the
// one-op ShardGraph (CostModel::ComputeTime takes a graph and op ids and
// costs what the graph's shapes say, so the shard is costed at its own shape
// rather than by scaling the whole op's time by a FLOP ratio).
absl::StatusOr<costmodel::OpTime> OpTimeUnderConfig(costmodel::CostModel& cm,
                                                    const graph::Graph& g, graph::OpId op,
                                                    const ParallelConfig& c);

// What the replica dimension of a layout holds: identical copies (a
// Replicate's result, a config's input) or partial sums (a row-parallel
// MatMul's output) that must be reduced before anything but a sum reads them.
enum class ReplicaKind { kCopies, kPartialSums };

// A layout change as parallel ops applied to `start`. `start` is the `from`
// layout, except that copies the target does not need are dropped first
// (every task keeps or slices its own copy: no communication), so that the
// ops are exactly what moves data.
struct Transition {
  graph::ParallelTensorShape start;
  std::vector<graph::ParallelOp> ops;
};

// The parallel ops turning `from` into `to` (`to`'s replicas are copies), in
// the order parallel_comm.h fuses into single collectives: partial sums are
// reduced first (Reduce, then a Partition -> ReduceScatter or a Replicate ->
// AllReduce where that is the next step), then per dim Combine where the
// target degree is lower (a gather), Partition where it is higher (free:
// local slicing), finally Replicate. Examples (P = piece):
//   [2048/8,4096]  -> [2048,4096]x8          Combine(0,8) Replicate(8)  AllGather
//   [2048,4096]x8 partial -> [2048,4096]x8   Reduce(8) Replicate(8)     AllReduce
//   [2048,4096]x8 partial -> [2048/8,4096]   Reduce(8) Partition(0,8)   ReduceScatter
//   [2048,4096]x8 copies  -> [2048/8,4096]   start [2048,4096], Partition(0,8): free
//   [2048,16384/8] -> [2048/8,16384]         Combine(1,8) Partition(0,8) AllToAll
// InvalidArgument when the shapes differ in rank, sizes or dtype or are
// invalid.
absl::StatusOr<Transition> LayoutTransition(const graph::ParallelTensorShape& from,
                                            const graph::ParallelTensorShape& to,
                                            ReplicaKind from_replicas = ReplicaKind::kCopies);

// The collectives of a transition (ParallelOpsComm) and their time
// (ParallelOpsCommTime).
absl::StatusOr<std::vector<costmodel::CollectiveStep>> TransitionComm(const Transition& t);
absl::StatusOr<double> TransitionTime(const costmodel::CommModel& comm, const Transition& t);

// The weight-gradient synchronization training needs under a config: for
// every parameter input whose layout has replica degree r > 1 (data
// parallelism replicates weights over the data degree), the gradient pieces
// are partial sums: Reduce(r) Replicate(r), one AllReduce of the piece over r
// ranks. Column and row splits partition the weight: nothing to sync.
struct GradSync {
  graph::TensorId weight = graph::kNoId;
  Transition transition;  // start: the gradient's layout (= the weight's)
};
absl::StatusOr<std::vector<GradSync>> WeightGradSync(const graph::Graph& g, graph::OpId op,
                                                     const ParallelConfig& c);
absl::StatusOr<double> WeightGradSyncTime(const costmodel::CommModel& comm,
                                          const graph::Graph& g, graph::OpId op,
                                          const ParallelConfig& c);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLEL_CONFIG_H_
