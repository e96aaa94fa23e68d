#include "kernels/cpu/fused_elementwise.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "kernels/cpu/fused_elementwise_plan.h"

namespace braid::kernels::cpu {

using fused_elementwise_internal::InputPlan;
using fused_elementwise_internal::LoadMode;
using fused_elementwise_internal::OutputMode;
using fused_elementwise_internal::OutputPlan;
using fused_elementwise_internal::Plan;
using fused_elementwise_internal::StepPlan;

namespace {

// Compiled kernels are few (one per fusion group and shape) and small; the
// cap only guards against a caller that generates unbounded distinct shapes,
// whose kernels are then compiled per call instead of cached.
constexpr size_t kMaxCachedKernels = 4096;

struct KernelCache {
  absl::Mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const FusedElementwiseKernel>> kernels
      ABSL_GUARDED_BY(mu);
};

KernelCache& Cache() {
  static KernelCache* cache = new KernelCache();  // never destroyed: used until exit
  return *cache;
}

// Per-thread scratch (tile buffers, constant buffers, row offsets), grown on
// demand and reused across runs: a run allocates little beyond its outputs
// (and the double accumulators of sums).
class Scratch {
 public:
  // Floats per buffer, rounded to whole cache lines so each buffer starts
  // 64-byte aligned.
  static int64_t Stride(int64_t tile_elems) { return (tile_elems + 15) / 16 * 16; }

  void Reserve(int64_t floats, int64_t offsets) {
    if (floats > float_cap_) {
      floats_.reset(new float[static_cast<size_t>(floats + 16)]);
      float_cap_ = floats;
    }
    if (offsets > static_cast<int64_t>(offsets_.size())) {
      offsets_.resize(static_cast<size_t>(offsets));
    }
  }
  float* floats() {
    auto p = reinterpret_cast<uintptr_t>(floats_.get());
    return reinterpret_cast<float*>((p + 63) / 64 * 64);
  }
  int64_t* offsets() { return offsets_.data(); }

 private:
  std::unique_ptr<float[]> floats_;
  int64_t float_cap_ = 0;
  std::vector<int64_t> offsets_;
};

// Element offsets of rows r0 .. r0 + n - 1 of the coalesced space (all dims
// but the inner one) for an entity with `strides`: an odometer over the row
// dims, so the cost is O(n + rank) rather than a division per row.
void RowOffsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t r0,
                int64_t n, int64_t* out) {
  const int rd = static_cast<int>(dims.size()) - 1;  // row dims: 0 .. rd-1
  if (rd == 0) {
    std::fill(out, out + n, 0);
    return;
  }
  int64_t idx[64];  // coalesced rank <= program rank, bounded by 2^40 points
  int64_t off = 0;
  int64_t rem = r0;
  for (int d = rd - 1; d >= 0; --d) {
    idx[d] = rem % dims[static_cast<size_t>(d)];
    rem /= dims[static_cast<size_t>(d)];
    off += idx[d] * strides[static_cast<size_t>(d)];
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = off;
    int d = rd - 1;
    ++idx[d];
    off += strides[static_cast<size_t>(d)];
    while (d > 0 && idx[d] == dims[static_cast<size_t>(d)]) {  // carry
      off -= idx[d] * strides[static_cast<size_t>(d)];
      idx[d] = 0;
      --d;
      ++idx[d];
      off += strides[static_cast<size_t>(d)];
    }
  }
}

std::string ShapeText(c10::IntArrayRef s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }

absl::Status CheckTensor(const char* what, int i, const at::Tensor& t,
                         const std::vector<int64_t>& shape) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(what, " ", i, " is undefined"));
  if (t.scalar_type() != at::kFloat || !t.device().is_cpu() || t.layout() != at::kStrided) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", i, " is ", std::string(c10::toString(t.scalar_type())), " on ",
                     t.device().str(), "; want a strided float32 CPU tensor"));
  }
  if (t.sizes() != c10::IntArrayRef(shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", i, " has shape ", ShapeText(t.sizes()), ", want ", ShapeText(shape)));
  }
  return absl::OkStatus();
}

bool Overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  const auto* a1 = a0 + a.numel() * 4;
  const auto* b1 = b0 + b.numel() * 4;
  return a0 < b1 && b0 < a1;
}

}  // namespace

