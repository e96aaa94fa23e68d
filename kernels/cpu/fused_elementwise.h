// The CPU executor of fused elementwise/reduction programs (ew_program.h): a
// vectorized tile interpreter. A program is compiled once into a plan (dims
// coalesced, each input's load mode, buffers assigned by liveness, dead
// instructions dropped) and run single-threaded, tile by tile: per tile the
// inputs are loaded (read in place when contiguous, broadcast into a tile
// buffer otherwise), every instruction is one tight SIMD loop over the tile
// (fused_elementwise_ops.h), and outputs are written or accumulated while the
// tile is still in cache. One pass over memory instead of one per op is where
// the speed-up over LibTorch's op-by-op execution comes from. Tiles are
// 1024 points for data that fits in cache, 256 points with the next tile
// prefetched for data streamed from DRAM (fused_elementwise_plan.cc).
// Sums and means (over any set of axes) accumulate in double.
//
//   EwProgram p;
//   p.shape = {64, 1024};
//   p.inputs = {{64, 1024}, {1024}};
//   p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 2}};
//   p.outputs = {{3}, {3, ReduceKind::kSum, {0}}};
//   ASSIGN_OR_RETURN(auto kernel, FusedElementwiseKernel::Get(p));
//   std::vector<at::Tensor> in = {x, bias};  // float32 [64, 1024] and [1024]
//   ASSIGN_OR_RETURN(std::vector<at::Tensor> out, kernel->Run(in));
//   // out[0]: relu(x + bias) [64, 1024]; out[1]: its column sums [1, 1024]
#ifndef BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_H_
#define BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/fused_elementwise_ops.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cpu {

// Knobs for measurements and tests; Get uses the defaults.
struct FusedElementwiseOptions {
  // Target points per tile; 0: chosen from the program's size
  // (fused_elementwise_plan.cc says how the sizes were measured).
  int64_t tile_elems = 0;
  // Instruction-set variant of the loops (kAuto: the widest the CPU has).
  EwIsa isa = EwIsa::kAuto;
  // Software prefetch of each next tile's inputs and outputs: kAuto turns it
  // on for programs whose data streams from DRAM (fused_elementwise_plan.cc).
  enum class Prefetch : uint8_t { kAuto, kOff, kOn };
  Prefetch prefetch = Prefetch::kAuto;
};

namespace fused_elementwise_internal {
struct Plan;
}  // namespace fused_elementwise_internal

// A compiled program, shared and immutable; Run is thread-safe.
class FusedElementwiseKernel {
 public:
  // Validates (ValidateProgram) and compiles once per EwProgram::Signature();
  // later calls return the cached kernel (process-wide cache, mutex-protected).
  static absl::StatusOr<std::shared_ptr<const FusedElementwiseKernel>> Get(const EwProgram& p);
  // Compiles without the cache (benchmarks, tests of tiling and variants).
  static absl::StatusOr<std::shared_ptr<const FusedElementwiseKernel>> Compile(
      const EwProgram& p, const FusedElementwiseOptions& options);

  // inputs: float32 CPU tensors with exactly the program's input shapes, any
  // strides (non-contiguous ones are copied first). Returns one float32
  // contiguous tensor per output, of EwProgram::OutputShape(i).
  // InvalidArgument naming the input on a count, dtype, device or shape
  // mismatch.
  absl::StatusOr<std::vector<at::Tensor>> Run(std::span<const at::Tensor> inputs) const;
  // Same, writing into caller-provided contiguous float32 CPU outputs of the
  // right shapes, which must not overlap the inputs or each other.
  absl::Status RunInto(std::span<const at::Tensor> inputs, std::span<at::Tensor> outputs) const;

  const EwProgram& program() const { return program_; }
  // What the plan chose (for reports): points per tile, tile buffers,
  // loop variant, software prefetch.
  int64_t tile_elems() const;
  int num_buffers() const;
  EwIsa isa() const;
  bool prefetch() const;

  ~FusedElementwiseKernel();
  FusedElementwiseKernel(const FusedElementwiseKernel&) = delete;
  FusedElementwiseKernel& operator=(const FusedElementwiseKernel&) = delete;

 private:
  FusedElementwiseKernel(EwProgram program, std::unique_ptr<fused_elementwise_internal::Plan> plan);

  // The tile loop, on checked, contiguous inputs and outputs.
  void Execute(std::span<const at::Tensor> inputs, std::span<at::Tensor> outputs) const;

  EwProgram program_;
  std::unique_ptr<const fused_elementwise_internal::Plan> plan_;
};

}  // namespace braid::kernels::cpu

#endif  // BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_H_
