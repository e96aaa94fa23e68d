#include "worker/cuda/cuda_profiler.h"
#include "worker/profile_graph.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/ops.h"
#include "costmodel/fusion_backend.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/cuda/timing.h"
#include "worker/cuda/cuda_status.h"
#include "worker/fused_program.h"
#include "worker/cuda/internal/cuda_context.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using cuda_internal::CudaContext;
using cuda_internal::CudaOp;
using Clock = std::chrono::steady_clock;

// A pair of CUDA events around work on one stream.
class EventTimer {
 public:
  ~EventTimer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  absl::Status Init() {
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start_), "cudaEventCreate"));
    return CudaStatus(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  // Seconds for `reps` runs of `run` on `stream`, measured on the device.
  absl::StatusOr<double> Time(const CudaOp& op, int reps, cudaStream_t stream) {
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start_, stream), "cudaEventRecord"));
    for (int i = 0; i < reps; ++i) RETURN_IF_ERROR(op.run());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop_, stream), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop_), "running the op"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime"));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

absl::StatusOr<OpProfile> Measure(const CudaContext& ctx, const CudaOp& op,
                                  const ProfileOptions& o) {
  EventTimer timer;
  RETURN_IF_ERROR(timer.Init());
  // The first run surfaces launch and execution errors before any timing;
  // the warm-up runs let cuBLAS/cuDNN load their kernels. One more timed run
  // after them, warm, sizes the samples.
  for (int i = 0; i < std::max(o.warmup, 1); ++i) {
    RETURN_IF_ERROR(timer.Time(op, 1, ctx.stream()));
  }
  ASSIGN_OR_RETURN(double one, timer.Time(op, 1, ctx.stream()));
  // Microsecond kernels run several times per sample so the event
  // resolution (~0.5 us) does not dominate.
  const int inner = one >= o.min_sample_s
                        ? 1
                        : static_cast<int>(std::min<double>(
                              1000, std::ceil(o.min_sample_s / std::max(one, 1e-9))));
  std::vector<double> samples;
  const Clock::time_point budget_start = Clock::now();
  for (int r = 0; r < std::max(o.repetitions, 1); ++r) {
    if (r >= o.min_repetitions && SecondsSince(budget_start) > o.max_seconds_per_op) break;
    ASSIGN_OR_RETURN(double t, timer.Time(op, inner, ctx.stream()));
    samples.push_back(t / inner);
  }
  TimingSummary s = Summarize(std::move(samples));
  return OpProfile{{.median_s = s.median_s, .spread_s = s.iqr_s, .repetitions = s.count}, op.calls};
}

}  // namespace

CudaProfiler::CudaProfiler(ProfileOptions options, int device)
    : options_(options), device_(device) {}

CudaProfiler::~CudaProfiler() = default;

bool CudaProfiler::Supports(std::string_view op_type) {
  return cuda_internal::CudaOpSupports(graph::OpKindFromName(op_type));
}

absl::StatusOr<CudaContext*> CudaProfiler::Context() const {
  if (ctx_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CudaContext>> c = CudaContext::Create(device_);
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("cuda profiler: ", std::string(c.status().message())));
    }
    ctx_ = *std::move(c);
  }
  RETURN_IF_ERROR(ctx_->Activate());
  return ctx_.get();
}

absl::StatusOr<CudaDeviceInfo> CudaProfiler::Device() const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(CudaContext* c, Context());
  return c->device();
}

absl::StatusOr<std::string> CudaProfiler::DeviceKind() const {
  ASSIGN_OR_RETURN(CudaDeviceInfo d, Device());
  return d.kind;
}