FusedElementwiseKernel::FusedElementwiseKernel(EwProgram program, std::unique_ptr<Plan> plan)
    : program_(std::move(program)), plan_(std::move(plan)) {}
FusedElementwiseKernel::~FusedElementwiseKernel() = default;

int64_t FusedElementwiseKernel::tile_elems() const { return plan_->tile_elems; }
int FusedElementwiseKernel::num_buffers() const { return plan_->num_buffers; }
EwIsa FusedElementwiseKernel::isa() const { return plan_->isa; }
bool FusedElementwiseKernel::prefetch() const { return plan_->prefetch; }

absl::StatusOr<std::shared_ptr<const FusedElementwiseKernel>> FusedElementwiseKernel::Compile(
    const EwProgram& p, const FusedElementwiseOptions& options) {
  RETURN_IF_ERROR(ValidateProgram(p));
  ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, fused_elementwise_internal::BuildPlan(p, options));
  return std::shared_ptr<const FusedElementwiseKernel>(
      new FusedElementwiseKernel(p, std::move(plan)));
}

absl::StatusOr<std::shared_ptr<const FusedElementwiseKernel>> FusedElementwiseKernel::Get(
    const EwProgram& p) {
  RETURN_IF_ERROR(ValidateProgram(p));
  const std::string key = p.Signature();
  KernelCache& cache = Cache();
  // Compiling is microseconds of planning, so it happens under the lock:
  // two threads asking for one program get one kernel.
  absl::MutexLock lock(&cache.mu);
  if (auto it = cache.kernels.find(key); it != cache.kernels.end()) return it->second;
  ASSIGN_OR_RETURN(std::shared_ptr<const FusedElementwiseKernel> k,
                   Compile(p, FusedElementwiseOptions{}));
  if (cache.kernels.size() < kMaxCachedKernels) cache.kernels.emplace(key, k);
  return k;
}

absl::StatusOr<std::vector<at::Tensor>> FusedElementwiseKernel::Run(
    std::span<const at::Tensor> inputs) const {
  std::vector<at::Tensor> outputs;
  try {
    for (int o = 0; o < static_cast<int>(program_.outputs.size()); ++o) {
      outputs.push_back(at::empty(program_.OutputShape(o), at::TensorOptions().dtype(at::kFloat)));
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fused elementwise outputs: ", e.what_without_backtrace()));
  }
  RETURN_IF_ERROR(RunInto(inputs, outputs));
  return outputs;
}

absl::Status FusedElementwiseKernel::RunInto(std::span<const at::Tensor> inputs,
                                             std::span<at::Tensor> outputs) const {
  const EwProgram& p = program_;
  if (inputs.size() != p.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", inputs.size(), " inputs, the program takes ", p.inputs.size()));
  }
  if (outputs.size() != p.outputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", outputs.size(), " outputs, the program has ", p.outputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(CheckTensor("input", static_cast<int>(i), inputs[i], p.inputs[i]));
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    RETURN_IF_ERROR(
        CheckTensor("output", static_cast<int>(o), outputs[o], p.OutputShape(static_cast<int>(o))));
    if (!outputs[o].is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat("output ", o, " is not contiguous"));
    }
    for (size_t j = 0; j < o; ++j) {
      if (Overlap(outputs[o], outputs[j])) {
        return absl::InvalidArgumentError(absl::StrCat("output ", o, " overlaps output ", j));
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      // Non-contiguous inputs are copied before any output is written.
      if (inputs[i].is_contiguous() && Overlap(outputs[o], inputs[i])) {
        return absl::InvalidArgumentError(absl::StrCat("output ", o, " overlaps input ", i));
      }
    }
  }
  try {
    // Contiguous copies only of inputs that need them; a copy cannot
    // overlap an output, so the check above on the originals suffices.
    std::vector<at::Tensor> contiguous(inputs.begin(), inputs.end());
    for (at::Tensor& t : contiguous) {
      if (!t.is_contiguous()) t = t.contiguous();
    }
    Execute(contiguous, outputs);
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("fused elementwise run: ", e.what_without_backtrace()));
  }
}

