// Internal to braid_worker (it includes ATen; include it from worker/*.cc
// only): the transformer half of parallel_train.cc — the model's math, its
// Megatron sharding and its hand-written backward on one rank.
//
// The model (ParallelTrainSpec::transformer): `blocks` pre-LayerNorm
// residual blocks (no final LayerNorm, no attention mask):
//
//   h = x + Wo·concat_heads(softmax(Q_h K_hᵀ / √d_head) V_h) + bo
//   y = h + W2·relu(W1·LN2(h) + b1) + b2      (Q/K/V = Wq/Wk/Wv·LN1(x) + b)
//
// Tensor parallel on the model group: Wq, Wk, Wv and W1 are column-parallel
// (a rank holds heads/model_degree whole heads, since a head's d_head output
// features are contiguous, and d_ff/model_degree hidden units); Wo and W2 are
// row-parallel. Each block needs one all-reduce after Wo and one after W2 in
// forward (Megatron's g), and one after each of the column groups' input
// gradients in backward (f). Attention is computed per local head with no
// communication. The LayerNorms' gains and biases are replicated in the model
// group (their inputs and, after f, their output gradients are). The
// parameters' order, per block: ln1, q, k, v, o, ln2, w1, w2; a LayerNorm is
// stored as a "linear" of weight [d_model, 1] (the gain) and bias [d_model].
// A pipeline stage's trainer holds a contiguous range of whole blocks.
#ifndef BRAID_WORKER_PARALLEL_TRANSFORMER_H_
#define BRAID_WORKER_PARALLEL_TRANSFORMER_H_

#include <ATen/ATen.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/parallel_train.h"

namespace braid::worker::internal {

// A group of ranks (model or data) a trainer communicates in.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void AllReduceSum(at::Tensor& t) = 0;
  // Concatenates every member's `t` along `dim` (in member order).
  virtual at::Tensor AllGather(const at::Tensor& t, int64_t dim) = 0;
};

// One rank's shards of its pipeline stage's layers (all layers without a
// pipeline) and their explicit forward/backward/update, one micro-batch at a
// time: worker/parallel_pipeline.h drives it. Inputs and outputs are the
// stage's boundary activations, replicated in the model group.
class ShardTrainer {
 public:
  virtual ~ShardTrainer() = default;
  // The stage's output for micro-batch `micro` from its input `x`; keeps the
  // activations its backward reads until Backward(micro, ...).
  virtual at::Tensor Forward(int micro, const at::Tensor& x) = 0;
  // From the gradient of micro-batch `micro`'s output: accumulates the
  // parameters' gradients and returns the input's gradient (an undefined
  // tensor when `input_grad` is false: the first stage needs none).
  virtual at::Tensor Backward(int micro, const at::Tensor& grad, bool input_grad) = 0;
  // Data parallelism and the SGD step on the accumulated gradients (averaged
  // over the data group), which it then clears.
  virtual void Update() = 0;
  // The full parameters of the stage's layers, assembled in every model group.
  virtual std::vector<FullLayerWeights> GatherFull() = 0;
};

// Shared by the MLP and transformer trainers.

// Adds each `g[k]` to `acc[k]` (setting it when undefined): the trainers sum
// their micro-batches' gradients with it.
void Accumulate(std::vector<at::Tensor>& acc, const std::vector<at::Tensor>& g);

// A (weight [out, in], bias) pair as plain floats.
FullLayerWeights ToFull(const at::Tensor& w, const at::Tensor& b);

// Data parallelism and the SGD step: every gradient averaged over `data` in
// one flat buffer, then w -= lr * grad (same for b).
void AverageAndStep(Collectives& data, const std::vector<at::Tensor>& gw,
                    const std::vector<at::Tensor>& gb, double lr, std::vector<at::Tensor>& w,
                    std::vector<at::Tensor>& b);

// The full parameters from this rank's shards: column layers gathered on the
// output dim (weight and bias), row layers on the input dim (weight only).
std::vector<FullLayerWeights> GatherFullWeights(Collectives& model, const std::vector<at::Tensor>& w,
                                                const std::vector<at::Tensor>& b,
                                                const std::vector<LayerParallel::Kind>& kinds);

// InvalidArgument for a transformer spec whose sizes do not divide (heads by
// model_degree, naming "heads"; d_model by heads; d_ff by model_degree).
absl::Status ValidateTransformerSpec(const ParallelTrainSpec& spec);

// The parameter pairs (8 per block) and their Megatron kinds, in order (kData
// for the replicated LayerNorms).
std::vector<LayerParallel::Kind> TransformerLinearKinds(const ParallelTrainSpec& spec);

// The full parameters as (weight [out, in], bias) pairs, in that order.
std::vector<std::pair<at::Tensor, at::Tensor>> InitTransformer(const ParallelTrainSpec& spec);

// The forward of the full model with ATen ops autograd records (the
// single-process reference); x is [batch, seq, d_model].
at::Tensor TransformerForward(const ParallelTrainSpec& spec, const std::vector<at::Tensor>& w,
                              const std::vector<at::Tensor>& b, const at::Tensor& x);

// The rank's trainer of blocks [block_begin, block_end): keeps its shards of
// those blocks' parameters in `full` (InitTransformer's, every block).
std::unique_ptr<ShardTrainer> MakeTransformerTrainer(
    const ParallelTrainSpec& spec, std::vector<std::pair<at::Tensor, at::Tensor>> full,
    Collectives& model, Collectives& data, int block_begin, int block_end);

}  // namespace braid::worker::internal

#endif  // BRAID_WORKER_PARALLEL_TRANSFORMER_H_
