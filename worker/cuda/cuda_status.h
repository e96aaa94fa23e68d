// The one place where CUDA runtime, cuBLAS, cuDNN and NCCL result codes turn
// into absl::Status (CONVENTIONS.md: convert only at the edges). The message
// names what was being done and carries the library's own error string, so a
// worker's report says e.g. "cuda profiler: cudaMalloc 4194304 bytes:
// cudaErrorMemoryAllocation: out of memory".
//
// Codes: "no device / no driver / driver too old" -> FailedPrecondition (the
// machine cannot run CUDA; the caller falls back to CPU), out of memory ->
// ResourceExhausted, "not supported" -> Unimplemented (the cost model falls
// back to its roofline estimate), bad parameters -> InvalidArgument, the
// rest -> Internal.
//
// Propagate them with base/status_macros.h:
//
//   RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, n), "cudaMalloc"));
//   RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&h), "cudnnCreate"));
#ifndef BRAID_WORKER_CUDA_CUDA_STATUS_H_
#define BRAID_WORKER_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <string_view>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"

namespace braid::worker {

// CUDA runtime and cuBLAS statuses: kernels/cuda's conversions (one table).
using kernels::cuda::CublasStatus;
using kernels::cuda::CublasStatusCode;
using kernels::cuda::CudaStatus;
using kernels::cuda::CudaStatusCode;
absl::Status CudnnStatus(cudnnStatus_t e, std::string_view what);
absl::Status NcclStatus(ncclResult_t e, std::string_view what);

// The status code each library result maps to (exposed for tests).
absl::StatusCode CudnnStatusCode(cudnnStatus_t e);
absl::StatusCode NcclStatusCode(ncclResult_t e);

}  // namespace braid::worker

#endif  // BRAID_WORKER_CUDA_CUDA_STATUS_H_
