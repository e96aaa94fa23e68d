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

absl::StatusOr<OpProfile> CudaProfiler::ProfileFused(const graph::Graph& g,
                                                     std::span<const graph::OpId> ops) const {
  std::vector<graph::OpId> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (graph::OpId o : sorted) {
    if (o < 0 || o >= g.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("cuda profiler: no op with id ", o));
    }
    if (graph::IsLibraryKind(g.op(o).kind)) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda profiler: fused group with '", g.op(o).name,
          "': GEMM/convolution epilogues are not lowered to kernels/cuda's cuBLASLt kernels yet"));
    }
  }
  if (absl::Status s = costmodel::GpuFusionBackend().CanImplement(g, sorted); !s.ok()) {
    return absl::UnimplementedError(absl::StrCat("cuda profiler: ", s.message()));
  }
  ASSIGN_OR_RETURN(FusedGroup grp, AnalyzeGroup(g, sorted));
  absl::StatusOr<ElementwiseProgram> ep = BuildElementwiseProgram(g, grp);
  if (!ep.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda profiler: the fused group has no NVRTC program form: ", ep.status().message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Context().status());  // selects the device TimeEwKernel runs on
  std::vector<double> samples;
  const int reps = std::max(options_.repetitions, options_.min_repetitions);
  for (int r = 0; r < std::max(reps, 1); ++r) {
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
