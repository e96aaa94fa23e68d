// The values a program generates, the same on every backend: a loaded
// tensor's full value (graph::LoadSpec) and Dropout's keep mask. Both come
// from counter-based hashes of (seed, element index) computed on the host, so
// the CPU backend, the CUDA backend and every sharding of a program draw the
// same numbers, and a world-1 run on a GPU can be checked against one on the
// CPU. LibTorch-free.
//
//   uint64_t key = SeedOf(program.seed, spec.source, spec.per_step ? step : -1);
//   absl::StatusOr<HostTensor> full = FullValue(spec, key);
//   HostTensor piece = NarrowHost(*full, mesh, coord, spec.dim_axes, spec.segments);
#ifndef BRAID_WORKER_RUNTIME_VALUES_H_
#define BRAID_WORKER_RUNTIME_VALUES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/program.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {

// FNV-1a of (seed, name, step): a key every process computes alike. Per-step
// loads pass the step, the others -1.
uint64_t SeedOf(uint64_t seed, std::string_view name, int64_t step);

// splitmix64's finalizer.
uint64_t SplitMix64(uint64_t z);

// `spec`'s full value drawn under `key`: kNormal standard normal (Box-Muller
// on two hashes per element), kUniform in [-bound, bound), kIntegers in
// [0, high) (held as floats: exact below 2^24), the constant kinds as
// stated. InvalidArgument when the full shape has a negative dim, more than
// 2^31 elements, or kValue's count differs from it.
absl::StatusOr<HostTensor> FullValue(const graph::LoadSpec& spec, uint64_t key);

// Dropout's keep mask (1 kept, 0 dropped) for this rank's piece `local` of
// op `op`'s output: element e of the full tensor is kept when the high 32
// bits of SplitMix64(key + e * golden) are at least ratio * 2^32, key =
// SeedOf(program seed, key_op, step). The op's "global_shape" and
// "piece_axes" attributes place the piece in the full tensor (without them
// the piece is the full tensor). InvalidArgument when they disagree with
// `local` or the mesh.
absl::StatusOr<std::vector<uint8_t>> KeepMask(const graph::Op& op, const std::string& key_op,
                                              const std::vector<int64_t>& local, double ratio,
                                              const RankContext& ctx);

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_VALUES_H_
