// Overlapped tensor-parallel training on Gloo ranks: every
// AllGather->MatMul and MatMul->ReduceScatter pair of a sequence-parallel
// (Megatron-SP) model's forward and backward runs with its own method from
// worker/collective_matmul.h (none, looped, unrolled, bidirectional), and
// the single-process training it must reproduce.
//
// Layout: the activations between blocks are sharded by rows (tokens) over
// the n ranks, rank r holding rows [r*m/n, (r+1)*m/n) of [m, d]. A block
// gathers its input's rows, runs column-parallel MatMul(s), local ops, a
// row-parallel MatMul, and reduce-scatters the partial sums back to rows:
//
//  - MLP block: out = x + ReLU(AllGather(x) @ W1_r) @ W2_r -> ReduceScatter
//    (residual: yes; no biases). W1 [d, f] split by columns, W2 [f, d] by rows.
//  - Transformer block (pre-LN, non-causal attention, LayerNorms without
//    affine parameters, no biases): h = x + RS(Attn(AG(LN(x)) @ Wqkv_r) @ Wo_r);
//    out = h + RS(ReLU(AG(LN(h)) @ W1_r) @ W2_r). Q, K and V are one GEMM of
//    nout = 3 d / n per rank (Wqkv_r = [Wq_r | Wk_r | Wv_r]: one pair).
//    The gathered rows hold every whole sequence, so each rank's heads / n
//    heads attend locally (no constraint on how rows split over sequences).
//
// Pairs (OverlapPairs, the order methods are given in): forward, per block,
// each AllGather->MatMul and MatMul->ReduceScatter; backward, blocks in
// reverse, their adjoints: the output gradient gathered before the row
// MatMul's input gradient (AllGather->MatMul; the gathered gradient also
// gives that weight's gradient) and the column MatMul's input gradient
// (MatMul->ReduceScatter). MLP: 4 pairs per block, transformer: 8. The
// decomposed AllGather->MatMul receives the gathered rows straight into a
// buffer the weight gradient reads in backward (no re-gather). Weight
// gradients are local (every weight is sharded); loss: global MSE (one
// scalar all-reduce); SGD.
//
// A run trains several variants (per-pair method lists) interleaved round
// by round on the same ranks: each round runs `steps` steps of every
// variant, each variant on its own copy of the model, all from the same
// initialization and batches, so every variant must equal the reference.
//
//   OverlapTrainSpec s{.model = OverlapModel::kMlp, .rows = 64, .d_model = 32,
//                      .d_ff = 64, .ranks = 2, .steps = 2,
//                      .variants = {{DecomposeMethod::kNone}, {DecomposeMethod::kLooped}}};
//   absl::StatusOr<OverlapTrainResult> p = RunOverlapTraining(s, {});
//   absl::StatusOr<OverlapVariantResult> ref = RunOverlapReference(s);
//   // p->variants[i].loss ≈ ref->loss; p->variants[i].weights ≈ ref->weights
//
// This header does not include LibTorch.
#ifndef BRAID_WORKER_OVERLAP_TRAIN_H_
#define BRAID_WORKER_OVERLAP_TRAIN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/collective_matmul.h"

namespace c10d {
class ProcessGroupGloo;
}  // namespace c10d

