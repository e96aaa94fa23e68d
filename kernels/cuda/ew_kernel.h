// braid's CUDA fused elementwise/reduction kernel: an EwProgram compiled by
// NVRTC from GenerateEwSource (ew_codegen.h), once per (program Signature,
// target architecture) in a process-wide cache, and launched on a stream.
//
// Compiling needs no GPU (NVRTC is a library); running does. The compiled
// image is loaded lazily, on the first Run on each device, through the CUDA
// runtime's library API (cudaLibraryLoadData), so a process on a GPU-less
// machine starts and gets FailedPrecondition "no CUDA device: ..." from Run.
//
//   ASSIGN_OR_RETURN(auto k, CudaEwKernel::Compile(program, 9, 0));  // sm_90 cubin
//   // or CudaEwKernel::CompileForCurrentDevice(program)
//   const float* ins[] = {x, bias};     // device pointers, dense row-major,
//   float* outs[] = {y, colsum};        //   shapes program.inputs / OutputShape(i)
//   RETURN_IF_ERROR(k->Run(ins, outs, stream));
//
// Targets: for an architecture NVRTC compiles for (nvrtcGetSupportedArchs),
// the image is a cubin for exactly sm_XY; it then runs on devices of the
// same major version and minor >= Y (cubin compatibility). For a newer
// architecture than NVRTC knows, the image is PTX for the newest one it does
// (compute_XY), which the driver compiles for the device at load time.
#ifndef BRAID_KERNELS_CUDA_EW_KERNEL_H_
#define BRAID_KERNELS_CUDA_EW_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cuda {

class CudaEwKernel {
 public:
  // The kernel of `p` for compute capability sm_major.sm_minor: from the
  // cache, or generated and compiled with NVRTC (no GPU needed).
  // InvalidArgument for an invalid program (ValidateProgram's message) or a
  // source NVRTC rejects (with its log); FailedPrecondition for an
  // architecture older than this NVRTC targets.
  static absl::StatusOr<std::shared_ptr<const CudaEwKernel>> Compile(const EwProgram& p, int sm_major,
                                                                     int sm_minor);
  // Compile for the current device's compute capability; FailedPrecondition
  // "no CUDA device: ..." without one.
  static absl::StatusOr<std::shared_ptr<const CudaEwKernel>> CompileForCurrentDevice(const EwProgram& p);

  ~CudaEwKernel();
  CudaEwKernel(const CudaEwKernel&) = delete;
  CudaEwKernel& operator=(const CudaEwKernel&) = delete;

  // Enqueues the kernels on `stream` (a cudaStream_t; a CUstream is the same
  // type) of the current device: input i holds Product(program().inputs[i])
  // floats, output j Product(program().OutputShape(j)) floats; outputs must
  // not overlap inputs or each other. Reducing outputs are initialized by
  // the kernel itself (no memset needed). InvalidArgument for wrong pointer
  // counts or null pointers; FailedPrecondition without a device or when the
  // image cannot run on this one (another architecture).
  absl::Status Run(absl::Span<const float* const> inputs, absl::Span<float* const> outputs,
                   cudaStream_t stream) const;

  const EwProgram& program() const { return program_; }
  const std::string& source() const { return source_; }
  // "sm_80" for a cubin, "compute_90" for PTX the driver finishes.
  const std::string& target() const { return target_; }
  bool is_ptx() const { return is_ptx_; }
  size_t image_size() const { return image_.size(); }
  int64_t points() const { return points_; }

 private:
  CudaEwKernel() = default;
  // Loads the image and checks `device` can run it, once per device.
  absl::Status Prepare(int device) const;
  absl::Status Launch(const char* name, const void* kernel, int64_t work, void** args, cudaStream_t stream,
                      int sm_count) const;

  EwProgram program_;
  std::string source_;
  std::string target_;
  CudaArch arch_;  // the architecture the image was built for
  bool is_ptx_ = false;
  std::string image_;  // cubin, or PTX with its terminating NUL
  int64_t points_ = 0;
  int64_t max_reduced_size_ = 0;  // largest reducing output (0: none)
  bool has_mean_ = false;

  mutable std::mutex mu_;
  mutable cudaLibrary_t library_ = nullptr;
  mutable cudaKernel_t main_ = nullptr, init_ = nullptr, finalize_ = nullptr;
  mutable std::vector<int> sm_count_;  // by device ordinal; 0 = not prepared yet
};

// Number of kernels in the process-wide compile cache (for tests).
size_t CudaEwKernelCacheSize();

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_EW_KERNEL_H_
