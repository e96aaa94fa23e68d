// The order in which one pipeline stage runs its micro-batches' forwards and
// backwards: what the schedule model (search/pipeline_schedule.h) simulates
// and the pipeline-parallel ranks (worker/parallel_pipeline.h) execute, from
// one definition.
//
//  1F1B (PipeDream-flush, Megatron's non-interleaved schedule): stage s of p
//  runs min(p - s - 1, m) warm-up forwards, then one forward and one backward
//  alternately until its forwards are done, then the remaining backwards; it
//  holds at most p - s micro-batches' activations.
//  GPipe: every forward, then every backward; it holds all m.
//
//   for (MicroStep st : PipelineStageOrder(0, 4, 8, /*gpipe=*/false)) ...
#ifndef BRAID_COSTMODEL_PIPELINE_ORDER_H_
#define BRAID_COSTMODEL_PIPELINE_ORDER_H_

#include <vector>

namespace braid::costmodel {

struct MicroStep {
  bool forward = true;
  int micro = 0;
};

std::vector<MicroStep> PipelineStageOrder(int stage, int stages, int micro_batches, bool gpipe);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_PIPELINE_ORDER_H_
