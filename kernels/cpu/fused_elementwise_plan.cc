#include "kernels/cpu/fused_elementwise_plan.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace braid::kernels::cpu::fused_elementwise_internal {

// Tile sizes and prefetch, measured on the 2-vCPU Zen 4 build VM (32 KiB L1d
// and 1 MiB L2 per core, 32 MiB L3) with `braid-fused-elementwise-bench
// --tile-sweep [--points N]`. The 8-op add/mul/relu/max chain (3 full
// inputs, a row vector, one output), RunInto median ms, software prefetch
// off / on:
//
//   points per tensor (MiB in+out)  tile 128   256        512        1024       4096
//   64 Ki  (1, stays in cache)           .064/.074  .049/.053  .039/.043  .034/.040  .051/.057
//   512 Ki (8, stays in L3)              .54/.63    .41/.44    .37/.37    .41/.33    .54/.52
//   2 Mi   (32, from DRAM)               2.15/2.48  2.32/1.85  2.52/1.49  3.04/1.81  3.35/3.35
//
// Data that stays in cache wants tiles of 1-2 Ki points and no prefetch:
// each instruction is one call over the tile, and below that the per-call
// cost shows, while above 2 Ki the live buffers (2 to 4 of 8 KiB) and the
// tile of each input no longer fit in L1. Data streamed from DRAM wants
// short tiles with the next tile prefetched: each input is read by one
// instruction per tile, so without help its misses come in one burst per
// tile that the hardware prefetchers (a few lines ahead of demand accesses)
// do not hide; prefetching the next tile a slice per instruction spreads
// the misses over the chain's arithmetic. Over the benchmark's four 2 Mi-
// point chains, 256 points with prefetch has the lowest total (7.2 ms; 512
// with prefetch 7.4, 128 without 7.9): it is the fastest setting for the
// 4-op and 6-op chains, 24% behind 512 for this one, and 11% behind 128
// without prefetch for the 1-step relu_grad + column sum, whose prefetch
// cannot be spread over several instructions.
const int64_t kCachedTileElems = 1024;
const int64_t kStreamingTileElems = 256;
// Bytes read and written per run above which the data is taken to stream
// from DRAM rather than stay in cache: half the L3 of the measuring host.
const int64_t kStreamingBytes = int64_t{16} << 20;

namespace {

// Vector loops run best on whole SIMD widths; chunk lengths are multiples of
// this (64 bytes: one AVX-512 vector, one cache line).
constexpr int64_t kChunkAlign = 16;

struct Coalesced {
  std::vector<int64_t> dims;
  // full[e][d]: entity e (inputs, then outputs) varies along coalesced dim d.
  std::vector<std::vector<bool>> full;
};

// Drops size-1 dims and merges neighbours every entity treats alike.
Coalesced Coalesce(const EwProgram& p) {
  const size_t rank = p.shape.size();
  const size_t n_in = p.inputs.size();
  const size_t n_ent = n_in + p.outputs.size();
  Coalesced c;
  c.full.resize(n_ent);
  std::vector<bool> last_key;
  for (size_t d = 0; d < rank; ++d) {
    if (p.shape[d] == 1) continue;
    std::vector<bool> key(n_ent);
    for (size_t i = 0; i < n_in; ++i) {
      const std::vector<int64_t>& in = p.inputs[i];
      const size_t lead = rank - in.size();
      key[i] = d >= lead && in[d - lead] == p.shape[d];
    }
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const std::vector<int>& axes = p.outputs[o].axes;
      key[n_in + o] = std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end();
    }
    if (!c.dims.empty() && key == last_key) {
      c.dims.back() *= p.shape[d];
      continue;
    }
    c.dims.push_back(p.shape[d]);
    for (size_t e = 0; e < n_ent; ++e) c.full[e].push_back(key[e]);
    last_key = std::move(key);
  }
  if (c.dims.empty()) {  // a single point
    c.dims.push_back(1);
    for (auto& f : c.full) f.push_back(false);
  }
  return c;
}

