// CUDA device discovery for the worker: which GPU a profile belongs to. The
// profile store keys GPU measurements by "cuda:" + cudaDeviceProp::name, the
// device kind the cluster presets use (costmodel/cluster.cc).
//
// On a machine without a GPU or driver (CI, this project's build machines)
// the CUDA runtime still loads (it opens libcuda.so lazily) and every call
// here fails with FailedPrecondition carrying the runtime's reason, e.g.
// "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA
// runtime version".
//
//   absl::StatusOr<CudaDeviceInfo> d = FindCudaDevice(0);
//   if (d.ok()) LOG(INFO) << d->kind << ", " << d->sm_count << " SMs";
//   else LOG(INFO) << "no GPU: " << d.status();   // use the CPU profiler
#ifndef BRAID_WORKER_CUDA_CUDA_DEVICE_H_
#define BRAID_WORKER_CUDA_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace braid::worker {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;  // cudaDeviceProp::name, "NVIDIA H100 80GB HBM3"
  std::string kind;  // profile-store device kind: "cuda:" + name
  int sm_count = 0;  // streaming multiprocessors
  int64_t total_memory_bytes = 0;
  int compute_major = 0;  // compute capability, e.g. 9.0
  int compute_minor = 0;
};

// Number of CUDA devices; FailedPrecondition (with the runtime's reason) when
// the runtime cannot talk to a driver, which is how a GPU-less machine answers.
absl::StatusOr<int> CudaDeviceCount();

// Properties of device `ordinal`. FailedPrecondition when there is no
// device/driver or fewer than ordinal + 1 devices (the message says how many).
absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int ordinal);

}  // namespace braid::worker

#endif  // BRAID_WORKER_CUDA_CUDA_DEVICE_H_
