// Data- and tensor-parallel training of an MLP, executed for real on Gloo
// ranks, and the single-process training it must reproduce.
//
// The model: Linear layers (weight [out, in] and bias) with ReLU between them,
// an MSE loss and plain SGD. Each Linear layer has a parallel configuration:
//
//  - kData: weight replicated; the batch is split across the data groups and
//    the weight gradients are averaged over the data group (DDP). Within a
//    model-parallel group a data layer is computed redundantly by every rank
//    (its input must be replicated: a partitioned input is gathered first).
//  - kColumn (Megatron's column-parallel Linear): input replicated, weight and
//    bias split by output features, output partitioned on the feature dim.
//    Backward all-reduces the input gradient over the model group (Megatron's
//    f operator).
//  - kRow (row-parallel): input partitioned on the feature dim (as a column
//    layer or a scattering row layer leaves it), weight split by input
//    features; the partial outputs are all-reduced over the model group
//    (Reduce + Replicate = AllReduce, the g operator) and the bias is added
//    once, after it. A row layer whose next layer (in its stage) is another
//    row layer instead REDUCE-SCATTERS its partial output along the feature
//    dim over the model group (an all-to-all and a local sum, GlooReduceScatter:
//    Gloo has no reduce_scatter),
//    holds the bias split by output features (as a column layer), adds its
//    slice and applies the ReLU on the slice, so the next row layer reads its
//    input partitioned on features with no further communication (Unity's
//    Reduction -> Partition: the plan braid picks for stacked row layers,
//    ops out[D,1] redM -> Add/Relu out[D,M]). Backward: the reduce-scatter's
//    adjoint, an all-gather of the output gradient along features, then the
//    usual row-layer gradients.
//
// With loss_rows_split the last layer (a row layer) reduce-scatters its
// partial output along the BATCH dim over the model group instead (the plan
// braid picks for the last row layer: out[D,1] redM -> bias Add out[D*M,1]):
// each model rank adds the bias to its rows and computes the MSE of its
// rows (the step's loss is the mean over the model group's rows too); the
// backward all-gathers the output gradient's rows (the adjoint) and
// all-reduces the bias gradient over the model group (every rank saw only
// its rows).
//
// A column output consumed by anything but a row layer (a data or column
// layer, or the loss) is all-gathered first (Combine); its backward takes the
// rank's slice of the gradient. Column→ReLU→row needs no communication
// between the two layers.
//
// Ranks = data_degree × model_degree (per pipeline stage, see below: r is
// then the rank's index within its stage). Rank r is model index
// r % model_degree in model group r / model_degree (contiguous ranks), and
// data index r / model_degree in data group r % model_degree. Every rank
// holds only its shard of each weight; the full weights are made from `seed`
// identically by every rank and by the reference, and each rank keeps its
// slice.
//
//   ParallelTrainSpec s{.widths = {32, 64, 64, 16}, .batch = 16,
//                       .layers = {{LayerParallel::kColumn}, {LayerParallel::kRow},
//                                  {LayerParallel::kData}},
//                       .ranks = 4, .data_degree = 2, .model_degree = 2,
//                       .steps = 5, .lr = 0.05, .seed = 1};
//   absl::StatusOr<ParallelTrainResult> p = RunParallelTraining(s, {});
//   absl::StatusOr<ParallelTrainResult> ref = RunSingleProcessReference(s);
//   // p->loss[i] ≈ ref->loss[i]; p->weights ≈ ref->weights
//
// With `transformer` set the model is instead a stack of pre-LayerNorm
// residual transformer blocks (LN → self-attention with Q/K/V/output
// projections; LN → ReLU MLP) on [batch, seq, d_model] inputs with an MSE
// loss against random targets, trained with Megatron tensor parallelism on
// the model group: head-parallel attention (Q/K/V column-parallel, each rank
// holding heads / model_degree whole heads; output projection row-parallel)
// and a column→row MLP, LayerNorms replicated, plus data parallelism over
// the data groups as above. `weights` then lists per block ln1, q, k, v, o,
// ln2, w1, w2, a LayerNorm as weight [d_model, 1] (its gain) and bias.
//
//   ParallelTrainSpec t{.batch = 4, .ranks = 4, .data_degree = 2,
//                       .model_degree = 2, .steps = 5, .lr = 0.1, .seed = 3,
//                       .transformer = TransformerShape{.d_model = 32,
//                           .heads = 4, .seq = 8, .d_ff = 64, .blocks = 2}};
//
// Pipeline parallelism (pipeline_stages > 1; worker/parallel_pipeline.h runs
// the schedule): the layers (MLP: Linear layers; transformer: blocks) are cut
// into stages, stage s holding [stage_begin[s], stage_begin[s + 1]) and each
// rank only its stage's layers (still split by its data/model groups inside
// the stage). stage_begin lists pipeline_stages starts (the first 0; a last
// entry equal to the layer count may follow); empty: contiguous stages as
// equal as possible. An MLP stage may also start with the ReLU of the
// previous stage's last Linear (the cut between that Linear's bias Add and
// its ReLU, as braid's stage DP may place it): stage_relu_first[s] true; the
// activation crossing the boundary is then the pre-activation, and stage s
// applies the ReLU (and its backward) first. stage_relu_first has
// pipeline_stages entries or none (all false). Entry 0 true means the model
// itself starts with a ReLU on its input: a single-stage spec describing one
// stage of a pipeline (what parallel_spec_graph.h and parallel_plan_exec.h
// build per stage) uses that. Ranks are stage-major, outside data and model:
//
//   rank = stage * (data_degree * model_degree) + data * model_degree + model
//
// so each stage is a contiguous block laid out as above. Every step splits
// the data replica's rows into micro_batches equal parts; activations go
// forward and activation gradients backward between rank r of stage s and
// rank r of stage s ± 1 (a Gloo broadcast from the sender on a 2-rank group
// per neighbour pair and direction, so bound ranks poll for it), in the
// order of `schedule`: GPipe (all forwards, then all
// backwards) or 1F1B (PipeDream-flush: stages - stage - 1 warm-up forwards,
// then one forward / one backward, then the remaining backwards; the order
// search/pipeline_schedule.h models). The last stage computes the MSE; each
// micro-batch's gradient is scaled by 1 / micro_batches, gradients accumulate
// over the micro-batches and one SGD update ends the step, so loss and weights
// equal the full-batch step's. Stages combine with data and tensor
// parallelism: an activation crossing a stage boundary is replicated in the
// model group (MLP: a column output ending a stage is gathered, and a row
// layer may not start a stage; a transformer block's output always is).
//
//   ParallelTrainSpec p{.widths = {32, 64, 64, 64, 16}, .batch = 16,
//                       .layers = {{}, {}, {}, {}}, .ranks = 4, .data_degree = 2,
//                       .steps = 5, .lr = 0.1, .seed = 7, .pipeline_stages = 2,
//                       .micro_batches = 4};  // 1F1B, stages {0, 1} and {2, 3}
#ifndef BRAID_WORKER_PARALLEL_TRAIN_H_
#define BRAID_WORKER_PARALLEL_TRAIN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::worker {

