#include "worker/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace braid::worker {
namespace {

absl::Status Make(absl::StatusCode code, std::string_view what, std::string_view name,
                  std::string_view text) {
  return absl::Status(
      code, absl::StrCat(std::string(what), ": ", std::string(name), ": ", std::string(text)));
}

}  // namespace

absl::StatusCode CudnnStatusCode(cudnnStatus_t e) {
  if (e == CUDNN_STATUS_SUCCESS) return absl::StatusCode::kOk;
  if (e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return absl::StatusCode::kResourceExhausted;
  }
  if (e == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER ||
      e == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH || e == CUDNN_STATUS_NOT_INITIALIZED ||
      e == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED ||
      e == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH) {
    return absl::StatusCode::kFailedPrecondition;
  }
  // cuDNN 9 groups its codes by thousands: 2xxx bad parameter, 3xxx not
  // supported, 4xxx internal, 5xxx execution failed.
  switch (CUDNN_STATUS_CATEGORY(e)) {
    case CUDNN_STATUS_BAD_PARAM:
      return absl::StatusCode::kInvalidArgument;
    case CUDNN_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode NcclStatusCode(ncclResult_t e) {
  switch (e) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclRemoteError:  // a peer died or the network failed
    case ncclSystemError:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudnnStatus(cudnnStatus_t e, std::string_view what) {
  if (e == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return Make(CudnnStatusCode(e), what, absl::StrCat("cudnnStatus ", static_cast<int>(e)),
              cudnnGetErrorString(e));
}

absl::Status NcclStatus(ncclResult_t e, std::string_view what) {
  if (e == ncclSuccess) return absl::OkStatus();
  return Make(NcclStatusCode(e), what, absl::StrCat("ncclResult ", static_cast<int>(e)),
              ncclGetErrorString(e));
}

}  // namespace braid::worker