// Element strides of a contiguous tensor that varies along the `full` dims.
std::vector<int64_t> Strides(const std::vector<int64_t>& dims, const std::vector<bool>& full) {
  std::vector<int64_t> s(dims.size(), 0);
  int64_t run = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (full[d]) {
      s[d] = run;
      run *= dims[d];
    }
  }
  return s;
}

// Rows per period when the input depends on a (non-empty) suffix of the
// coalesced dims that includes the inner dim, else 0.
int64_t PeriodRows(const std::vector<int64_t>& dims, const std::vector<bool>& full) {
  const size_t m = dims.size();
  if (!full[m - 1]) return 0;
  size_t k = m - 1;
  while (k > 0 && full[k - 1]) --k;
  for (size_t d = 0; d < k; ++d) {
    if (full[d]) return 0;
  }
  int64_t q = 1;
  for (size_t d = k; d + 1 < m; ++d) q *= dims[d];
  return q;
}

// Rows per tile near `target` rows: the largest in [target/2, target] that
// lets the most periodic inputs be read without a gather.
int64_t ChooseTileRows(int64_t target, int64_t rows, const std::vector<int64_t>& periods) {
  target = std::max<int64_t>(1, std::min(target, rows));
  int64_t best = target;
  int best_score = -1;
  for (int64_t r = target; r >= std::max<int64_t>(1, target / 2); --r) {
    int score = 0;
    for (int64_t q : periods) score += (r % q == 0 || q % r == 0) ? 1 : 0;
    if (score > best_score) {
      best_score = score;
      best = r;
    }
  }
  return best;
}

// Tile buffers handed out and returned in LIFO order, so that a new value
// lands in the buffer most recently freed, the one likeliest still in L1.
class BufferPool {
 public:
  int Take() {
    if (free_.empty()) return count_++;
    const int b = free_.back();
    free_.pop_back();
    return b;
  }
  void Give(int b) {
    if (b >= 0) free_.push_back(b);
  }
  int count() const { return count_; }

 private:
  std::vector<int> free_;
  int count_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Plan>> BuildPlan(const EwProgram& p,
                                                const FusedElementwiseOptions& options) {
  if (options.tile_elems < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tile_elems ", options.tile_elems, " < 0"));
  }
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    // ValidateProgram does not range-check the enum.
    if (p.outputs[o].reduce > ReduceKind::kMax) {
      return absl::InvalidArgumentError(absl::StrCat("output ", o, " has an unknown reduce kind"));
    }
  }
  auto plan = std::make_unique<Plan>();
  plan->isa = ResolveEwIsa(options.isa);
  plan->loops = &GetEwLoops(plan->isa);
  const int n_in = static_cast<int>(p.inputs.size());
  const int n_out = static_cast<int>(p.outputs.size());
  const int n_reg = p.num_registers();

  Coalesced co = Coalesce(p);
  plan->dims = co.dims;
  const size_t m = co.dims.size();
  plan->inner = co.dims[m - 1];
  for (size_t d = 0; d + 1 < m; ++d) plan->rows *= co.dims[d];
  const int64_t points = plan->rows * plan->inner;

  // Liveness: a register is live if an output or a live instruction reads
  // it; last_read is the last live step reading it (-1: outputs only).
  std::vector<bool> live(static_cast<size_t>(n_reg), false);
  for (const EwOutput& o : p.outputs) live[static_cast<size_t>(o.reg)] = true;
  for (int k = static_cast<int>(p.instrs.size()) - 1; k >= 0; --k) {
    if (!live[static_cast<size_t>(n_in + k)]) continue;
    const EwInstr& in = p.instrs[static_cast<size_t>(k)];
    for (int r : {in.a, in.b, in.c}) {
      if (r >= 0) live[static_cast<size_t>(r)] = true;
    }
  }
  std::vector<int> last_read(static_cast<size_t>(n_reg), -1);
  std::vector<int> live_steps;
  for (int k = 0; k < static_cast<int>(p.instrs.size()); ++k) {
    if (!live[static_cast<size_t>(n_in + k)]) continue;
    const EwInstr& in = p.instrs[static_cast<size_t>(k)];
    for (int r : {in.a, in.b, in.c}) {
      if (r >= 0) last_read[static_cast<size_t>(r)] = static_cast<int>(live_steps.size());
    }
    live_steps.push_back(k);
  }