struct LayerParallel {
  enum Kind { kData = 0, kColumn = 1, kRow = 2 };
  Kind kind = kData;
};
std::string_view LayerParallelName(LayerParallel::Kind kind);  // "data", "column", "row"

// A transformer's sizes (see the file comment); d_model and d_ff are also
// the widths of its linears.
struct TransformerShape {
  int64_t d_model = 0;
  int64_t heads = 0;  // must divide d_model and be divisible by model_degree
  int64_t seq = 0;
  int64_t d_ff = 0;  // MLP hidden width, divisible by model_degree
  int blocks = 0;
};

struct ParallelTrainSpec {
  std::vector<int64_t> widths;  // layers.size() + 1 feature widths, input first
  int64_t batch = 0;            // global batch (rows per step)
  std::vector<LayerParallel> layers;
  int ranks = 1;
  int data_degree = 1;
  int model_degree = 1;
  int steps = 1;
  double lr = 0.05;
  uint64_t seed = 1;
  // Set: train this transformer; widths and layers must then be empty.
  std::optional<TransformerShape> transformer;
  // Pipeline parallelism: ranks = data_degree * model_degree * pipeline_stages.
  // Stage s holds layers [stage_begin[s], stage_begin[s+1]) (MLP: Linear layers;
  // transformer: blocks); empty: contiguous, as equal as possible.
  int pipeline_stages = 1;
  std::vector<int> stage_begin;
  // Per stage (MLP only): the stage starts with the ReLU of the Linear before
  // it (see the file comment); empty: no stage does.
  std::vector<bool> stage_relu_first;
  // The last layer (row, model_degree > 1) reduce-scatters its output by rows
  // over the model group and the loss is computed on each rank's rows (see
  // the file comment). The micro-batch's rows must divide over model_degree.
  bool loss_rows_split = false;
  // Micro-batches per step (the batch is split into micro_batches equal parts;
  // gradients accumulate over them, one update per step, so results equal the
  // full-batch step). Must divide the per-data-replica batch.
  int micro_batches = 1;
  enum class PipelineSchedule { kGpipe = 0, k1F1B = 1 };
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
};

