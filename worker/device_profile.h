// Picks the profiler backend a --device flag names, for the worker agent and
// the `braid profile` commands: "cpu" (LibTorch, device kind CpuDeviceKind(),
// "cpu-1t:<isa>:<CPU model>"),
// "cuda" / "cuda:N" (cuBLAS/cuDNN on GPU N, device kind "cuda:<name>"; builds
// with the CUDA toolkit only, run only where a GPU is), "auto" (GPU 0 when
// there is a usable one, else cpu).
//
//   absl::StatusOr<DeviceChoice> d = ResolveDevice("auto");
//   absl::StatusOr<ProfileGraphReport> r = ProfileGraphOnDevice(*d, g, *store, {});
//   absl::StatusOr<std::vector<CollectiveMeasurement>> m =
//       RunCommBenchOnDevice(*d, bench_options, store.get());   // Gloo or NCCL
#ifndef BRAID_WORKER_DEVICE_PROFILE_H_
#define BRAID_WORKER_DEVICE_PROFILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "worker/collective_bench.h"
#include "worker/cpu_profiler.h"

namespace braid::worker {

// What --device resolves to: the CPU, or GPU `ordinal` and its device kind.
struct DeviceChoice {
  bool cuda = false;
  int ordinal = 0;
  std::string kind;  // profile-store device kind
};

// InvalidArgument naming --device for an unknown value, for "cuda" in a build
// without the CUDA backend, and for "cuda" on a machine without a usable GPU
// (with the CUDA runtime's reason).
absl::StatusOr<DeviceChoice> ResolveDevice(const std::string& device);

// Every distinct op of `g` once on the chosen device (ProfileGraph or
// ProfileGraphCuda), skipping keys already stored.
absl::StatusOr<ProfileGraphReport> ProfileGraphOnDevice(const DeviceChoice& d,
                                                        const graph::Graph& g,
                                                        costmodel::ProfileStore& store,
                                                        const ProfileOptions& options);

// The collective benchmark of the device: Gloo between processes on the CPU,
// NCCL between GPUs (rank r on GPU ordinal + r). `options.device_kind` is the
// profile-store key of the cluster the samples describe.
absl::StatusOr<std::vector<CollectiveMeasurement>> RunCommBenchOnDevice(
    const DeviceChoice& d, const CollectiveBenchOptions& options, costmodel::ProfileStore* store);

}  // namespace braid::worker

#endif  // BRAID_WORKER_DEVICE_PROFILE_H_