  // Input strides and the periods that tile sizing should respect.
  plan->inputs.resize(static_cast<size_t>(n_in));
  std::vector<int64_t> periods;
  for (int i = 0; i < n_in; ++i) {
    InputPlan& ip = plan->inputs[static_cast<size_t>(i)];
    ip.strides = Strides(co.dims, co.full[static_cast<size_t>(i)]);
    for (int64_t d : p.inputs[static_cast<size_t>(i)]) ip.numel *= d;
    if (!live[static_cast<size_t>(i)]) continue;
    if (ip.numel == points) {
      ip.mode = LoadMode::kFull;
    } else if (ip.numel == 1) {
      ip.mode = LoadMode::kConst;
    } else if (int64_t q = PeriodRows(co.dims, co.full[static_cast<size_t>(i)]); q > 0) {
      ip.mode = LoadMode::kPeriodic;  // settled below, once tile_rows is known
      ip.period_rows = q;
      periods.push_back(q);
    } else {
      ip.mode = LoadMode::kStrided;
    }
  }

  // Tiling.
  int64_t target = options.tile_elems;
  bool streaming = false;
  {
    double bytes = 0;
    for (int i = 0; i < n_in; ++i) {
      if (live[static_cast<size_t>(i)]) {
        bytes += 4.0 * static_cast<double>(plan->inputs[static_cast<size_t>(i)].numel);
      }
    }
    for (int o = 0; o < n_out; ++o) {
      double numel = 1;
      for (int64_t d : p.OutputShape(o)) numel *= static_cast<double>(d);
      bytes += 4.0 * numel;
    }
    streaming = bytes > static_cast<double>(kStreamingBytes);
  }
  if (target == 0) target = streaming ? kStreamingTileElems : kCachedTileElems;
  using Prefetch = FusedElementwiseOptions::Prefetch;
  plan->prefetch =
      options.prefetch == Prefetch::kOn || (options.prefetch == Prefetch::kAuto && streaming);
  if (plan->inner > target) {
    plan->chunked = true;
    const int64_t pieces = (plan->inner + target - 1) / target;
    int64_t chunk = (plan->inner + pieces - 1) / pieces;
    chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    plan->chunk = std::min(chunk, plan->inner);
    plan->tile_rows = 1;
  } else {
    plan->chunk = plan->inner;
    plan->tile_rows = ChooseTileRows(target / plan->inner, plan->rows, periods);
  }
  plan->tile_elems = plan->tile_rows * plan->chunk;

  // Load modes that depend on tile_rows; buffers for inputs live from the
  // tile start to their last read.
  BufferPool pool;
  for (int i = 0; i < n_in; ++i) {
    InputPlan& ip = plan->inputs[static_cast<size_t>(i)];
    if (ip.mode == LoadMode::kPeriodic) {
      if (ip.period_rows % plan->tile_rows == 0) {
        // kPeriodic stays: a tile never straddles two copies.
      } else if (plan->tile_rows % ip.period_rows == 0) {
        ip.mode = LoadMode::kPattern;
      } else {
        ip.mode = LoadMode::kStrided;
      }
    }
    if (ip.mode == LoadMode::kConst || ip.mode == LoadMode::kPattern) ip.slot = plan->num_consts++;
    if (ip.mode == LoadMode::kStrided) {
      ip.offsets = plan->num_offsets++;
      // One-row tiles read an inner-contiguous input in place.
      const bool in_place = plan->tile_rows == 1 && ip.strides.back() != 0;
      if (!in_place) ip.slot = pool.Take();
    }
  }
  plan->null_reg = n_reg;
  for (int i = 0; i < n_in; ++i) {
    const LoadMode mode = plan->inputs[static_cast<size_t>(i)].mode;
    if (mode == LoadMode::kFull || mode == LoadMode::kPeriodic || mode == LoadMode::kStrided) {
      plan->tiled_inputs.push_back(i);
    }
  }