// One layer's full parameters, row-major weight [out_features, in_features].
struct FullLayerWeights {
  int64_t out_features = 0;
  int64_t in_features = 0;
  std::vector<float> weight;
  std::vector<float> bias;
};

struct ParallelTrainResult {
  // Per step: the global MSE loss of the step's batch before its update
  // (computed by the last pipeline stage).
  std::vector<double> loss;
  // Per step: seconds of the step (forward, backward, pipeline transfers,
  // gradient all-reduce, update), the slowest rank's; every step starts with
  // a barrier.
  std::vector<double> step_s;
  // After the last step, per layer (gathered onto rank 0 for a parallel run).
  std::vector<FullLayerWeights> weights;
  // With ParallelTrainOptions::op_clocks, per step: seconds per op clock
  // "s<stage>/<name>" (worker/op_clock.h names; a name's total over the
  // step, micro-batches included), the mean over the stage's ranks. Empty
  // without.
  std::vector<std::map<std::string, double>> op_clocks;
  // With op_clocks, per step and rank: seconds clocked in ops (every clock
  // but kCommClock) and in communication (kCommClock, waiting included).
  struct RankClocked {
    double compute_s = 0;
    double comm_s = 0;
  };
  std::vector<std::vector<RankClocked>> rank_clocked;
};

struct ParallelTrainOptions {
  // The rank program; empty: $BRAID_PARALLEL_RANK, else braid-parallel-rank
  // next to this executable or in ../bin.
  std::string rank_binary;
  double timeout_s = 300;  // whole run; ranks still running then are killed
  // Bind rank r (and its Gloo threads) to core r mod cores (PinToCore,
  // worker/rank_processes.h), as a launcher binding ranks to cores does.
  bool pin_cores = false;
  // Bound ranks (pin_cores) wait for their collectives by polling
  // (WaitPolling, worker/gloo_group.h) unless this is false; unbound ranks
  // always block.
  bool poll = true;
  // Clock every op inside the steps (worker/op_clock.h) and return the
  // totals per step in ParallelTrainResult::op_clocks. The clocks cost a
  // clock read per op.
  bool op_clocks = false;
};

// InvalidArgument, naming the layer, for a spec whose sizes do not divide
// (batch by data_degree, a column layer's outputs by model_degree), whose
// ranks are not data_degree × model_degree × pipeline_stages, or whose layer
// sequence is invalid (a row layer reading a replicated input, which it
// slices locally, whose features do not divide over model_degree; a
// scattering row layer's outputs not dividing over model_degree). Naming the field: pipeline_stages < 1 or more than the
// layers, stage_begin of the wrong size, not starting at 0, not increasing
// (an empty stage) or out of range, micro_batches < 1 or not dividing the
// per-data-replica batch, an unknown schedule, stage_relu_first of the wrong
// size or set for a transformer; loss_rows_split without a last row layer or
// with rows that do not divide over model_degree.
// For a transformer: heads not divisible by model_degree (the message names
// "heads"), d_model by heads, or d_ff by model_degree.
absl::Status ValidateParallelTrainSpec(const ParallelTrainSpec& spec);

// Spawns spec.ranks braid-parallel-rank processes (posix_spawn), one
// LibTorch thread each, Gloo on 127.0.0.1. NotFound when the rank program is
// missing; Internal with the rank's log when a rank fails.
absl::StatusOr<ParallelTrainResult> RunParallelTraining(const ParallelTrainSpec& spec,
                                                        const ParallelTrainOptions& options);

// The same model, initialization and data trained in this process on the
// full batch with LibTorch autograd (an independent check of the ranks'
// explicit backward). Validates the spec as RunParallelTraining does.
absl::StatusOr<ParallelTrainResult> RunSingleProcessReference(const ParallelTrainSpec& spec);

// One rank's part, run by braid-parallel-rank: reads the spec (JSON written by
// RunParallelTraining), joins the group through the c10d FileStore at
// `store_path`, trains, and writes "step <i> <seconds> <loss>" lines to
// `output_path`; rank 0 also writes the full weights to `weights_path`.
struct ParallelRankConfig {
  std::string store_path;
  std::string spec_path;
  std::string output_path;
  std::string weights_path;
  int rank = 0;
  int world = 0;
  bool pin_cores = false;
  bool poll = false;       // poll for collectives (only with pin_cores)
  bool op_clocks = false;  // also write "clock <step> <name> <seconds>" lines
};
absl::Status RunParallelRank(const ParallelRankConfig& config);

}  // namespace braid::worker

#endif  // BRAID_WORKER_PARALLEL_TRAIN_H_
