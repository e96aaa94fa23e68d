// Internal to braid_worker (it includes ATen; include it from worker/*.cc
// only): the pipeline-parallel step of parallel_train.cc — which layers each
// stage holds, the order a stage runs its micro-batches' forwards and
// backwards in, and one training step of a stage on real ranks.
//
// A stage's order is the one search/pipeline_schedule.h models (so a
// measured step and the search's estimate describe the same execution):
//
//  - GPipe: F0 F1 ... F(m-1), then B0 B1 ... B(m-1); a stage holds the
//    activations of all m micro-batches at once.
//  - 1F1B (PipeDream-flush, Megatron's non-interleaved schedule): w =
//    min(stages - stage - 1, m) warm-up forwards, then F(w+j) B(j) pairs until
//    every forward ran, then the remaining backwards; a stage holds at most
//    stages - stage micro-batches.
//
// F(s, j) waits for stage s - 1's output of micro-batch j, B(s, j) for stage
// s + 1's input gradient of it. Sends are started without waiting (they
// complete by the end of the step), receives block, so the orders cannot
// deadlock: every step of a stage's order only waits on an earlier step of a
// neighbour's order. The last stage computes the MSE of its micro-batch; its
// gradient is scaled by 1 / micro_batches so that the accumulated gradients
// are those of the mean over the data replica's rows.
//
//   std::vector<PipelineOp> order = StageOrder(/*stage=*/0, /*stages=*/4, /*micro=*/8,
//                                              ParallelTrainSpec::PipelineSchedule::k1F1B);
//   // F0 F1 F2 F3 B0 F4 B1 ... B7
//   double loss = RunPipelineStep(spec, stage, bounds, trainer, link, x_rows, t_rows);
#ifndef BRAID_WORKER_PARALLEL_PIPELINE_H_
#define BRAID_WORKER_PARALLEL_PIPELINE_H_

#include <ATen/ATen.h>

#include <vector>

#include "absl/status/statusor.h"
#include "worker/parallel_train.h"
#include "worker/parallel_transformer.h"

namespace braid::worker::internal {

// One entry of a stage's order: the forward or backward of a micro-batch.
struct PipelineOp {
  bool forward = true;
  int micro = 0;
};

// Stage `stage`'s order of its micro-batches' forwards and backwards (see
// the file comment).
std::vector<PipelineOp> StageOrder(int stage, int stages, int micro_batches,
                                   ParallelTrainSpec::PipelineSchedule schedule);

// The layers of every stage: stages + 1 entries, stage s holding [bounds[s],
// bounds[s + 1]) of `layers` layers (MLP Linear layers or transformer
// blocks). InvalidArgument naming the field (pipeline_stages, stage_begin,
// micro_batches, schedule, stage_relu_first) for a pipeline the spec cannot
// run.
absl::StatusOr<std::vector<int>> StageBounds(const ParallelTrainSpec& spec, int layers);

// Whether stage `stage` starts with the ReLU of the Linear before it (MLP,
// spec.stage_relu_first; false when that is empty). The previous stage then
// ends with that Linear's bias Add and sends the pre-activation.
bool StageStartsWithRelu(const ParallelTrainSpec& spec, int stage);

// Transfers between this rank and the rank at the same data and model
// position of a neighbouring stage (stage ± 1). Per neighbour and direction
// the transfers must come in the same order on both ends (RunPipelineStep's
// orders send and receive each direction's micro-batches in increasing
// order); `tag` names the micro-batch and direction.
class StageLink {
 public:
  virtual ~StageLink() = default;
  // Starts sending `t` to stage `to_stage`; it completes by WaitSends().
  virtual void Send(const at::Tensor& t, int to_stage, int tag) = 0;
  // Receives into `t` (its shape and dtype set) from stage `from_stage`.
  virtual void Recv(at::Tensor& t, int from_stage, int tag) = 0;
  // Waits for every send started since the last call.
  virtual void WaitSends() = 0;
};

// One training step of this rank's stage over the data replica's rows `x`
// (inputs, read by the first stage) and `t` (targets, read by the last):
// the stage's order of forwards and backwards, activations received from
// and sent to the neighbouring stages, then trainer.Update(). Returns the
// mean MSE over the rows on the last stage, 0 elsewhere. With
// spec.loss_rows_split the last stage's output holds only this model rank's
// (`model_rank`) share of each micro-batch's rows: the MSE is over those
// rows (the caller averages over the model group) and the gradient is scaled
// as the full micro-batch's.
double RunPipelineStep(const ParallelTrainSpec& spec, int stage, const std::vector<int>& bounds,
                       ShardTrainer& trainer, StageLink& link, const at::Tensor& x,
                       const at::Tensor& t, int model_rank = 0);

}  // namespace braid::worker::internal

#endif  // BRAID_WORKER_PARALLEL_PIPELINE_H_
