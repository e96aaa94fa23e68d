// Where braid's CUDA kernels turn CUDA runtime, NVRTC and cuBLASLt result
// codes into absl::Status (CONVENTIONS.md: convert only at the edges), and
// the device queries every entry point makes first. kernels/ is a leaf
// library: worker/cuda, which depends on it, adds the cuDNN and NCCL codes
// in its own worker/cuda/cuda_status.h.
//
// Codes: no device / no driver / driver too old / no image for this GPU ->
// FailedPrecondition (the machine cannot run the kernel; callers fall back
// to the CPU executor), out of memory -> ResourceExhausted, "not supported"
// -> Unimplemented, bad parameters -> InvalidArgument, the rest -> Internal.
// Messages carry the library's own error name and string:
//
//   RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, n), "cudaMalloc"));
//   // "cudaMalloc: cudaErrorMemoryAllocation: out of memory"
//   ASSIGN_OR_RETURN(CudaArch arch, CurrentDeviceArch());   // FailedPrecondition
//                                                            // "no CUDA device: ..."
#ifndef BRAID_KERNELS_CUDA_CUDA_STATUS_H_
#define BRAID_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::kernels::cuda {

absl::Status CudaStatus(cudaError_t e, std::string_view what);
absl::Status NvrtcStatus(nvrtcResult e, std::string_view what);
absl::Status CublasStatus(cublasStatus_t e, std::string_view what);

// The status code each library result maps to (exposed for tests).
absl::StatusCode CudaStatusCode(cudaError_t e);
absl::StatusCode NvrtcStatusCode(nvrtcResult e);
absl::StatusCode CublasStatusCode(cublasStatus_t e);

// A compute capability, e.g. {9, 0} for Hopper.
struct CudaArch {
  int major = 0;
  int minor = 0;
  int sm() const { return major * 10 + minor; }  // 90
};

// Number of CUDA devices. FailedPrecondition "no CUDA device: <runtime's
// reason>" when the runtime cannot reach a driver (a GPU-less machine: the
// runtime opens libcuda.so.1 lazily, so the binary still starts) or the
// driver reports 0 devices.
absl::StatusOr<int> CudaDeviceCount();

// Compute capability of the calling thread's current device (cudaGetDevice);
// FailedPrecondition as CudaDeviceCount when there is none.
absl::StatusOr<CudaArch> CurrentDeviceArch();

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_CUDA_STATUS_H_
