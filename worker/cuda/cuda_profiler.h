// The CUDA profiler backend: measures op times on a GPU with cuBLAS, cuDNN
// and a few kernels of its own, timed with CUDA events, and writes them to
// the profile store under device kind "cuda:" + the device's name (the kind
// the cluster presets use). Mirrors CpuProfiler (worker/cpu_profiler.h):
// same ProfileOptions, same OpProfile (its `aten` field names the library
// calls measured here, e.g. "cublasGemmEx"), Unimplemented naming the type
// for ops it has no mapping for (the cost model falls back to its roofline
// estimate for them).
//
// Construction never touches the GPU; the first ProfileOp selects the device
// and creates the stream and library handles. Without a device or driver
// every call answers FailedPrecondition with the CUDA runtime's reason.
//
//   CudaProfiler profiler;                                // device 0
//   absl::StatusOr<OpProfile> p = profiler.ProfileOp(g, op_id);
//   // p->sample.median_s, p->sample.spread_s (IQR), p->aten ("cudnnConvolutionForward(algo=1)")
//   absl::StatusOr<std::string> kind = profiler.DeviceKind();   // "cuda:NVIDIA H100 80GB HBM3"
//
//   ProfileGraphReport r = *ProfileGraphCuda(g, *store, {});   // every distinct op once
//
// Timing: each sample records a CUDA event, runs the op `inner` times
// back to back (enough to fill ProfileOptions::min_sample_s), records a second
// event and divides; warm-up runs first (cuDNN/cuBLAS pick and load kernels
// then). Inputs are standard-normal data generated on the device.
#ifndef BRAID_WORKER_CUDA_CUDA_PROFILER_H_
#define BRAID_WORKER_CUDA_CUDA_PROFILER_H_

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "worker/cpu_profiler.h"
#include "worker/cuda/cuda_device.h"

namespace braid::worker {

namespace cuda_internal {
class CudaContext;
}

class CudaProfiler {
 public:
  explicit CudaProfiler(ProfileOptions options = {}, int device = 0);
  ~CudaProfiler();
  CudaProfiler(const CudaProfiler&) = delete;
  CudaProfiler& operator=(const CudaProfiler&) = delete;

  // Measures op `op` of `g` on device tensors of its shapes.
  // FailedPrecondition without a usable device; Unimplemented for types,
  // dtypes or attributes without a mapping; InvalidArgument naming the op
  // when the library's output shape disagrees with the graph's;
  // ResourceExhausted when the tensors do not fit in device memory.
  absl::StatusOr<OpProfile> ProfileOp(const graph::Graph& g, graph::OpId op) const;

  // Measures the fused kernel of `ops` (a group the GPU fusion backend
  // accepts) as braid's own CUDA kernel: an elementwise group (elementwise
  // members of one iteration space, reshapes, reduction sinks: the program
  // worker/fused_program.h builds, the CPU executor's too) compiled by NVRTC
  // (kernels/cuda) and timed with CUDA events; a 2-D GEMM with its epilogue
  // chain as the cublasLtMatmul with that epilogue (kernels/cuda/lt_gemm.h).
  // Unimplemented for groups without such a form: a convolution with its
  // epilogue (cuDNN's fused convolution is not in kernels/cuda), batched
  // GEMMs, loop fusions holding data movement or normalizations.
  absl::StatusOr<OpProfile> ProfileFused(const graph::Graph& g,
                                         std::span<const graph::OpId> ops) const;

  // The device this profiler measures on (initializes it).
  absl::StatusOr<CudaDeviceInfo> Device() const;
  // "cuda:" + the device's name: the profile-store key.
  absl::StatusOr<std::string> DeviceKind() const;

  // True when the type has a cuBLAS/cuDNN/kernel mapping.
  static bool Supports(std::string_view op_type);

  const ProfileOptions& options() const { return options_; }

 private:
  absl::StatusOr<cuda_internal::CudaContext*> Context() const;

  ProfileOptions options_;
  int device_;
  mutable std::mutex mu_;  // one op on the device at a time
  mutable std::unique_ptr<cuda_internal::CudaContext> ctx_;
  mutable uint64_t seed_ = 1;
};

// Profiles every distinct (op type, OpSignature) of `g` once on device
// `device`, skipping keys already in `store` for its "cuda:<name>" kind.
// FailedPrecondition without a usable device (nothing is measured); otherwise
// fails only when the store cannot be written.
absl::StatusOr<ProfileGraphReport> ProfileGraphCuda(const graph::Graph& g,
                                                    costmodel::ProfileStore& store,
                                                    const ProfileOptions& options = {},
                                                    int device = 0);

}  // namespace braid::worker

#endif  // BRAID_WORKER_CUDA_CUDA_PROFILER_H_