namespace {

// The cuBLASLt call a GEMM group of the GPU backend is (fusion_backend.cc,
// GpuGemmEpilogue): row-major Y[M,N] = op(A) op(B) is column-major
// Y^T = op(B)^T op(A)^T, so cuBLASLt's (m, n, k) = (N, M, K) with the
// operands swapped; the bias is a length-N vector (one per column of Y, one
// per row of cuBLASLt's D) and BGRAD sums over Y's rows, as cuBLASLt does
// over D's columns.
absl::StatusOr<kernels::cuda::LtGemmSpec> LtSpecOfGroup(const graph::Graph& g,
                                                       const FusedGroup& grp) {
  using kernels::cuda::LtEpilogue;
  using K = graph::OpKind;
  const graph::Op& lib = g.op(grp.members[0]);
  auto unsupported = [&](std::string_view why) {
    return absl::UnimplementedError(absl::StrCat("cuda profiler: fused GEMM '", lib.name, "': ",
                                                 std::string(why)));
  };
  const std::vector<int64_t>& a = g.tensor(lib.inputs[0]).shape;
  const std::vector<int64_t>& b = g.tensor(lib.inputs[1]).shape;
  const std::vector<int64_t>& y = g.tensor(lib.outputs[0]).shape;
  const bool ta = lib.GetInt("transA", 0) != 0, tb = lib.GetInt("transB", 0) != 0;
  if (b.size() != 2 || a.size() < 2 || (a.size() > 2 && ta)) {
    return unsupported("batched operands (one strided-batched cuBLASLt call) are not mapped");
  }
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < y.size(); ++i) rows *= y[i];
  kernels::cuda::LtGemmSpec s;
  s.m = y.back();
  s.n = rows;
  s.k = tb ? b[1] : b[0];
  s.trans_a = tb;
  s.trans_b = ta;
  if (lib.kind == K::kGemm) {
    s.alpha = static_cast<float>(lib.GetFloat("alpha", 1.0));
    if (lib.inputs.size() >= 3) s.beta = static_cast<float>(lib.GetFloat("beta", 1.0));
  }
  bool bias = false, aux = false, bgrad = false;
  K act = K::kOpaque, dact = K::kOpaque;
  graph::OpId prev = grp.members[0];
  for (size_t i = 1; i < grp.members.size(); ++i) {
    const graph::Op& op = g.op(grp.members[i]);
    if (op.kind == K::kAdd) {
      const graph::TensorId other =
          g.tensor(op.inputs[0]).producer == prev ? op.inputs[1] : op.inputs[0];
      if (g.tensor(other).NumElements() == g.tensor(lib.outputs[0]).NumElements()) {
        if (s.beta != 0) return unsupported("a residual besides Gemm's own C");
        s.beta = 1;
      } else {
        bias = true;
      }
    } else if (graph::IsOneOf(op.kind, {K::kRelu, K::kGelu})) {
      act = op.kind;
      for (graph::TensorId t : g.op(prev).outputs) {
        aux |= std::find(grp.escaping.begin(), grp.escaping.end(), t) != grp.escaping.end();
      }
    } else if (graph::IsOneOf(op.kind, {K::kReluGrad, K::kGeluGrad})) {
      dact = op.kind;
    } else if (op.kind == K::kReduceSum) {
      bgrad = true;
    } else {
      return unsupported(absl::StrCat("no cuBLASLt epilogue for ", op.type));
    }
    prev = grp.members[i];
  }
  if (dact == K::kReluGrad) {
    s.epilogue = bgrad ? LtEpilogue::kDReluBgrad : LtEpilogue::kDRelu;
  } else if (dact == K::kGeluGrad) {
    s.epilogue = bgrad ? LtEpilogue::kDGeluBgrad : LtEpilogue::kDGelu;
  } else if (act == K::kRelu) {
    s.epilogue = aux ? (bias ? LtEpilogue::kReluAuxBias : LtEpilogue::kReluAux)
                     : (bias ? LtEpilogue::kReluBias : LtEpilogue::kRelu);
  } else if (act == K::kGelu) {
    s.epilogue = aux ? (bias ? LtEpilogue::kGeluAuxBias : LtEpilogue::kGeluAux)
                     : (bias ? LtEpilogue::kGeluBias : LtEpilogue::kGelu);
  } else {
    s.epilogue = bias ? LtEpilogue::kBias : LtEpilogue::kDefault;
  }
  RETURN_IF_ERROR(kernels::cuda::LtGemmCanImplement(s));
  return s;
}

}  // namespace

