#include "worker/cpu_profiler.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/cpu_kernels.h"
#include "worker/profile_graph.h"
#include "worker/fused_kernels.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using Clock = std::chrono::steady_clock;

// OpenBLAS-pthread keeps its own thread pool that at::set_num_threads does
// not reach; look it up at run time so a reference-BLAS install still works.
void SetBlasThreads(int n) {
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

std::string ShapeMismatch(const graph::Op& op, const at::Tensor& got,
                          const graph::Tensor& want) {
  std::vector<int64_t> sizes(got.sizes().begin(), got.sizes().end());
  return absl::StrCat("cpu profiler: op '", op.name, "' (", op.type, "): LibTorch computes ",
                      graph::ShapeString(sizes), " but the graph's output '", want.name, "' is ",
                      graph::ShapeString(want.shape));
}

absl::Status CheckResult(const graph::Op& op, const CpuKernel& k, const at::Tensor& got,
                         const graph::Tensor& want) {
  switch (k.check) {
    case CpuKernel::Check::kShape: {
      std::vector<int64_t> sizes(got.sizes().begin(), got.sizes().end());
      if (sizes != want.shape) return absl::InvalidArgumentError(ShapeMismatch(op, got, want));
      break;
    }
    case CpuKernel::Check::kElements:
      if (got.numel() != want.NumElements()) {
        return absl::InvalidArgumentError(ShapeMismatch(op, got, want));
      }
      break;
    case CpuKernel::Check::kNone:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<OpProfile> Measure(const graph::Op& op, const CpuKernel& k,
                                  const graph::Tensor& out0, const ProfileOptions& o) {
  // First run: checks the mapping against the graph and times one call.
  Clock::time_point t0 = Clock::now();
  at::Tensor first = k.run();
  double one = SecondsSince(t0);
  RETURN_IF_ERROR(CheckResult(op, k, first, out0));
  first = at::Tensor();
  for (int i = 1; i < o.warmup; ++i) {
    t0 = Clock::now();
    k.run();
    one = SecondsSince(t0);
  }
  const int inner = one >= o.min_sample_s
                        ? 1
                        : static_cast<int>(std::min<double>(
                              1000, std::ceil(o.min_sample_s / std::max(one, 1e-9))));
  std::vector<double> samples;
  Clock::time_point budget_start = Clock::now();
  for (int r = 0; r < std::max(o.repetitions, 1); ++r) {
    if (r >= o.min_repetitions && SecondsSince(budget_start) > o.max_seconds_per_op) break;
    t0 = Clock::now();
    for (int i = 0; i < inner; ++i) k.run();
    samples.push_back(SecondsSince(t0) / inner);
  }
  TimingSummary s = Summarize(std::move(samples));
  return OpProfile{{.median_s = s.median_s, .spread_s = s.iqr_s, .repetitions = s.count}, k.aten};
}

}  // namespace

CpuProfiler::CpuProfiler(ProfileOptions options) : options_(options) {
  at::set_num_threads(1);
  SetBlasThreads(1);
  KeepFreedMemory();  // as the executor ranks do (worker/timing.h)
}

bool CpuProfiler::Supports(std::string_view op_type) { return CpuKernelSupports(op_type); }

absl::StatusOr<OpProfile> CpuProfiler::ProfileFused(const graph::Graph& g,
                                                    std::span<const graph::OpId> ops) const {
  for (graph::OpId op : ops) {
    if (op < 0 || op >= g.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("cpu profiler: no op with id ", op));
    }
  }
  try {
    TensorSlots slots;
    ASSIGN_OR_RETURN(FusedCpuKernel k, MakeFusedCpuKernel(g, ops, &slots));
    // The fused kernel writes its outputs into tensors it owns; the check
    // that they have the graph's shapes is fused_kernels_test's.
    CpuKernel timed = internal::Make(
        [&k]() -> at::Tensor {
          absl::Status s = k.run();
          CHECK(s.ok()) << s;  // a kernel that ran once runs again
          return k.output(0);
        },
        k.kind, CpuKernel::Check::kNone);
    RETURN_IF_ERROR(k.run());
    const graph::Op& first = g.op(ops[0]);
    return Measure(first, timed, g.tensor(first.outputs[0]), options_);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("cpu profiler: fused group: ", std::string(e.what_without_backtrace())));
  }
}

absl::StatusOr<OpProfile> CpuProfiler::ProfileOp(const graph::Graph& g, graph::OpId op) const {
  if (op < 0 || op >= g.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu profiler: no op with id ", op));
  }
  const graph::Op& o = g.op(op);
  if (o.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu profiler: op '", o.name, "' has no output"));
  }
  // c10::Error must not cross the library boundary.
  try {
    ASSIGN_OR_RETURN(CpuKernel k, MakeCpuKernel(g, op));
    return Measure(o, k, g.tensor(o.outputs[0]), options_);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    std::string text = absl::StrCat("cpu profiler: LibTorch failed on op '", o.name, "' (", o.type,
                                    "): ", msg);
    // "... not implemented for 'Half'": a dtype this CPU build lacks.
    if (msg.find("not implemented for") != std::string::npos) {
      return absl::UnimplementedError(text);
    }
    return absl::InternalError(text);
  }
}

absl::StatusOr<ProfileGraphReport> ProfileGraph(const graph::Graph& g,
                                                costmodel::ProfileStore& store,
                                                const ProfileOptions& options) {
  CpuProfiler profiler(options);
  return ProfileDistinctOps(g, store, CpuDeviceKind(),
                            [&](const graph::Graph& gr, graph::OpId op) {
                              return profiler.ProfileOp(gr, op);
                            });
}

std::string CpuBackendInfo() {
  std::string info = absl::StrCat("threads=", at::get_num_threads());
  using ConfigFn = char* (*)();
  using ThreadsFn = int (*)();
  auto config = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  auto threads = reinterpret_cast<ThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (config != nullptr) {
    absl::StrAppend(&info, " blas=", config());
    if (threads != nullptr) absl::StrAppend(&info, " openblas_threads=", threads());
  } else {
    absl::StrAppend(&info, " blas=not OpenBLAS (reference BLAS? install libopenblas0-pthread)");
  }
  return info;
}

}  // namespace braid::worker
