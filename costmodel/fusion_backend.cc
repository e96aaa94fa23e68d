#include "costmodel/fusion_backend.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/op_kind.h"
#include "graph/ops.h"

namespace braid::costmodel {
namespace {

using graph::Graph;
using graph::Op;
using graph::OpCategory;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;
using K = graph::OpKind;

// A candidate group: membership and in-group edges.
class Group {
 public:
  Group(const Graph& g, std::span<const OpId> ops) : g_(g), ops_(ops.begin(), ops.end()) {
    std::sort(ops_.begin(), ops_.end());
    ops_.erase(std::unique(ops_.begin(), ops_.end()), ops_.end());
  }
  const Graph& g() const { return g_; }
  const std::vector<OpId>& ops() const { return ops_; }
  bool In(OpId o) const {
    return o != graph::kNoId && std::binary_search(ops_.begin(), ops_.end(), o);
  }
  std::vector<OpId> Producers(OpId op) const {
    std::vector<OpId> out;
    for (TensorId t : g_.op(op).inputs) {
      const OpId p = g_.tensor(t).producer;
      if (In(p)) out.push_back(p);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  std::vector<OpId> Consumers(OpId op) const {
    std::vector<OpId> out;
    for (TensorId t : g_.op(op).outputs) {
      for (OpId c : g_.tensor(t).consumers) {
        if (In(c)) out.push_back(c);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  // Whether an output of `op` is needed outside the group: read by an op
  // outside it, a graph output, or never read (kept as the op's result).
  bool Escapes(OpId op) const {
    for (TensorId t : g_.op(op).outputs) {
      if (graph::LeavesGroup(g_, t, [this](OpId c) { return In(c); })) return true;
    }
    return false;
  }
  // The input of `op` not produced by `prev` (binary epilogue operand).
  std::optional<TensorId> OtherInput(OpId op, OpId prev) const {
    const Op& o = g_.op(op);
    if (o.inputs.size() != 2) return std::nullopt;
    const bool first = g_.tensor(o.inputs[0]).producer == prev;
    const bool second = g_.tensor(o.inputs[1]).producer == prev;
    if (first == second) return std::nullopt;  // both or neither
    return first ? o.inputs[1] : o.inputs[0];
  }
  const std::vector<int64_t>& OutShape(OpId op) const {
    return g_.tensor(g_.op(op).outputs[0]).shape;
  }
  int64_t OutElements(OpId op) const { return g_.tensor(g_.op(op).outputs[0]).NumElements(); }

 private:
  const Graph& g_;
  std::vector<OpId> ops_;
};

std::string Name(const Group& grp, OpId op) {
  const Op& o = grp.g().op(op);
  return absl::StrCat("'", o.name, "' (", o.type, ")");
}

absl::Status Refuse(std::string_view backend, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(backend), " cannot fuse this group: ", std::string(why)));
}

// The chain L -> e1 -> e2 ... that a library call's epilogue computes: each
// ei reads the previous value and nothing else from inside the group. Fails
// when a member is off the chain (a prologue of L, or a side branch).
absl::StatusOr<std::vector<OpId>> EpilogueChain(std::string_view backend, const Group& grp,
                                               OpId lib) {
  std::vector<OpId> chain;
  if (!grp.Producers(lib).empty()) {
    return Refuse(backend, absl::StrCat(Name(grp, grp.Producers(lib)[0]), " would be a prologue of ",
                                        Name(grp, lib), ": library calls take no fused prologue"));
  }
  OpId cur = lib;
  while (true) {
    const std::vector<OpId> cons = grp.Consumers(cur);
    if (cons.empty()) break;
    if (cons.size() > 1) {
      return Refuse(backend, absl::StrCat(Name(grp, cur), " feeds ", cons.size(),
                                          " members: an epilogue is a single chain"));
    }
    const OpId next = cons[0];
    if (grp.Producers(next) != std::vector<OpId>{cur}) {
      return Refuse(backend, absl::StrCat(Name(grp, next), " reads two values of the group"));
    }
    chain.push_back(next);
    cur = next;
  }
  if (chain.size() + 1 != grp.ops().size()) {
    for (OpId o : grp.ops()) {
      if (o != lib && std::find(chain.begin(), chain.end(), o) == chain.end()) {
        return Refuse(backend, absl::StrCat(Name(grp, o), " is not in the epilogue of ",
                                            Name(grp, lib)));
      }
    }
  }
  return chain;
}

// Only the listed chain values may leave the kernel.
absl::Status CheckEscapes(std::string_view backend, const Group& grp, OpId lib,
                          const std::vector<OpId>& chain, const std::vector<OpId>& may_escape) {
  std::vector<OpId> all = {lib};
  all.insert(all.end(), chain.begin(), chain.end());
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    if (!grp.Escapes(all[i])) continue;
    if (std::find(may_escape.begin(), may_escape.end(), all[i]) != may_escape.end()) continue;
    return Refuse(backend, absl::StrCat("the intermediate result of ", Name(grp, all[i]),
                                        " is read outside the group, and this fused kernel "
                                        "writes only its final result"));
  }
  return absl::OkStatus();
}

bool IsRowVectorOf(const std::vector<int64_t>& s, const std::vector<int64_t>& out) {
  if (s.empty() || out.empty() || s.back() != out.back()) return false;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] != 1) return false;
  }
  return true;
}

bool IsChannelVectorOf(const std::vector<int64_t>& s, const std::vector<int64_t>& out) {
  // [C,1,1] or [1,C,1,1] against NCHW.
  if (out.size() != 4) return false;
  std::vector<int64_t> want3 = {out[1], 1, 1}, want4 = {1, out[1], 1, 1};
  return s == want3 || s == want4;
}

// ---------------------------------------------------------------- GPU ----

enum class GpuClass : uint8_t { kLibrary, kLoop, kReduce, kNormLike, kNone };

// How XLA's GPU compiler treats the op (xla/service/gpu/gpu_fusible.cc,
// instruction_fusion.cc, as of the XLA that jax 0.4 ships):
//  - loop fusible: elementwise ops, broadcasts, reshapes/transposes/slices/
//    concats/pads (data movement), gathers, reduce-window (windowed pooling);
//  - reductions: fused with elementwise producers ("input fusion"); their
//    consumers join only on the reduced shape (reduction epilogue fusion);
//  - normalizations and softmax (and their gradients) are expanded into
//    reductions (statistics) plus elementwise ops (apply): producers fuse
//    into the statistics, consumers into the apply loop;
//  - scatter (gather gradients), select-and-scatter (max-pool gradients),
//    sort-like ops, losses with label gathers, recurrences: not fused.
GpuClass ClassifyGpu(const Op& op) {
  if (graph::IsLibraryKind(op.kind)) return GpuClass::kLibrary;
  switch (graph::CategoryOf(op.kind)) {
    case OpCategory::kElementwise:
    case OpCategory::kDataMovement:
      return GpuClass::kLoop;
    case OpCategory::kGather:
      return graph::IsOneOf(op.kind, {K::kGather, K::kGatherElements, K::kGatherND})
                 ? GpuClass::kLoop
                 : GpuClass::kNone;
    case OpCategory::kPool:
      return graph::IsOneOf(op.kind, {K::kMaxPool, K::kAveragePool, K::kLpPool}) ? GpuClass::kLoop
                                                                                 : GpuClass::kNone;
    case OpCategory::kReduction:
      if (op.kind == K::kCumSum) return GpuClass::kNone;
      // Gradients of reductions broadcast dY back: loop fusible.
      if (graph::IsOneOf(op.kind, {K::kReduceSumGrad, K::kReduceMeanGrad, K::kReduceMaxGrad,
                                   K::kReduceMinGrad, K::kGlobalAveragePoolGrad,
                                   K::kGlobalMaxPoolGrad})) {
        return GpuClass::kLoop;
      }
      return GpuClass::kReduce;
    case OpCategory::kNormalization:
    case OpCategory::kSoftmax:
      return GpuClass::kNormLike;
    default:
      return GpuClass::kNone;
  }
}

// cuBLASLt epilogues (cublasLtEpilogue_t, cuBLAS docs "cublasLtMatmulDescAttributes_t"):
// D = act(alpha * A B + beta * C + bias) with act in {ReLU, GELU}; the _AUX
// forms also write the pre-activation; DRELU/DGELU multiply the GEMM result
// (an incoming gradient) by the activation's derivative read from the aux
// buffer, and _BGRAD also writes the bias gradient (the sum over rows).
// A residual add rides as beta * C. Nothing else (no LayerNorm, softmax,
// dropout, second residual).
absl::Status GpuGemmEpilogue(const Group& grp, OpId lib, const std::vector<OpId>& chain) {
  constexpr std::string_view kB = "cuBLASLt";
  bool residual = false, bias = false, act = false, dact = false, bgrad = false;
  std::vector<OpId> may_escape;
  OpId prev = lib;
  const std::vector<int64_t>& out = grp.OutShape(lib);
  for (OpId e : chain) {
    const Op& op = grp.g().op(e);
    if (bgrad) return Refuse(kB, absl::StrCat(Name(grp, e), " follows the bias-gradient epilogue"));
    if (op.kind == K::kAdd) {
      if (act || dact) {
        return Refuse(kB, absl::StrCat(Name(grp, e), " adds after the activation epilogue"));
      }
      std::optional<TensorId> other = grp.OtherInput(e, prev);
      if (!other) return Refuse(kB, absl::StrCat(Name(grp, e), " is not an add of one operand"));
      const std::vector<int64_t>& s = grp.g().tensor(*other).shape;
      if (grp.g().tensor(*other).NumElements() == grp.OutElements(lib) && !residual) {
        residual = true;  // beta * C
      } else if (IsRowVectorOf(s, out) && !bias) {
        bias = true;  // CUBLASLT_EPILOGUE_BIAS
      } else {
        return Refuse(kB, absl::StrCat(Name(grp, e),
                                       " is neither the bias (a row vector) nor the one "
                                       "residual (beta * C) a GEMM epilogue adds"));
      }
    } else if (graph::IsOneOf(op.kind, {K::kRelu, K::kGelu})) {
      if (act || dact) return Refuse(kB, "a GEMM epilogue applies one activation");
      if (grp.Escapes(prev)) may_escape.push_back(prev);  // the _AUX output
      act = true;
    } else if (graph::IsOneOf(op.kind, {K::kReluGrad, K::kGeluGrad})) {
      if (prev != lib || grp.g().tensor(op.inputs[0]).producer != lib) {
        return Refuse(kB, absl::StrCat(Name(grp, e),
                                       " must take the GEMM result as dY (DRELU/DGELU epilogue)"));
      }
      dact = true;
    } else if (op.kind == K::kReduceSum && dact && grp.OutElements(e) == out.back()) {
      may_escape.push_back(prev);  // D = the activation gradient; the bias gradient besides
      bgrad = true;
    } else {
      return Refuse(kB, absl::StrCat(Name(grp, e), " is not a cuBLASLt epilogue"));
    }
    prev = e;
  }
  return CheckEscapes(kB, grp, lib, chain, may_escape);
}

// cuDNN's cudnnConvolutionBiasActivationForward: y = act(alpha1 * conv(x, w)
// + alpha2 * z + bias), act ReLU or identity; it writes y only.
absl::Status GpuConvEpilogue(const Group& grp, OpId lib, const std::vector<OpId>& chain) {
  constexpr std::string_view kB = "cuDNN fused convolution";
  if (grp.g().op(lib).kind != K::kConv) {
    return Refuse(kB, absl::StrCat(Name(grp, lib), " has no fused epilogue in cuDNN"));
  }
  bool z = false, bias = false, relu = false;
  OpId prev = lib;
  const std::vector<int64_t>& out = grp.OutShape(lib);
  for (OpId e : chain) {
    const Op& op = grp.g().op(e);
    if (relu) return Refuse(kB, "the activation is the last step of cuDNN's fused convolution");
    if (op.kind == K::kAdd) {
      std::optional<TensorId> other = grp.OtherInput(e, prev);
      if (!other) return Refuse(kB, absl::StrCat(Name(grp, e), " is not an add of one operand"));
      const std::vector<int64_t>& s = grp.g().tensor(*other).shape;
      if (s == out && !z) {
        z = true;
      } else if (IsChannelVectorOf(s, out) && !bias) {
        bias = true;
      } else {
        return Refuse(kB, absl::StrCat(Name(grp, e), " adds neither the side input z nor a per-channel bias"));
      }
    } else if (op.kind == K::kRelu) {
      relu = true;
    } else {
      return Refuse(kB, absl::StrCat(Name(grp, e), " is not part of cuDNN's fused convolution"));
    }
    prev = e;
  }
  return CheckEscapes(kB, grp, lib, chain, {});
}

class GpuBackend final : public FusionBackend {
 public:
  std::string_view name() const override { return "gpu-xla"; }
  absl::Status CanImplement(const Graph& g, std::span<const OpId> ops) const override {
    Group grp(g, ops);
    if (grp.ops().size() <= 1) return absl::OkStatus();
    constexpr std::string_view kB = "XLA GPU";
    std::vector<OpId> libs;
    std::vector<OpId> reducers;
    for (OpId o : grp.ops()) {
      switch (ClassifyGpu(g.op(o))) {
        case GpuClass::kLibrary: libs.push_back(o); break;
        case GpuClass::kReduce:
        case GpuClass::kNormLike: reducers.push_back(o); break;
        case GpuClass::kLoop: break;
        case GpuClass::kNone:
          return Refuse(kB, absl::StrCat(Name(grp, o), " is never fused by XLA's GPU compiler"));
      }
    }
    if (libs.size() > 1) {
      return Refuse(kB, absl::StrCat("library calls ", Name(grp, libs[0]), " and ",
                                     Name(grp, libs[1]), " cannot share a kernel"));
    }
    if (libs.size() == 1) {
      const OpId lib = libs[0];
      absl::StatusOr<std::vector<OpId>> chain = EpilogueChain("cuBLASLt/cuDNN", grp, lib);
      if (!chain.ok()) return chain.status();
      if (graph::CategoryOf(g.op(lib).kind) == OpCategory::kConv) {
        return GpuConvEpilogue(grp, lib, *chain);
      }
      if (!graph::IsOneOf(g.op(lib).kind, {K::kMatMul, K::kGemm})) {
        return Refuse("cuBLASLt", absl::StrCat(Name(grp, lib), " has no fused epilogue"));
      }
      return GpuGemmEpilogue(grp, lib, *chain);
    }
    // A reduction's result is final only once every block has reduced its
    // part: a member after it in the same kernel may work on the reduced
    // shape (epilogue), but another reduction, a normalization, or an op at
    // the full shape would need a grid-wide barrier.
    for (OpId r : reducers) {
      const bool plain = ClassifyGpu(g.op(r)) == GpuClass::kReduce;
      std::vector<OpId> work = grp.Consumers(r);
      std::vector<OpId> seen;
      while (!work.empty()) {
        const OpId d = work.back();
        work.pop_back();
        if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
        seen.push_back(d);
        const GpuClass c = ClassifyGpu(g.op(d));
        if (c == GpuClass::kReduce || c == GpuClass::kNormLike) {
          return Refuse(kB, absl::StrCat(Name(grp, d), " reduces what ", Name(grp, r),
                                         " reduced: a grid-wide barrier between them"));
        }
        if (plain && grp.OutElements(d) > grp.OutElements(r)) {
          return Refuse(kB, absl::StrCat(Name(grp, d), " uses the result of ", Name(grp, r),
                                         " at a larger shape: a grid-wide barrier"));
        }
        for (OpId c2 : grp.Consumers(d)) work.push_back(c2);
      }
    }
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------- CPU ----

bool AllF32(const Group& grp) {
  for (OpId o : grp.ops()) {
    const Op& op = grp.g().op(o);
    for (TensorId t : op.inputs) {
      if (grp.g().tensor(t).dtype != graph::DType::kF32) return false;
    }
    for (TensorId t : op.outputs) {
      if (grp.g().tensor(t).dtype != graph::DType::kF32) return false;
    }
  }
  return true;
}

// oneDNN 2.6 post-ops (dnnl_post_ops_append_eltwise / _binary / _sum): the
// eltwise algorithms whose formula is the op's, and the binary algorithms
// add/sub/mul/div/min/max with a broadcast second operand.
absl::Status CpuLibraryEpilogue(const Group& grp, OpId lib, const std::vector<OpId>& chain) {
  constexpr std::string_view kB = "oneDNN post-ops";
  const Op& l = grp.g().op(lib);
  const std::vector<int64_t>& out = grp.OutShape(lib);
  if (l.kind == K::kConv) {
    if (grp.g().tensor(l.inputs[0]).shape.size() != 4) {
      return Refuse(kB, absl::StrCat(Name(grp, lib), ": braid's CPU executor fuses 2-D convolutions only"));
    }
  } else if (!graph::IsOneOf(l.kind, {K::kMatMul, K::kGemm})) {
    return Refuse(kB, absl::StrCat(Name(grp, lib), " has no oneDNN primitive with post-ops in braid"));
  } else {
    // oneDNN's matmul primitive takes operands of rank 2 and more.
    if (grp.g().tensor(l.inputs[0]).shape.size() < 2 || grp.g().tensor(l.inputs[1]).shape.size() < 2) {
      return Refuse(kB, absl::StrCat(Name(grp, lib), " has a 1-D operand"));
    }
  }
  // dnnl_post_ops holds at most 32 entries in oneDNN 2.6
  // (DNNL_MAX_POST_OPS / post_ops_t::post_ops_limit).
  if (chain.size() > 32) {
    return Refuse(kB, absl::StrCat("a chain of ", chain.size(), " post-ops; oneDNN 2.6 holds 32"));
  }
  OpId prev = lib;
  for (OpId e : chain) {
    const Op& op = grp.g().op(e);
    if (graph::IsOneOf(op.kind, {K::kAdd, K::kSub, K::kMul, K::kDiv, K::kMin, K::kMax})) {
      std::optional<TensorId> other = grp.OtherInput(e, prev);
      if (!other) return Refuse(kB, absl::StrCat(Name(grp, e), " is not a binary op of one operand"));
      // dst = dst op src1: the chain value must be the left operand of Sub/Div.
      if (graph::IsOneOf(op.kind, {K::kSub, K::kDiv}) &&
          grp.g().tensor(op.inputs[0]).producer != prev) {
        return Refuse(kB, absl::StrCat(Name(grp, e), " takes the chain value on the right"));
      }
      if (grp.OutShape(e) != out) {
        return Refuse(kB, absl::StrCat(Name(grp, e), " broadcasts the result to another shape"));
      }
      const graph::Tensor& s = grp.g().tensor(*other);
      const bool ok = s.NumElements() == 1 || s.shape == out ||
                      (l.kind == K::kConv ? IsChannelVectorOf(s.shape, out) : IsRowVectorOf(s.shape, out));
      if (!ok) {
        return Refuse(kB, absl::StrCat(Name(grp, e), "'s second operand [",
                                       absl::StrJoin(s.shape, ","),
                                       "] is not a scalar, a per-channel vector or the full tensor"));
      }
    } else if (!CpuPostOpKind(op)) {
      return Refuse(kB, absl::StrCat(Name(grp, e), " is not a oneDNN 2.6 post-op"));
    }
    prev = e;
  }
  return CheckEscapes(kB, grp, lib, chain, {});
}

// The tile interpreter (kernels/cpu/fused_elementwise.h) runs one iteration
// space S: elementwise members produce S, reshape-like members copy
// S-sized values, reductions read S and are sinks (their result leaves the
// kernel).
absl::Status CpuElementwiseGroup(const Group& grp) {
  constexpr std::string_view kB = "braid's CPU elementwise executor";
  const Graph& g = grp.g();
  std::vector<int64_t> space;
  int64_t points = 0;
  for (OpId o : grp.ops()) {
    if (CpuElementwiseKind(g.op(o)) && grp.OutElements(o) > points) {
      points = grp.OutElements(o);
      space = grp.OutShape(o);
    }
  }
  if (points == 0) return Refuse(kB, "the group has no elementwise op");
  for (OpId o : grp.ops()) {
    const Op& op = g.op(o);
    if (op.outputs.size() != 1) {
      return Refuse(kB, absl::StrCat(Name(grp, o), " has several outputs"));
    }
    if (CpuElementwiseKind(op)) {
      if (grp.OutShape(o) != space) {
        return Refuse(kB, absl::StrCat(Name(grp, o), " computes [",
                                       absl::StrJoin(grp.OutShape(o), ","), "], not the kernel's [",
                                       absl::StrJoin(space, ","), "]"));
      }
    } else if (CpuReshapeKind(op)) {
      if (grp.OutElements(o) != points || op.inputs.empty() ||
          g.tensor(op.inputs[0]).NumElements() != points) {
        return Refuse(kB, absl::StrCat(Name(grp, o), " reshapes another size than the kernel's"));
      }
    } else if (CpuReduceSinkKind(op)) {
      if (op.inputs.empty() || g.tensor(op.inputs[0]).shape != space) {
        return Refuse(kB, absl::StrCat(Name(grp, o), " reduces another shape than the kernel's"));
      }
      if (!grp.Consumers(o).empty()) {
        return Refuse(kB, absl::StrCat("the result of ", Name(grp, o),
                                       " is used inside the group: reductions end a fused kernel"));
      }
    } else {
      return Refuse(kB, absl::StrCat(Name(grp, o), " has no fused form in braid's CPU executor"));
    }
  }
  return absl::OkStatus();
}

class CpuBackend final : public FusionBackend {
 public:
  std::string_view name() const override { return "cpu-braid"; }
  absl::Status CanImplement(const Graph& g, std::span<const OpId> ops) const override {
    Group grp(g, ops);
    if (grp.ops().size() <= 1) return absl::OkStatus();
    if (!AllF32(grp)) return Refuse("braid's CPU fused executor", "it runs fp32 groups only");
    for (OpId o : grp.ops()) {
      for (TensorId t : g.op(o).outputs) {
        if (g.tensor(t).NumElements() == 0) {
          return Refuse("braid's CPU fused executor", absl::StrCat(Name(grp, o), " has an empty output"));
        }
      }
    }
    std::vector<OpId> libs;
    for (OpId o : grp.ops()) {
      if (graph::IsLibraryKind(g.op(o).kind)) libs.push_back(o);
    }
    if (libs.size() > 1) {
      return Refuse("oneDNN", absl::StrCat("library ops ", Name(grp, libs[0]), " and ",
                                           Name(grp, libs[1]), " cannot share a primitive"));
    }
    if (libs.size() == 1) {
      absl::StatusOr<std::vector<OpId>> chain = EpilogueChain("oneDNN post-ops", grp, libs[0]);
      if (!chain.ok()) return chain.status();
      return CpuLibraryEpilogue(grp, libs[0], *chain);
    }
    return CpuElementwiseGroup(grp);
  }
};

}  // namespace

bool CpuElementwiseKind(const Op& op) {
  switch (op.kind) {
    case K::kAdd: case K::kSub: case K::kMul: case K::kDiv: case K::kPow:
      return op.inputs.size() == 2;
    case K::kMin: case K::kMax:
      return op.inputs.size() == 2;
    case K::kNeg: case K::kAbs: case K::kRelu: case K::kLeakyRelu: case K::kSqrt:
    case K::kReciprocal: case K::kExp: case K::kLog: case K::kTanh: case K::kSigmoid:
    case K::kErf: case K::kSoftplus: case K::kSin: case K::kCos: case K::kElu: case K::kSelu:
    case K::kHardSwish: case K::kSoftsign: case K::kFloor: case K::kCeil:
    case K::kRound: case K::kSign:
      return op.inputs.size() == 1;
    case K::kGelu:
      return op.inputs.size() == 1;
    case K::kPRelu:
      return op.inputs.size() == 2;
    // Gradients: (dY, saved) -> dX (graph/training_rules.cc).
    case K::kReluGrad: case K::kLeakyReluGrad: case K::kGeluGrad: case K::kSigmoidGrad:
    case K::kTanhGrad: case K::kEluGrad: case K::kSoftplusGrad: case K::kHardSwishGrad:
    case K::kExpGrad: case K::kLogGrad: case K::kSqrtGrad: case K::kReciprocalGrad:
    case K::kAbsGrad: case K::kErfGrad: case K::kSinGrad: case K::kCosGrad:
      return op.inputs.size() == 2;
    case K::kNegGrad:
      return op.inputs.size() >= 1;
    case K::kDivGrad:  // (dY, Y, B)
      return op.inputs.size() == 3;
    case K::kMinGrad: case K::kMaxGrad:  // (dY, X_i, Y)
      return op.inputs.size() == 3;
    case K::kMeanGrad:  // dY / count
      return op.inputs.size() == 1;
    default:
      return false;
  }
}

bool CpuReshapeKind(const Op& op) {
  return graph::IsOneOf(op.kind, {K::kReshape, K::kFlatten, K::kSqueeze, K::kUnsqueeze,
                                  K::kIdentity});
}

bool CpuReduceSinkKind(const Op& op) {
  return graph::IsOneOf(op.kind, {K::kReduceSum, K::kReduceMean, K::kReduceMax});
}

bool CpuPostOpKind(const Op& op) {
  if (op.inputs.size() != 1) return false;
  switch (op.kind) {
    // dnnl_eltwise_relu (alpha = slope), _gelu_erf / _gelu_tanh, _tanh,
    // _logistic, _exp, _log, _sqrt, _abs, _elu, _hardswish, _linear (Neg).
    case K::kRelu: case K::kLeakyRelu: case K::kGelu: case K::kTanh: case K::kSigmoid:
    case K::kExp: case K::kLog: case K::kSqrt: case K::kAbs: case K::kElu: case K::kHardSwish:
    case K::kNeg:
      return true;
    default:
      return false;
  }
}

const FusionBackend& GpuFusionBackend() {
  static const GpuBackend* b = new GpuBackend();
  return *b;
}

const FusionBackend& CpuFusionBackend() {
  static const CpuBackend* b = new CpuBackend();
  return *b;
}

std::optional<std::string> FusedMeasurementGap(const ClusterSpec& spec) {
  const int64_t cc = spec.device.compute_capability;
  if (spec.IsCpu() || cc == 0 || cc >= 75) return std::nullopt;
  return absl::StrCat("CUDA 13 builds for compute capability 7.5 and newer; ", spec.device.kind,
                      " is sm_", cc, ", so braid's CUDA kernels cannot measure its fused ops: "
                      "their costs stay priors or corrected rooflines");
}

const FusionBackend& BackendFor(const ClusterSpec& spec) {
  return spec.IsCpu() ? CpuFusionBackend() : GpuFusionBackend();
}

}  // namespace braid::costmodel
