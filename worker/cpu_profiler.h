// The CPU profiler backend: measures real op times with LibTorch on one CPU
// thread (the way the CPU training executor runs each rank) and writes them to
// the profile store under device kind CpuDeviceKind() ("cpu-1t:<isa>:<CPU
// model>", costmodel::LocalCpuDeviceKind()). Op types without a LibTorch
// mapping fail with Unimplemented naming the type; the cost model falls back to
// its roofline estimate for them.
//
//   CpuProfiler profiler;                      // sets LibTorch to 1 thread
//   absl::StatusOr<OpProfile> p = profiler.ProfileOp(g, op_id);
//   // p->sample.median_s, p->sample.spread_s (IQR), p->aten ("at::convolution")
//
//   ProfileGraphReport r = *ProfileGraph(g, *store, {});   // every distinct op once
#ifndef BRAID_WORKER_CPU_PROFILER_H_
#define BRAID_WORKER_CPU_PROFILER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/profile_store.h"
#include <span>

#include "graph/graph.h"

namespace braid::worker {

// The profile-store device kind of the CPU profiler: one thread of this
// machine's CPU, "cpu-1t:<isa>:<CPU model>" (e.g. "cpu-1t:x86_64-avx512:AMD
// EPYC"; BRAID_CPU_DEVICE_KIND pins it). See costmodel::LocalCpuDeviceKind().
inline const std::string& CpuDeviceKind() { return costmodel::LocalCpuDeviceKind(); }

struct ProfileOptions {
  int warmup = 2;                   // untimed runs before measuring
  int repetitions = 11;             // timed samples per op
  int min_repetitions = 3;          // ... at least, even past the time budget
  double max_seconds_per_op = 2.0;  // stop sampling an op once this much is spent
  // Ops faster than this run several times per sample (averaged), so clock
  // resolution and call overhead do not dominate microsecond kernels.
  double min_sample_s = 200e-6;
};

struct OpProfile {
  costmodel::ProfileSample sample;  // median and IQR over samples, seconds per run
  std::string aten;                 // the ATen call(s) measured
};

class CpuProfiler {
 public:
  // Sets LibTorch's intra-op threads and OpenBLAS's threads to 1.
  explicit CpuProfiler(ProfileOptions options = {});

  // Measures op `op` of `g` on tensors of its shapes. Unimplemented for types
  // (or shapes) LibTorch cannot run on CPU; InvalidArgument naming the op when
  // LibTorch's result shape disagrees with the graph's.
  absl::StatusOr<OpProfile> ProfileOp(const graph::Graph& g, graph::OpId op) const;

  // Measures the fused kernel of `ops` (a group the CPU fusion backend
  // implements) run by braid's CPU fused executor (worker/fused_kernels.h),
  // on tensors of its shapes, the same way. Unimplemented when the backend
  // or the executor refuses the group.
  absl::StatusOr<OpProfile> ProfileFused(const graph::Graph& g,
                                         std::span<const graph::OpId> ops) const;

  // True when the type has a LibTorch mapping.
  static bool Supports(std::string_view op_type);

  const ProfileOptions& options() const { return options_; }

 private:
  ProfileOptions options_;
};

struct ProfileGraphReport {
  int profiled = 0;       // distinct (type, signature) measured and stored now
  int skipped = 0;        // distinct keys already in the store
  int unsupported = 0;    // distinct keys LibTorch has no mapping for (Unimplemented)
  int failed = 0;         // distinct keys whose measurement failed otherwise
  int communication = 0;  // collective ops: the collective benchmark's job
  std::vector<std::string> errors;  // one message per unsupported or failed key
};

// Profiles every distinct (op type, OpSignature) of `g` once, skipping keys
// already in `store` for CpuDeviceKind(). Fails only when the store cannot be
// written.
absl::StatusOr<ProfileGraphReport> ProfileGraph(const graph::Graph& g,
                                                costmodel::ProfileStore& store,
                                                const ProfileOptions& options = {});

// LibTorch's thread count and the BLAS it calls, e.g. "threads=1 blas=OpenBLAS
// 0.3.21 DYNAMIC_ARCH ... openblas_threads=1"; names the reference BLAS when
// OpenBLAS is not loaded (about 40x slower matmuls).
std::string CpuBackendInfo();

}  // namespace braid::worker

#endif  // BRAID_WORKER_CPU_PROFILER_H_