  // Outputs: reductions get strides and a row-offset array; whole outputs
  // are written by their producing instruction when it is an instruction
  // (the first such output of a register), else copied.
  plan->outputs.resize(static_cast<size_t>(n_out));
  std::vector<int> direct_of_reg(static_cast<size_t>(n_reg), -1);
  for (int o = 0; o < n_out; ++o) {
    const EwOutput& eo = p.outputs[static_cast<size_t>(o)];
    OutputPlan& op = plan->outputs[static_cast<size_t>(o)];
    op.reg = eo.reg;
    for (int64_t d : p.OutputShape(o)) op.numel *= d;
    if (eo.reduce == ReduceKind::kNone) {
      if (eo.reg >= n_in && direct_of_reg[static_cast<size_t>(eo.reg)] < 0) {
        op.mode = OutputMode::kDirect;
        direct_of_reg[static_cast<size_t>(eo.reg)] = o;
      } else {
        op.mode = OutputMode::kCopy;
      }
    } else {
      op.mode = eo.reduce == ReduceKind::kSum    ? OutputMode::kSum
                : eo.reduce == ReduceKind::kMean ? OutputMode::kMean
                                                 : OutputMode::kMax;
      op.strides = Strides(co.dims, co.full[static_cast<size_t>(n_in + o)]);
      op.inner_reduced = op.strides.back() == 0;
      for (int ax : eo.axes) op.count *= static_cast<double>(p.shape[static_cast<size_t>(ax)]);
      op.offsets = plan->num_offsets++;
    }
    if (eo.reg < n_in) plan->input_outputs.emplace_back(eo.reg, o);
  }
  // Gathered inputs only written out (never read by a step) free their tile
  // buffer at once.
  for (int i = 0; i < n_in; ++i) {
    const InputPlan& ip = plan->inputs[static_cast<size_t>(i)];
    if (ip.mode == LoadMode::kStrided && last_read[static_cast<size_t>(i)] < 0) pool.Give(ip.slot);
  }

  std::vector<int> buffer_of(static_cast<size_t>(n_reg), -1);
  for (int i = 0; i < n_in; ++i) {
    const InputPlan& ip = plan->inputs[static_cast<size_t>(i)];
    if (ip.mode == LoadMode::kStrided) buffer_of[static_cast<size_t>(i)] = ip.slot;
  }
  for (int s = 0; s < static_cast<int>(live_steps.size()); ++s) {
    const int k = live_steps[static_cast<size_t>(s)];
    const EwInstr& in = p.instrs[static_cast<size_t>(k)];
    StepPlan st;
    st.fn = plan->loops->op[static_cast<int>(in.code)];
    st.reg = n_in + k;
    st.a = in.a >= 0 ? in.a : n_reg;
    st.b = in.b >= 0 ? in.b : n_reg;
    st.c = in.c >= 0 ? in.c : n_reg;
    st.p0 = in.p0;
    st.p1 = in.p1;
    st.direct_output = direct_of_reg[static_cast<size_t>(st.reg)];
    // Taken before the operands are freed: the loops assume out does not
    // alias an operand (restrict), which keeps them free of overlap checks.
    if (st.direct_output < 0) st.buffer = pool.Take();
    buffer_of[static_cast<size_t>(st.reg)] = st.buffer;
    for (int o = 0; o < n_out; ++o) {
      if (p.outputs[static_cast<size_t>(o)].reg == st.reg && o != st.direct_output) {
        st.outputs.push_back(o);
      }
    }
    for (int r : {in.a, in.b, in.c}) {
      // Once per register even when it is several operands.
      if (r >= 0 && last_read[static_cast<size_t>(r)] == s) {
        pool.Give(buffer_of[static_cast<size_t>(r)]);
        buffer_of[static_cast<size_t>(r)] = -1;
      }
    }
    if (last_read[static_cast<size_t>(st.reg)] < 0) pool.Give(st.buffer);
    plan->steps.push_back(std::move(st));
  }
  plan->num_buffers = pool.count();
  return plan;
}

}  // namespace braid::kernels::cpu::fused_elementwise_internal
