// The compiled form of an EwProgram for the CPU tile interpreter
// (fused_elementwise.h): what BuildPlan decides once so that running a tile
// is pointer arithmetic and calls to the vectorized loops. Private to
// fused_elementwise*.cc.
//
// The iteration space is coalesced first: size-1 dims are dropped and
// neighbouring dims that every input and every reduction treat alike (both
// broadcast or both full; both reduced or both kept) are merged, so a
// [64, 1024] + [1024] add is a 2-d space, and an elementwise program on
// same-shape inputs a 1-d one. The last coalesced dim is the "inner" dim,
// the product of the others the "rows". A tile is either `tile_rows` whole
// rows, or (when a row is longer than a tile) a `chunk` of one row.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, BuildPlan(program, options));
#ifndef BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_PLAN_H_
#define BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_PLAN_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/cpu/fused_elementwise_ops.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cpu::fused_elementwise_internal {

// Points per tile when the options give none: the first for programs whose
// data fits in cache, the second for those streaming more than
// kStreamingBytes (fused_elementwise_plan.cc says how they were measured).
extern const int64_t kCachedTileElems;
extern const int64_t kStreamingTileElems;
extern const int64_t kStreamingBytes;

enum class LoadMode : uint8_t {
  kUnused,    // no live instruction or output reads the input
  kFull,      // the input has every point: read in place at the tile's offset
  kConst,     // one value: a constant tile buffer filled once per run
  kPattern,   // depends on trailing dims only and tile_rows % period_rows == 0:
              // a constant tile buffer holding tile_rows / period_rows copies
  kPeriodic,  // depends on trailing dims only and period_rows % tile_rows == 0:
              // read in place at (first row % period_rows) * inner
  kStrided,   // anything else: rows gathered (copied or filled) per tile, or
              // read in place when the tile is a chunk of one row
};

struct InputPlan {
  LoadMode mode = LoadMode::kUnused;
  std::vector<int64_t> strides;  // per coalesced dim, in elements; 0 = broadcast
  int64_t numel = 1;
  int64_t period_rows = 0;  // kPattern, kPeriodic: rows one copy of the input spans
  int slot = -1;            // kConst, kPattern: constant buffer; kStrided: tile buffer
  int offsets = -1;         // kStrided: row-offset array
};

enum class OutputMode : uint8_t {
  kDirect,  // the producing instruction writes into the output tensor
  kCopy,    // copied from the register's tile values
  kSum,     // accumulated in double, rounded once at the end
  kMean,    // kSum divided by `count`
  kMax,     // max accumulated in the output tensor itself
};

struct OutputPlan {
  int reg = 0;
  OutputMode mode = OutputMode::kCopy;
  std::vector<int64_t> strides;  // reductions: per coalesced dim, 0 = reduced
  bool inner_reduced = false;    // the inner dim is summed within each row
  int64_t numel = 1;
  double count = 1;  // kMean: points reduced into each element
  int offsets = -1;  // reductions: row-offset array
};

struct StepPlan {
  EwOpFn fn = nullptr;
  int reg = 0;  // the register it writes
  int a, b, c;  // operand registers; absent ones name Plan::null_reg
  float p0 = 0, p1 = 0;
  int buffer = -1;           // tile buffer it writes, or -1 when direct_output >= 0
  int direct_output = -1;    // output tensor it writes in place
  std::vector<int> outputs;  // outputs (not kDirect) fed from `reg` after this step
};

struct Plan {
  EwIsa isa = EwIsa::kSse2;
  const EwLoops* loops = nullptr;
  std::vector<int64_t> dims;  // coalesced iteration space (at least one dim)
  int64_t inner = 1;          // dims.back()
  int64_t rows = 1;           // product of the other dims
  bool chunked = false;       // tiles are chunks of one row
  int64_t tile_rows = 1;      // rows per tile (1 when chunked)
  int64_t chunk = 1;          // tile length along the inner dim (inner unless chunked)
  int64_t tile_elems = 1;     // tile_rows * chunk: the length of every buffer
  int num_buffers = 0;        // tile buffers
  int num_consts = 0;         // constant buffers (kConst, kPattern inputs)
  int num_offsets = 0;        // row-offset arrays (kStrided inputs, reductions)
  bool prefetch = false;      // prefetch each next tile of kFull inputs and kDirect outputs
  int null_reg = 0;           // num_registers(): a register slot that stays null
  std::vector<InputPlan> inputs;
  std::vector<int> tiled_inputs;  // inputs whose tile pointer moves (kFull, kPeriodic, kStrided)
  std::vector<std::pair<int, int>> input_outputs;  // (input, output) written at tile start
  std::vector<StepPlan> steps;                     // live instructions, in order
  std::vector<OutputPlan> outputs;                 // program order
};

// `p` must have passed ValidateProgram.
absl::StatusOr<std::unique_ptr<Plan>> BuildPlan(const EwProgram& p,
                                                const FusedElementwiseOptions& options);

}  // namespace braid::kernels::cpu::fused_elementwise_internal

#endif  // BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_PLAN_H_