namespace braid::worker {

enum class OverlapModel { kMlp, kTransformer };
std::string_view OverlapModelName(OverlapModel m);  // "mlp", "transformer"
absl::StatusOr<OverlapModel> ParseOverlapModel(std::string_view name);

struct OverlapTrainSpec {
  OverlapModel model = OverlapModel::kMlp;
  int64_t rows = 64;     // m: tokens per step (transformer: batch * seq)
  int64_t d_model = 32;  // d
  int64_t d_ff = 64;     // f
  int64_t heads = 4;     // transformer
  int64_t seq = 8;       // transformer: divides rows
  int blocks = 2;
  int ranks = 2;
  int steps = 2;   // per round
  int rounds = 1;  // each variant trains rounds * steps steps
  double lr = 0.05;
  uint64_t seed = 1;
  // Per variant, per pair (OverlapPairs' order) its method; a list of one
  // method applies it to every pair.
  std::vector<std::vector<DecomposeMethod>> variants = {{DecomposeMethod::kNone}};
  // Rank r pinned to core r mod cores, one LibTorch/OpenBLAS thread each.
  bool pin_cores = false;
};

// One overlapped pair on each rank: the shapes CanDecompose takes.
struct OverlapPair {
  std::string name;  // "b0.fc1.ag", "b1.fc2.grad.ag", ...: its collective
  CollectivePattern pattern = CollectivePattern::kAllGatherMatMul;
  bool backward = false;
  int64_t m = 0, k = 0, nout = 0;
};
std::vector<OverlapPair> OverlapPairs(const OverlapTrainSpec& spec);

// A weight, full [in, out]; rank r holds slice r of it along shard_dim
// (1: column-parallel, 0: row-parallel).
struct OverlapParam {
  std::string name;
  int64_t rows = 0, cols = 0;
  int shard_dim = 1;
};
std::vector<OverlapParam> OverlapParams(const OverlapTrainSpec& spec);

// InvalidArgument naming the field (sizes, ranks, steps, lr, variants) or,
// for a method a pair's shape cannot split, the pair and the variant.
absl::Status ValidateOverlapTrainSpec(const OverlapTrainSpec& spec);

// The variant's per-pair methods, expanded to one per pair.
std::vector<DecomposeMethod> ExpandMethods(const OverlapTrainSpec& spec, size_t variant);

struct OverlapVariantResult {
  std::vector<DecomposeMethod> methods;  // per pair
  std::vector<double> loss;    // per step, before its update
  std::vector<double> step_s;  // per step, the slowest rank's (rounds * steps)
  // Per step, the slowest rank's seconds inside the pairs (collectives and
  // their GEMMs); step_s - pair_s is the rest (local ops, loss, update).
  std::vector<double> pair_s;
  std::vector<std::vector<float>> weights;  // per OverlapParams entry, full, row-major
};

struct OverlapTrainResult {
  std::vector<OverlapVariantResult> variants;
};

struct OverlapTrainOptions {
  // The rank program; empty: $BRAID_OVERLAP_RANK, else braid-overlap-rank
  // next to this executable or in ../bin.
  std::string rank_binary;
  double timeout_s = 600;
};

// Spawns spec.ranks braid-overlap-rank processes (c10d FileStore + Gloo on
// 127.0.0.1) training every variant. Internal with a rank's log on failure.
absl::StatusOr<OverlapTrainResult> RunOverlapTraining(const OverlapTrainSpec& spec,
                                                      const OverlapTrainOptions& options);

// The same model, initialization and batches trained in this process on the
// full rows with LibTorch autograd, rounds * steps steps (methods empty).
absl::StatusOr<OverlapVariantResult> RunOverlapReference(const OverlapTrainSpec& spec);

// One rank (braid-overlap-rank): reads the spec (JSON), trains, writes
// "<variant> <step> <seconds> <loss> <pair seconds>" lines to output_path and its weight
// shards to output_path.v<variant>.bin.
struct OverlapRankConfig {
  std::string store_path, spec_path, output_path;
  int rank = 0, world = 1;
};
absl::Status RunOverlapRank(const OverlapRankConfig& config);

// One rank's training on a group someone else made (the activator's, see
// worker/activator.h): every variant of `spec` (spec.ranks == the group's
// size, this rank `rank`), each on its own copy of the model, interleaved
// step by step; `warmup` untimed steps, then `iterations` timed ones, the
// same steps and batches RunOverlapRank trains. Per variant, per timed step:
// step_s and pair_s of the slowest rank (allreduce MAX, so every rank gets
// the same), the loss before the update; no weights. Every rank must call it
// with the same spec. InvalidArgument for a spec ValidateOverlapTrainSpec
// refuses or a rank outside it; Internal naming the rank when LibTorch or
// Gloo throws.
//
//   spec.variants = {plan_methods, {DecomposeMethod::kNone}};
//   ASSIGN_OR_RETURN(std::vector<OverlapVariantResult> r,
//                    TrainOverlapOnGroup(spec, *pg, rank, /*warmup=*/2, /*iterations=*/10));
absl::StatusOr<std::vector<OverlapVariantResult>> TrainOverlapOnGroup(
    const OverlapTrainSpec& spec, c10d::ProcessGroupGloo& pg, int rank, int warmup,
    int iterations);

}  // namespace braid::worker

#endif  // BRAID_WORKER_OVERLAP_TRAIN_H_
