// Timing entry points for the CUDA profiler: how long one fused elementwise
// kernel (ew_kernel.h) or one cuBLASLt GEMM with its epilogue (lt_gemm.h)
// takes on the current device, on device inputs of the right shapes filled
// with deterministic uniform data. Without a device both answer
// FailedPrecondition "no CUDA device: <the runtime's reason>".
//
//   absl::StatusOr<double> s = TimeEwKernel(program, /*reps=*/100);
//   if (s.ok()) LOG(INFO) << *s * 1e6 << " us per run";
//
// Method: compile (or fetch) the kernel / plan, run it once untimed (module
// load, algorithm choice, caches), then record a CUDA event, run it `reps`
// times back to back on a private stream, record a second event and divide
// the elapsed time by reps: the mean seconds per run, launch overhead of
// back-to-back launches included, host setup excluded.
#ifndef BRAID_KERNELS_CUDA_TIMING_H_
#define BRAID_KERNELS_CUDA_TIMING_H_

#include "absl/status/statusor.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cuda {

// Mean seconds per run of the fused kernel of `p`, compiled for the current
// device. Inputs are uniform in [0.5, 1.5] (inside every instruction's
// domain, so no NaN or inf paths). InvalidArgument for an invalid program or
// reps < 1; ResourceExhausted when the buffers do not fit.
absl::StatusOr<double> TimeEwKernel(const EwProgram& p, int reps);

// Mean seconds per cublasLtMatmul of `s` (A and B uniform in [-1, 1], aux
// input random bits). InvalidArgument as LtGemmCanImplement or reps < 1;
// Unimplemented when cuBLASLt has no algorithm for `s` on this device.
absl::StatusOr<double> TimeLtGemm(const LtGemmSpec& s, int reps);

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_TIMING_H_
