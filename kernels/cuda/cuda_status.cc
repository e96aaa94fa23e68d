#include "kernels/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::kernels::cuda {
namespace {

absl::Status Make(absl::StatusCode code, std::string_view what, std::string_view name,
                  std::string_view text) {
  return absl::Status(code,
                      absl::StrCat(std::string(what), ": ", std::string(name), ": ", std::string(text)));
}

}  // namespace

absl::StatusCode CudaStatusCode(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    // The machine cannot run CUDA (no GPU, no or old driver, stub libcuda),
    // or not this image (a cubin for another architecture).
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorJitCompilerNotFound:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNotSupported:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode NvrtcStatusCode(nvrtcResult e) {
  switch (e) {
    case NVRTC_SUCCESS:
      return absl::StatusCode::kOk;
    case NVRTC_ERROR_OUT_OF_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    // Bad options (an architecture this NVRTC does not know) or source that
    // does not compile: the generator produced it, so the caller's program
    // or arch is what was wrong.
    case NVRTC_ERROR_INVALID_INPUT:
    case NVRTC_ERROR_INVALID_OPTION:
    case NVRTC_ERROR_COMPILATION:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CublasStatusCode(cublasStatus_t e) {
  switch (e) {
    case CUBLAS_STATUS_SUCCESS:
      return absl::StatusCode::kOk;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::StatusCode::kFailedPrecondition;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return Make(CudaStatusCode(e), what, cudaGetErrorName(e), cudaGetErrorString(e));
}

absl::Status NvrtcStatus(nvrtcResult e, std::string_view what) {
  if (e == NVRTC_SUCCESS) return absl::OkStatus();
  return Make(NvrtcStatusCode(e), what, absl::StrCat("nvrtcResult ", static_cast<int>(e)),
              nvrtcGetErrorString(e));
}

absl::Status CublasStatus(cublasStatus_t e, std::string_view what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  // The cuBLASLt library has its own copies of the name/string functions, so
  // this target does not need libcublas.
  return Make(CublasStatusCode(e), what, cublasLtGetStatusName(e), cublasLtGetStatusString(e));
}

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // Whatever the runtime's reason (no driver, stub library, no GPU), the
    // caller's answer is the same: this machine cannot run CUDA kernels.
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
  }
  if (n == 0) return absl::FailedPreconditionError("no CUDA device: the driver reports 0 devices");
  return n;
}

absl::StatusOr<CudaArch> CurrentDeviceArch() {
  RETURN_IF_ERROR(CudaDeviceCount());
  int dev = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&dev), "cudaGetDevice"));
  CudaArch arch;
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&arch.major, cudaDevAttrComputeCapabilityMajor, dev),
                             "cudaDeviceGetAttribute(ComputeCapabilityMajor)"));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&arch.minor, cudaDevAttrComputeCapabilityMinor, dev),
                             "cudaDeviceGetAttribute(ComputeCapabilityMinor)"));
  return arch;
}

}  // namespace braid::kernels::cuda
