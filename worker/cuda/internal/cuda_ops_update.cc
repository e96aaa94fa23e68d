// Optimizer updates: SgdMomentumUpdate (p, g[, m]) -> (p', m') and
// AdamUpdate (p, g[, m[, v]]) -> (p', m', v'), braid's kernels (kernels.h),
// with torch.optim's single-tensor arithmetic. Adam's bias corrections are
// those of step `step` (attribute, default 10: the time does not depend on it).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

absl::StatusOr<CudaOp> Update(const OpView& v, bool adam) {
  RETURN_IF_ERROR(adam ? v.Arity(2, 4) : v.Arity(2, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  const int states = adam ? 2 : 1;
  if (v.num_outputs() < 1 || v.num_outputs() > 1 + states) {
    return v.Error(absl::StrCat("has ", v.num_outputs(), " outputs"));
  }
  for (int i = 0; i < v.num_inputs(); ++i) {
    if (v.in(i).shape != v.in(0).shape) return v.Error("its inputs differ in shape");
  }
  for (int i = 0; i < v.num_outputs(); ++i) {
    if (v.out(i).shape != v.in(0).shape || v.out(i).dtype != v.dtype()) {
      return v.Error("its outputs differ from the parameter's shape");
    }
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  // Outputs the graph leaves out still need somewhere to go.
  std::vector<void*> outs;
  for (DeviceTensor& t : op.outputs) outs.push_back(t.data());
  while (static_cast<int>(outs.size()) < 1 + states) {
    ASSIGN_OR_RETURN(DeviceTensor s, v.Scratch(v.in(0).shape, v.dtype(), "state"));
    outs.push_back(s.data());
    op.scratch.push_back(std::move(s));
  }
  auto in = [&](int i) -> const void* { return i < v.num_inputs() ? op.inputs[i].data() : nullptr; };
  const void *p = in(0), *g = in(1), *m = in(2), *s2 = in(3);
  const ElemType et = *ElemTypeOf(v.dtype());
  const int64_t n = v.in(0).NumElements();
  const CudaContext* ctx = &v.ctx();
  const graph::Op& o = v.op();
  const float wd = static_cast<float>(o.GetFloat("weight_decay", 0.0));
  if (!adam) {
    const float lr = static_cast<float>(o.GetFloat("lr", 0.01));
    const float mu = static_cast<float>(o.GetFloat("momentum", 0.9));
    op.run = [=] {
      return CudaStatus(
          SgdMomentumStep(et, p, g, m, outs[0], outs[1], n, lr, mu, wd, ctx->stream()),
          "SgdMomentumStep kernel");
    };
    op.calls = "braid SgdMomentumStep kernel (torch.optim.SGD step)";
    return op;
  }
  const double b1 = o.GetFloat("beta1", 0.9), b2 = o.GetFloat("beta2", 0.999);
  const double step = static_cast<double>(std::max<int64_t>(1, o.GetInt("step", 10)));
  const float bc1 = static_cast<float>(1 - std::pow(b1, step));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(b2, step)));
  const float lr = static_cast<float>(o.GetFloat("lr", 1e-3));
  const float eps = static_cast<float>(o.GetFloat("epsilon", 1e-8));
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  op.run = [=] {
    return CudaStatus(AdamStep(et, p, g, m, s2, outs[0], outs[1], outs[2], n, lr, fb1, fb2, eps, wd,
                               bc1, bc2_sqrt, ctx->stream()),
                      "AdamStep kernel");
  };
  op.calls = "braid AdamStep kernel (torch.optim.Adam step)";
  return op;
}

}  // namespace

bool UpdateSupports(graph::OpKind k) { return k == K::kSgdMomentumUpdate || k == K::kAdamUpdate; }

BuildResult BuildUpdate(const OpView& v) {
  if (v.op().kind == K::kSgdMomentumUpdate) return Update(v, /*adam=*/false);
  if (v.op().kind == K::kAdamUpdate) return Update(v, /*adam=*/true);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
