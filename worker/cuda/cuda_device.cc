#include "worker/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"

namespace braid::worker {

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // Whatever the runtime says, no usable device is a precondition failure
    // for the caller (it picks the CPU backend), not an internal error.
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: no usable device: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
  }
  if (n == 0) return absl::FailedPreconditionError("cuda: the driver reports 0 devices");
  return n;
}

absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int ordinal) {
  ASSIGN_OR_RETURN(int n, CudaDeviceCount());
  if (ordinal < 0 || ordinal >= n) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: no device ", ordinal, ": this machine has ", n, " device(s)"));
  }
  cudaDeviceProp p{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&p, ordinal),
                             absl::StrCat("cudaGetDeviceProperties(", ordinal, ")")));
  CudaDeviceInfo d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.kind = absl::StrCat("cuda:", d.name);
  d.sm_count = p.multiProcessorCount;
  d.total_memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.compute_major = p.major;
  d.compute_minor = p.minor;
  return d;
}

}  // namespace braid::worker
