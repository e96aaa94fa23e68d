// The timing executor's check of its data-parallel allreduces: every rank
// packs the same gradients (all ranks seed LibTorch alike), so a correct sum
// over `world` ranks is `world` times a rank's own buffer.
//
// Gradients may hold NaN: the executor runs the graph on random stand-ins,
// and the IR keeps no constant values, so ONNX constants such as a
// decomposed LayerNorm's exponent and epsilon are random too; Pow and Sqrt
// of negative values give NaN, which then fills the gradients. A NaN summed
// with NaNs at the same places is the correct result, so NaNs must match
// NaNs (at::allclose's equal_nan); a NaN where the expected value is finite,
// or a wrong number, is still a wrong result.
#ifndef BRAID_WORKER_INTERNAL_ALLREDUCE_CHECK_H_
#define BRAID_WORKER_INTERNAL_ALLREDUCE_CHECK_H_

#include <ATen/ATen.h>

namespace braid::worker::internal {

// `expected` is world x the rank's buffer before the allreduce.
inline bool AllreduceSumMatches(const at::Tensor& result, const at::Tensor& expected) {
  return at::allclose(result, expected, /*rtol=*/1e-4, /*atol=*/1e-3, /*equal_nan=*/true);
}

}  // namespace braid::worker::internal

#endif  // BRAID_WORKER_INTERNAL_ALLREDUCE_CHECK_H_