absl::StatusOr<OpProfile> CudaProfiler::ProfileFused(const graph::Graph& g,
                                                     std::span<const graph::OpId> ops) const {
  std::vector<graph::OpId> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (graph::OpId o : sorted) {
    if (o < 0 || o >= g.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("cuda profiler: no op with id ", o));
    }
    if (graph::CategoryOf(g.op(o).kind) == graph::OpCategory::kConv) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda profiler: fused group with '", g.op(o).name,
          "': cuDNN's fused convolution is not timed by braid's CUDA kernels yet"));
    }
  }
  if (absl::Status s = costmodel::GpuFusionBackend().CanImplement(g, sorted); !s.ok()) {
    return absl::UnimplementedError(absl::StrCat("cuda profiler: ", s.message()));
  }
  ASSIGN_OR_RETURN(FusedGroup grp, AnalyzeGroup(g, sorted));
  const int reps = std::max(std::max(options_.repetitions, options_.min_repetitions), 1);
  if (graph::IsLibraryKind(g.op(grp.members[0]).kind)) {
    ASSIGN_OR_RETURN(kernels::cuda::LtGemmSpec spec, LtSpecOfGroup(g, grp));
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Context().status());
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) {
      ASSIGN_OR_RETURN(double s, kernels::cuda::TimeLtGemm(spec, /*reps=*/10));
      samples.push_back(s);
    }
    TimingSummary sum = Summarize(std::move(samples));
    return OpProfile{{.median_s = sum.median_s, .spread_s = sum.iqr_s, .repetitions = sum.count},
                     "cublasLtMatmul:" + spec.Key()};
  }
  absl::StatusOr<ElementwiseProgram> ep = BuildElementwiseProgram(g, grp);
  if (!ep.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda profiler: the fused group has no NVRTC program form: ", ep.status().message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Context().status());  // selects the device TimeEwKernel runs on
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    ASSIGN_OR_RETURN(double s, kernels::cuda::TimeEwKernel(ep->program, /*reps=*/10));
    samples.push_back(s);
  }
  TimingSummary sum = Summarize(std::move(samples));
  return OpProfile{{.median_s = sum.median_s, .spread_s = sum.iqr_s, .repetitions = sum.count},
                   "nvrtc:" + ep->program.Signature().substr(0, 120)};
}

absl::StatusOr<OpProfile> CudaProfiler::ProfileOp(const graph::Graph& g, graph::OpId op) const {
  if (op < 0 || op >= g.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda profiler: no op with id ", op));
  }
  const graph::Op& o = g.op(op);
  if (o.outputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda profiler: op '", o.name, "' has no output"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(CudaContext* ctx, Context());
  ASSIGN_OR_RETURN(CudaOp k, cuda_internal::MakeCudaOp(*ctx, g, op));
  auto fail = [&](const absl::Status& s) {
    // Leave no queued work or pending (non-sticky) error for the next op.
    (void)cudaStreamSynchronize(ctx->stream());
    (void)cudaGetLastError();
    return absl::Status(s.code(), absl::StrCat("cuda profiler: op '", o.name, "' (", o.type,
                                               "): ", std::string(s.message())));
  };
  for (cuda_internal::DeviceTensor& t : k.inputs) {
    absl::Status s = cuda_internal::ElemTypeOf(t.dtype).ok()
                         ? ctx->FillNormal(t, seed_++)
                         : CudaStatus(cudaMemsetAsync(t.data(), 0, t.bytes(), ctx->stream()),
                                      "cudaMemsetAsync");  // integer inputs (axes, indices)
    if (!s.ok()) return fail(s);
  }
  if (k.prepare) {
    if (absl::Status s = k.prepare(); !s.ok()) return fail(s);
  }
  absl::StatusOr<OpProfile> p = Measure(*ctx, k, options_);
  if (!p.ok()) return fail(p.status());
  return p;
}

absl::StatusOr<ProfileGraphReport> ProfileGraphCuda(const graph::Graph& g,
                                                    costmodel::ProfileStore& store,
                                                    const ProfileOptions& options, int device) {
  CudaProfiler profiler(options, device);
  ASSIGN_OR_RETURN(std::string kind, profiler.DeviceKind());
  return ProfileDistinctOps(g, store, kind, [&](const graph::Graph& gr, graph::OpId op) {
    return profiler.ProfileOp(gr, op);
  });
}

}  // namespace braid::worker
