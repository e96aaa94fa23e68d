// The 1F1B pipeline schedule (PipeDream-flush; Unity §5.3 takes it for
// pipeline parallelism): time and memory of one training iteration of p
// sequential stages over m micro-batches.
//
// Each stage s runs a fixed order: min(p - s - 1, m) warm-up forwards, then
// alternately one forward and one backward until its forwards are done, then
// the remaining backwards. F(s, j) waits for F(s - 1, j) and its activation
// transfer; B(s, j) waits for B(s + 1, j) and its gradient transfer (the last
// stage's backward follows its own forward). Times come from an exact list
// schedule of these dependencies, not from the closed form, so stages of
// different speeds and transfer times are handled; for equal stages without
// transfers the makespan is the textbook (m + p - 1) * (f + b).
//
// Memory: a stage holds the activations of every micro-batch it has run
// forward but not yet backward. 1F1B bounds that by p - s (GPipe's
// all-forwards-then-all-backwards order holds all m), which is why Unity and
// braid choose it.
//
//   std::vector<PipelineStage> st = {{.forward_s = 2e-3, .backward_s = 4e-3}, ...};
//   absl::StatusOr<PipelineTiming> t = SimulatePipeline(st, /*micro_batches=*/8, /*transfer_s=*/1e-4);
//   // t->iteration_s, t->bubble_fraction, t->peak_in_flight[s]
#ifndef BRAID_SEARCH_PIPELINE_SCHEDULE_H_
#define BRAID_SEARCH_PIPELINE_SCHEDULE_H_

#include <vector>

#include "absl/status/statusor.h"

namespace braid::search {

struct PipelineStage {
  double forward_s = 0;   // one micro-batch's forward on this stage
  double backward_s = 0;  // and its backward
  // Bytes of one micro-batch's activations the stage keeps until the backward.
  double activation_bytes = 0;
};

enum class PipelineOrder { k1F1B, kGPipe };

struct PipelineTiming {
  double iteration_s = 0;   // makespan of all forwards and backwards
  double busy_s = 0;        // the busiest stage's compute time
  double bubble_fraction = 0;  // 1 - busy_s / iteration_s
  std::vector<int> peak_in_flight;        // per stage: micro-batches held at once
  std::vector<double> peak_activation_bytes;  // per stage
};

// InvalidArgument for no stages, micro_batches < 1, or a negative time.
// `transfer_s`: one activation (or gradient) transfer between adjacent stages.
absl::StatusOr<PipelineTiming> SimulatePipeline(const std::vector<PipelineStage>& stages,
                                                int micro_batches, double transfer_s,
                                                PipelineOrder order = PipelineOrder::k1F1B);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PIPELINE_SCHEDULE_H_
