#include "worker/device_profile.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#ifdef BRAID_HAVE_CUDA
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_profiler.h"
#include "worker/cuda/nccl_bench.h"
#endif

namespace braid::worker {

absl::StatusOr<DeviceChoice> ResolveDevice(const std::string& device) {
  const bool cuda = device == "cuda" || absl::StartsWith(device, "cuda:");
  if (device == "cpu") return DeviceChoice{false, 0, CpuDeviceKind()};
  if (device != "auto" && !cuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device: '", device, "' has no profiler backend (supported: cpu, cuda, cuda:N, auto)"));
  }
  int ordinal = 0;
  if (absl::StartsWith(device, "cuda:") && !absl::SimpleAtoi(device.substr(5), &ordinal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: '", device, "': the GPU ordinal after 'cuda:' is not a number"));
  }
#ifdef BRAID_HAVE_CUDA
  absl::StatusOr<CudaDeviceInfo> d = FindCudaDevice(ordinal);
  if (d.ok()) return DeviceChoice{true, ordinal, d->kind};
  if (device == "auto") return DeviceChoice{false, 0, CpuDeviceKind()};
  // A configuration error for this machine, like an unknown device name.
  return absl::InvalidArgumentError(
      absl::StrCat("--device: '", device, "': ", std::string(d.status().message())));
#else
  if (device == "auto") return DeviceChoice{false, 0, CpuDeviceKind()};
  return absl::InvalidArgumentError(absl::StrCat(
      "--device: '", device,
      "': this build has no CUDA backend (it was built without the CUDA toolkit)"));
#endif
}

absl::StatusOr<ProfileGraphReport> ProfileGraphOnDevice(const DeviceChoice& d,
                                                        const graph::Graph& g,
                                                        costmodel::ProfileStore& store,
                                                        const ProfileOptions& options) {
#ifdef BRAID_HAVE_CUDA
  if (d.cuda) return ProfileGraphCuda(g, store, options, d.ordinal);
#endif
  if (d.cuda) return absl::FailedPreconditionError("this build has no CUDA backend");
  return ProfileGraph(g, store, options);
}

absl::StatusOr<std::vector<CollectiveMeasurement>> RunCommBenchOnDevice(
    const DeviceChoice& d, const CollectiveBenchOptions& options, costmodel::ProfileStore* store) {
#ifdef BRAID_HAVE_CUDA
  if (d.cuda) {
    NcclBenchOptions o;
    o.ranks = options.ranks;
    o.sizes = options.sizes;
    o.warmup = options.warmup;
    o.repetitions = options.repetitions;
    o.first_device = d.ordinal;
    o.device_kind = options.device_kind;
    o.timeout_s = options.timeout_s;
    return RunNcclBench(o, store);
  }
#endif
  if (d.cuda) return absl::FailedPreconditionError("this build has no CUDA backend");
  return RunCollectiveBench(options, store);
}

}  // namespace braid::worker