void FusedElementwiseKernel::Execute(std::span<const at::Tensor> inputs,
                                     std::span<at::Tensor> outputs) const {
  const Plan& P = *plan_;
  const EwLoops& loops = *P.loops;
  const int n_in = static_cast<int>(P.inputs.size());
  const int n_out = static_cast<int>(P.outputs.size());
  const int64_t stride = Scratch::Stride(P.tile_elems);

  thread_local Scratch scratch;
  scratch.Reserve(stride * (P.num_buffers + P.num_consts), P.num_offsets * P.tile_rows);
  float* const buffers = scratch.floats();
  float* const consts = buffers + stride * P.num_buffers;
  int64_t* const offsets = scratch.offsets();
  auto buffer = [&](int b) { return buffers + stride * b; };
  auto offsets_of = [&](int slot) { return offsets + slot * P.tile_rows; };

  std::vector<const float*> in_base(static_cast<size_t>(n_in));
  for (int i = 0; i < n_in; ++i) {
    const InputPlan& ip = P.inputs[static_cast<size_t>(i)];
    const float* base = inputs[static_cast<size_t>(i)].data_ptr<float>();
    in_base[static_cast<size_t>(i)] = base;
    if (ip.mode == LoadMode::kConst) {
      float* c = consts + stride * ip.slot;
      std::fill(c, c + P.tile_elems, base[0]);
    } else if (ip.mode == LoadMode::kPattern) {
      float* c = consts + stride * ip.slot;
      const int64_t period = ip.period_rows * P.inner;  // == ip.numel
      for (int64_t k = 0; k < P.tile_elems; k += period) {
        std::memcpy(c + k, base, static_cast<size_t>(period) * 4);
      }
    }
  }
  std::vector<float*> out_base(static_cast<size_t>(n_out));
  std::vector<std::vector<double>> acc(static_cast<size_t>(n_out));
  for (int o = 0; o < n_out; ++o) {
    const OutputPlan& op = P.outputs[static_cast<size_t>(o)];
    out_base[static_cast<size_t>(o)] = outputs[static_cast<size_t>(o)].data_ptr<float>();
    if (op.mode == OutputMode::kSum || op.mode == OutputMode::kMean) {
      acc[static_cast<size_t>(o)].assign(static_cast<size_t>(op.numel), 0.0);
    } else if (op.mode == OutputMode::kMax) {
      std::fill(out_base[static_cast<size_t>(o)], out_base[static_cast<size_t>(o)] + op.numel,
                -std::numeric_limits<float>::infinity());
    }
  }

  const int64_t points = P.rows * P.inner;
  std::vector<const char*> prefetch_read, prefetch_write;
  if (P.prefetch) {
    for (int i : P.tiled_inputs) {
      if (P.inputs[static_cast<size_t>(i)].mode == LoadMode::kFull) {
        prefetch_read.push_back(reinterpret_cast<const char*>(in_base[static_cast<size_t>(i)]));
      }
    }
    for (int o = 0; o < n_out; ++o) {
      if (P.outputs[static_cast<size_t>(o)].mode == OutputMode::kDirect ||
          P.outputs[static_cast<size_t>(o)].mode == OutputMode::kCopy) {
        prefetch_write.push_back(reinterpret_cast<const char*>(out_base[static_cast<size_t>(o)]));
      }
    }
  }
  const int64_t chunks_per_row = P.chunked ? (P.inner + P.chunk - 1) / P.chunk : 1;
  const int64_t tiles =
      P.chunked ? P.rows * chunks_per_row : (P.rows + P.tile_rows - 1) / P.tile_rows;
  // The tile values of every program register, plus a null slot that absent
  // operands name (Plan::null_reg). Constant inputs are set once.
  std::vector<const float*> reg(static_cast<size_t>(P.null_reg + 1), nullptr);
  for (int i = 0; i < n_in; ++i) {
    const InputPlan& ip = P.inputs[static_cast<size_t>(i)];
    if (ip.mode == LoadMode::kConst || ip.mode == LoadMode::kPattern) {
      reg[static_cast<size_t>(i)] = consts + stride * ip.slot;
    }
  }

  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = P.chunked ? t / chunks_per_row : t * P.tile_rows;
    const int64_t nrows = P.chunked ? 1 : std::min(P.tile_rows, P.rows - r0);
    const int64_t j0 = P.chunked ? (t % chunks_per_row) * P.chunk : 0;
    const int64_t len = P.chunked ? std::min(P.chunk, P.inner - j0) : P.inner;
    const int64_t n = nrows * len;
    const int64_t flat = r0 * P.inner + j0;  // first point's flat index

    // Writes or accumulates output o (not kDirect) from the tile values at src.
    auto emit = [&](int o, const float* src) {
      const OutputPlan& op = P.outputs[static_cast<size_t>(o)];
      float* out = out_base[static_cast<size_t>(o)];
      if (op.mode == OutputMode::kCopy) {
        std::memcpy(out + flat, src, static_cast<size_t>(n) * 4);
        return;
      }
      int64_t* off = offsets_of(op.offsets);
      RowOffsets(P.dims, op.strides, r0, nrows, off);
      const int64_t shift = op.inner_reduced ? 0 : j0;
      if (op.mode == OutputMode::kMax) {
        auto max = op.inner_reduced ? loops.max_rows_inner : loops.max_rows;
        max(out + shift, off, src, nrows, len);
      } else {
        double* a = acc[static_cast<size_t>(o)].data() + shift;
        (op.inner_reduced ? loops.sum_rows : loops.add_rows)(a, off, src, nrows, len);
      }
    };

    for (int i : P.tiled_inputs) {
      const InputPlan& ip = P.inputs[static_cast<size_t>(i)];
      const float* base = in_base[static_cast<size_t>(i)];
      const float* v;
      if (ip.mode == LoadMode::kFull) {
        v = base + flat;
      } else if (ip.mode == LoadMode::kPeriodic) {
        v = base + (r0 % ip.period_rows) * P.inner + j0;
      } else {  // kStrided
        int64_t* off = offsets_of(ip.offsets);
        RowOffsets(P.dims, ip.strides, r0, nrows, off);
        const int inner_stride = ip.strides.back() != 0 ? 1 : 0;
        if (ip.slot < 0) {
          v = base + off[0] + j0;  // one-row tile, inner-contiguous: in place
        } else {
          float* b = buffer(ip.slot);
          loops.gather_rows(b, base + j0 * inner_stride, off, nrows, len, inner_stride);
          v = b;
        }
      }
      reg[static_cast<size_t>(i)] = v;
    }
    for (const auto& [i, o] : P.input_outputs) emit(o, reg[static_cast<size_t>(i)]);
    // The next tile's lines of the streamed tensors, a slice before each
    // step, so that the misses overlap this tile's arithmetic.
    const int64_t pf_lines =
        P.prefetch ? (std::min(P.tile_elems, points - flat - n) * 4 + 63) / 64 : 0;
    const int64_t num_steps = static_cast<int64_t>(P.steps.size());
    int64_t step = 0;
    for (const StepPlan& st : P.steps) {
      if (pf_lines > 0) {
        const int64_t l0 = pf_lines * step / num_steps;
        const int64_t l1 = pf_lines * (step + 1) / num_steps;
        for (const char* b : prefetch_read) {
          for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(b + (flat + n) * 4 + l * 64, 0, 3);
        }
        for (const char* b : prefetch_write) {
          for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(b + (flat + n) * 4 + l * 64, 1, 3);
        }
      }
      ++step;
      float* dst = st.direct_output >= 0 ? out_base[static_cast<size_t>(st.direct_output)] + flat
                                         : buffer(st.buffer);
      st.fn({n, dst, reg[static_cast<size_t>(st.a)], reg[static_cast<size_t>(st.b)],
             reg[static_cast<size_t>(st.c)], st.p0, st.p1});
      reg[static_cast<size_t>(st.reg)] = dst;
      for (int o : st.outputs) emit(o, dst);
    }
  }

  for (int o = 0; o < n_out; ++o) {
    const OutputPlan& op = P.outputs[static_cast<size_t>(o)];
    if (op.mode != OutputMode::kSum && op.mode != OutputMode::kMean) continue;
    const double scale = op.mode == OutputMode::kMean ? 1.0 / op.count : 1.0;
    float* out = out_base[static_cast<size_t>(o)];
    const std::vector<double>& a = acc[static_cast<size_t>(o)];
    for (int64_t k = 0; k < op.numel; ++k) {
      out[k] = static_cast<float>(a[static_cast<size_t>(k)] * scale);
    }
  }
}

}  // namespace braid::kernels::cpu
