#include "kernels/cpu/onednn_fused.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"

namespace braid::kernels::cpu {
namespace {

using Dims = std::vector<int64_t>;  // == dnnl::memory::dims
using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

const dnnl::engine& CpuEngine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// absl here predates absl::string_view == std::string_view.
std::string Name(EwCode code) { return std::string(EwName(code)); }

// ---- post-op lowering ------------------------------------------------------

// One oneDNN eltwise post-op: dst = scale * alg(dst; alpha, beta). The
// formulas are those of the 2.6 eltwise documentation (dnnl_types.h,
// dnnl_eltwise_desc_t) and were checked against ATen in onednn_fused_test.cc.
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0, scale = 1;
};

// The eltwise post-ops computing a unary code; false when oneDNN 2.6 has none.
// Finite inputs get ew_code.h's values. NaN does not always stay NaN: the JIT
// injector clamps with vmaxps/vminps, which return the non-NaN operand, so
// Relu (alpha 0) and HardSigmoid give 0, Clip its lower bound, Exp +inf
// (onednn_fused_test.cc pins this). Left out, with the reason:
//  - Erf, Sin, Cos, Softsign, Floor, Ceil, Sign: 2.6 has no such algorithm
//    (its eltwise kinds: relu, tanh, elu, square, abs, sqrt, linear,
//    bounded_relu, soft_relu, logistic, exp, gelu_tanh, swish, log, clip,
//    clip_v2, pow, gelu_erf, round, logsigmoid, mish, hardswish).
bool LowerUnary(const PostOp& op, std::vector<Eltwise>* steps) {
  using A = dnnl::algorithm;
  switch (op.code) {
    case EwCode::kCopy:
      return true;  // nothing to apply
    case EwCode::kNeg:
      *steps = {{A::eltwise_linear, -1.f, 0.f}};  // alpha x + beta
      return true;
    case EwCode::kAbs:
      *steps = {{A::eltwise_abs}};
      return true;
    case EwCode::kRelu:
      *steps = {{A::eltwise_relu, 0.f}};  // x > 0 ? x : alpha x
      return true;
    case EwCode::kLeakyRelu:
      *steps = {{A::eltwise_relu, op.p0}};
      return true;
    case EwCode::kSqrt:
      *steps = {{A::eltwise_sqrt}};
      return true;
    case EwCode::kReciprocal:
      // pow: alpha x^beta; the 2.6 JIT injector computes beta == -1 as a
      // division alpha / x, so 1/x is exact.
      *steps = {{A::eltwise_pow, 1.f, -1.f}};
      return true;
    case EwCode::kExp:
      *steps = {{A::eltwise_exp}};
      return true;
    case EwCode::kLog:
      *steps = {{A::eltwise_log}};
      return true;
    case EwCode::kTanh:
      *steps = {{A::eltwise_tanh}};
      return true;
    case EwCode::kSigmoid:
      *steps = {{A::eltwise_logistic}};  // 1 / (1 + exp(-x))
      return true;
    case EwCode::kSoftplus:
      // soft_relu in 2.6 is log(1 + exp(x)) switching to x above log(FLT_MAX)
      // (~88.7), not at torch's 20; for x in (20, 88.7] log1p(exp(x)) differs
      // from x by < exp(-20) = 2e-9, below half an ulp of x (>= 9.5e-7), so
      // the float results agree (the test covers that range).
      *steps = {{A::eltwise_soft_relu}};
      return true;
    case EwCode::kGelu:
      *steps = {{A::eltwise_gelu_erf}};
      return true;
    case EwCode::kGeluTanh:
      *steps = {{A::eltwise_gelu_tanh}};
      return true;
    case EwCode::kElu:
      *steps = {{A::eltwise_elu, op.p0}};  // x > 0 ? x : alpha (exp(x) - 1)
      return true;
    case EwCode::kSelu:
      // elu with alpha, then the eltwise post-op's own output scale (2.6's
      // append_eltwise(scale, ...)).
      *steps = {{A::eltwise_elu, 1.6732632423543772f, 0.f, 1.0507009873554805f}};
      return true;
    case EwCode::kHardSigmoid:
      // 2.6 has no hardsigmoid (3.0 added it): clamp(p0 x + p1, 0, 1) as linear, clip.
      *steps = {{A::eltwise_linear, op.p0, op.p1}, {A::eltwise_clip, 0.f, 1.f}};
      return true;
    case EwCode::kHardSwish:
      *steps = {{A::eltwise_hardswish}};  // 2.6: x * relu6(x + 3) / 6, no parameters
      return true;
    case EwCode::kRound:
      *steps = {{A::eltwise_round}};  // nearest, halves to even (nearbyintf / vroundps)
      return true;
    case EwCode::kClip:
      *steps = {{A::eltwise_clip, op.p0, op.p1}};  // min(max(x, alpha), beta)
      return true;
    case EwCode::kAffine:
      *steps = {{A::eltwise_linear, op.p0, op.p1}};
      return true;
    default:
      return false;
  }
}

// The binary post-op algorithm of a binary code (dst = dst op src1). Min and
// Max return src1 when dst is NaN (a NaN src1 propagates). Left out:
//  - Pow: 2.6's binary kinds are add, mul, max, min, div, sub and comparisons.
//  - PRelu: 2.6 has a prelu post-op, but with it matmul and convolution both
//    fall back to oneDNN's reference kernel (ref:any), measured ~700x slower
//    than brgemm for a 64x1024x1024 matmul.
//  - The gradient and ternary codes select on a third value (b > 0 ? a : 0),
//    which no sequence of dst op src1 steps forms.
bool LowerBinary(EwCode code, dnnl::algorithm* alg) {
  using A = dnnl::algorithm;
  switch (code) {
    case EwCode::kAdd:
      *alg = A::binary_add;
      return true;
    case EwCode::kSub:
      *alg = A::binary_sub;
      return true;
    case EwCode::kMul:
      *alg = A::binary_mul;
      return true;
    case EwCode::kDiv:
      *alg = A::binary_div;
      return true;
    case EwCode::kMin:
      *alg = A::binary_min;
      return true;
    case EwCode::kMax:
      *alg = A::binary_max;
      return true;
    default:
      return false;
  }
}

// Where Run() finds a binary post-op's second operand.
struct BinaryArg {
  int po_index;  // index in oneDNN's post-op chain
  int extra;     // index into the extras, or kCOperand
};
constexpr int kCOperand = -1;

absl::Status ValidatePostOps(const std::vector<PostOp>& ops, size_t num_extras) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const PostOp& op = ops[i];
    if (op.code >= EwCode::kCount) {
      return absl::InvalidArgumentError(
          absl::StrCat("post_ops[", i, "]: invalid EwCode ", static_cast<int>(op.code)));
    }
    const int arity = EwArity(op.code);
    if (arity == 1 && op.extra != -1) {
      return absl::InvalidArgumentError(absl::StrCat("post_ops[", i, "] (", Name(op.code),
                                                     ") is unary but names extra ", op.extra));
    }
    if (arity > 1 && (op.extra < 0 || op.extra >= static_cast<int>(num_extras))) {
      return absl::InvalidArgumentError(absl::StrCat("post_ops[", i, "] (", Name(op.code),
                                                     "): extra ", op.extra, " is not one of the ",
                                                     num_extras, " extras"));
    }
  }
  return absl::OkStatus();
}

// Appends `ops` to `po`; extra_mds[i] describes extras[i] as oneDNN sees it.
absl::Status AppendPostOps(const std::vector<PostOp>& ops,
                           const std::vector<memory::desc>& extra_mds, dnnl::post_ops* po,
                           std::vector<BinaryArg>* binary_args) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const PostOp& op = ops[i];
    std::vector<Eltwise> steps;
    dnnl::algorithm alg;
    if (EwArity(op.code) == 1 && LowerUnary(op, &steps)) {
      for (const Eltwise& s : steps) po->append_eltwise(s.scale, s.alg, s.alpha, s.beta);
    } else if (LowerBinary(op.code, &alg)) {
      binary_args->push_back({po->len(), op.extra});
      po->append_binary(alg, extra_mds[op.extra]);
    } else {
      return absl::UnimplementedError(absl::StrCat("post_ops[", i, "] (", Name(op.code),
                                                   "): oneDNN 2.6 has no post-op computing it"));
    }
  }
  return absl::OkStatus();
}

// ---- shapes ---------------------------------------------------------------

std::string DimsStr(const Dims& d) { return absl::StrCat("[", absl::StrJoin(d, ","), "]"); }

Dims PadLeft(const Dims& d, size_t rank) {
  Dims r(rank - std::min(rank, d.size()), 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

bool BroadcastsTo(const Dims& from, const Dims& to) {
  if (from.size() > to.size()) return false;
  const Dims p = PadLeft(from, to.size());
  for (size_t i = 0; i < to.size(); ++i) {
    if (p[i] != 1 && p[i] != to[i]) return false;
  }
  return true;
}

Dims RowMajorStrides(const Dims& d) {
  Dims s(d.size());
  int64_t step = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = step;
    step *= d[i];
  }
  return s;
}

memory::desc PlainDesc(const Dims& d) { return memory::desc(d, kF32, RowMajorStrides(d)); }

absl::Status CheckDims(const std::string& what, const Dims& d) {
  for (int64_t v : d) {
    if (v < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, " ", DimsStr(d), ": negative dim"));
    if (v == 0) return absl::UnimplementedError(absl::StrCat(what, " ", DimsStr(d), ": zero-size"));
  }
  return absl::OkStatus();
}

absl::Status CheckExtras(const std::vector<Dims>& extras, const Dims& y) {
  for (size_t i = 0; i < extras.size(); ++i) {
    RETURN_IF_ERROR(CheckDims(absl::StrCat("extras[", i, "]"), extras[i]));
    if (!BroadcastsTo(extras[i], y)) {
      return absl::InvalidArgumentError(absl::StrCat("extras[", i, "] ", DimsStr(extras[i]),
                                                     " does not broadcast to Y ", DimsStr(y)));
    }
  }
  return absl::OkStatus();
}

// The tensor Run() hands oneDNN: `t` checked against the spec and made
// contiguous (a copy only when it is not).
absl::StatusOr<at::Tensor> Input(const std::string& what, const at::Tensor& t, const Dims& shape) {
  if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != at::kFloat) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": need a defined float32 CPU tensor"));
  }
  const bool rank0_scalar = t.dim() == 0 && shape == Dims{1};
  if (!rank0_scalar &&
      !std::equal(t.sizes().begin(), t.sizes().end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has shape ", DimsStr(t.sizes().vec()),
                                                   ", the spec says ", DimsStr(shape)));
  }
  return t.contiguous();
}

absl::StatusOr<std::vector<at::Tensor>> Inputs(std::span<const at::Tensor> extras,
                                               const std::vector<Dims>& shapes) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < extras.size(); ++i) {
    ASSIGN_OR_RETURN(at::Tensor t, Input(absl::StrCat("extras[", i, "]"), extras[i], shapes[i]));
    out.push_back(std::move(t));
  }
  return out;
}

memory Wrap(const memory::desc& md, const at::Tensor& t) {
  // oneDNN only reads its inputs; memory objects take a non-const pointer.
  return memory(md, CpuEngine(), const_cast<void*>(t.data_ptr()));
}

// The calling thread's stream: a CPU stream is an in-order queue that runs
// primitives synchronously, one per thread avoids sharing it.
dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

at::Tensor Bytes(const memory::desc& md) {
  return at::empty({static_cast<int64_t>(md.get_size())}, at::kByte);
}

void AppendOps(std::string* out, const std::vector<Dims>& extras, const std::vector<PostOp>& ops) {
  auto bits = [](float f) { return absl::Hex(std::bit_cast<uint32_t>(f)); };
  absl::StrAppend(out, " extras=");
  for (const Dims& e : extras) absl::StrAppend(out, DimsStr(e));
  absl::StrAppend(out, " ops=");
  for (const PostOp& op : ops) {
    absl::StrAppend(out, Name(op.code), "(", bits(op.p0), ",", bits(op.p1), ",", op.extra, ")");
  }
}

// ---- the process-wide cache -----------------------------------------------

// Keyed by signature AND the caller's intra-op thread count. oneDNN's OpenMP
// runtime sizes its parallel regions with omp_get_max_threads() (which
// at::set_num_threads sets), but some 2.6 kernels fix the count when the
// primitive is created: measured, a jit:avx512_core convolution created under
// 2 threads still runs on 2 after omp_set_num_threads(1), while brgemm matmul
// follows the count at execution. A primitive built under the caller's count
// runs on at most that many threads.
template <typename T>
class Cache {
 public:
  template <typename Spec, typename Make>
  absl::StatusOr<std::shared_ptr<const T>> Get(const Spec& spec, Make make) {
    std::string key = absl::StrCat(spec.Signature(), " threads=", at::get_num_threads());
    // Held while creating, so each key's primitive is built exactly once;
    // refusals are cached too (oneDNN tries every implementation to refuse).
    absl::MutexLock lock(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) it = map_.emplace(std::move(key), make(spec)).first;
    return it->second;
  }

 private:
  absl::Mutex mu_;
  std::unordered_map<std::string, absl::StatusOr<std::shared_ptr<const T>>> map_
      ABSL_GUARDED_BY(mu_);
};

absl::Status FromDnnl(const dnnl::error& e, const std::string& what, absl::StatusCode code) {
  return absl::Status(code, absl::StrCat(what, ": oneDNN 2.6: ", e.what(), " (dnnl_status ",
                                         static_cast<int>(e.status), ")"));
}

// oneDNN quietly falls back to its reference kernels (impl "ref:any") for
// post-op or broadcast patterns the JIT kernels lack; they are 100-1000x
// slower than the separate LibTorch ops, so they count as refusals.
bool IsReference(const std::string& impl) { return absl::StartsWith(impl, "ref"); }

}  // namespace

bool OneDnnPostOpSupported(EwCode code) {
  if (code >= EwCode::kCount) return false;
  std::vector<Eltwise> steps;
  dnnl::algorithm alg;
  return (EwArity(code) == 1 && LowerUnary(PostOp{code}, &steps)) || LowerBinary(code, &alg);
}

std::string MatMulSpec::Signature() const {
  std::string s = absl::StrCat(
      "matmul a=", DimsStr(a), " b=", DimsStr(b), " ta=", trans_a, " tb=", trans_b,
      " alpha=", absl::Hex(std::bit_cast<uint32_t>(alpha)),
      " beta=", absl::Hex(std::bit_cast<uint32_t>(beta)), " c=", c.empty() ? "none" : DimsStr(c));
  AppendOps(&s, extras, post_ops);
  return s;
}

std::string ConvSpec::Signature() const {
  std::string s =
      absl::StrCat("conv x=", DimsStr(x), " w=", DimsStr(w), " bias=", has_bias,
                   " s=", DimsStr(strides), " d=", DimsStr(dilations), " pb=", DimsStr(pads_begin),
                   " pe=", DimsStr(pads_end), " g=", groups);
  AppendOps(&s, extras, post_ops);
  return s;
}

// ============================================================================
// MatMul
// ============================================================================

struct OneDnnMatMul::State {
  std::string impl;
  dnnl::matmul prim;
  memory::desc a_md, b_md, c_md, y_md, scratchpad_md;
  std::vector<memory::desc> extra_mds;
  std::vector<BinaryArg> binary_args;
  bool c_via_sum = false;  // C is preloaded into Y and added by a sum post-op
};

namespace {

// Y's shape: the broadcast batch dims, then M, N.
absl::StatusOr<Dims> MatMulOutput(const MatMulSpec& s) {
  if (s.a.size() < 2 || s.b.size() < 2) {
    return absl::UnimplementedError(absl::StrCat("MatMul with a 1-D operand (A ", DimsStr(s.a),
                                                 ", B ", DimsStr(s.b), "): reshape it to 2-D"));
  }
  RETURN_IF_ERROR(CheckDims("A", s.a));
  RETURN_IF_ERROR(CheckDims("B", s.b));
  const size_t ra = s.a.size(), rb = s.b.size(), r = std::max(ra, rb);
  if (r > DNNL_MAX_NDIMS) {
    return absl::UnimplementedError(absl::StrCat("MatMul of rank ", r, " > ", DNNL_MAX_NDIMS));
  }
  const int64_t m = s.trans_a ? s.a[ra - 1] : s.a[ra - 2];
  const int64_t k = s.trans_a ? s.a[ra - 2] : s.a[ra - 1];
  const int64_t kb = s.trans_b ? s.b[rb - 1] : s.b[rb - 2];
  const int64_t n = s.trans_b ? s.b[rb - 2] : s.b[rb - 1];
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul: op(A) ", DimsStr(s.a), " has K ", k,
                                                   ", op(B) ", DimsStr(s.b), " has K ", kb));
  }
  const Dims a = PadLeft(s.a, r), b = PadLeft(s.b, r);
  Dims y(r);
  for (size_t i = 0; i + 2 < r; ++i) {
    if (a[i] != b[i] && a[i] != 1 && b[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul: batch dims of A ", DimsStr(s.a),
                                                     " and B ", DimsStr(s.b), " do not broadcast"));
    }
    y[i] = std::max(a[i], b[i]);
  }
  y[r - 2] = m;
  y[r - 1] = n;
  return y;
}

// op(X) as oneDNN sees it: `shape` is contiguous; a transpose swaps the last
// two dims and their strides (matmul accepts any strides for src/weights).
memory::desc OperandDesc(const Dims& shape, bool trans, size_t rank) {
  Dims d = PadLeft(shape, rank), st = RowMajorStrides(d);
  if (trans) {
    std::swap(d[rank - 1], d[rank - 2]);
    std::swap(st[rank - 1], st[rank - 2]);
  }
  return memory::desc(d, kF32, st);
}

absl::StatusOr<std::shared_ptr<const OneDnnMatMul>> MakeMatMul(const MatMulSpec& s) {
  ASSIGN_OR_RETURN(Dims y, MatMulOutput(s));
  if (!s.c.empty()) {
    RETURN_IF_ERROR(CheckDims("C", s.c));
    if (!BroadcastsTo(s.c, y)) {
      return absl::InvalidArgumentError(
          absl::StrCat("C ", DimsStr(s.c), " does not broadcast to Y ", DimsStr(y)));
    }
  }
  RETURN_IF_ERROR(CheckExtras(s.extras, y));
  RETURN_IF_ERROR(ValidatePostOps(s.post_ops, s.extras.size()));

  // Plain strided descriptors throughout, so the matmul reads the caller's
  // memory: with weights `any`, 2.6's brgemm picks the plain layout anyway
  // (measured for the benchmark's 1024x1024 B), and op(A)/op(B) transposes
  // are just swapped strides.
  // 2-D problems run as [1, M, N]: brgemm matmul in 2.6 treats dim 1 as the
  // "channel" of its binary-post-op broadcast strategies, so a [M, 1]
  // operand is per-channel in 3-D but falls back to ref:any in 2-D; [1, N],
  // full and scalar operands stay on brgemm either way (measured).
  const size_t r = std::max<size_t>(y.size(), 3);
  auto st = std::make_unique<OneDnnMatMul::State>();
  st->a_md = OperandDesc(s.a, s.trans_a, r);
  st->b_md = OperandDesc(s.b, s.trans_b, r);
  st->y_md = PlainDesc(PadLeft(y, r));
  for (const Dims& e : s.extras) st->extra_mds.push_back(PlainDesc(PadLeft(e, r)));
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-Run buffers: thread-safe
    // alpha: output scales apply to the accumulator before any post-op.
    if (s.alpha != 1.f) attr.set_output_scales(0, {s.alpha});
    dnnl::post_ops po;
    // beta C: with beta 1 a binary add reads C in place, in any broadcast
    // form. Binary post-ops take no scale in 2.6, so other betas use the sum
    // post-op (dst = acc + beta dst), with Y preloaded with C. The matmul
    // bias argument is no option: it is added before the output scale, and
    // brgemm takes only a [.., 1, N] bias (others run ref:any).
    if (!s.c.empty() && s.beta != 0.f) {
      if (s.beta == 1.f) {
        st->c_md = PlainDesc(PadLeft(s.c, r));
        st->binary_args.push_back({po.len(), kCOperand});
        po.append_binary(dnnl::algorithm::binary_add, st->c_md);
      } else {
        po.append_sum(s.beta);
        st->c_via_sum = true;
      }
    }
    RETURN_IF_ERROR(AppendPostOps(s.post_ops, st->extra_mds, &po, &st->binary_args));
    attr.set_post_ops(po);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(st->a_md, st->b_md, st->y_md), attr,
                                    CpuEngine());
    st->impl = pd.impl_info_str();
    if (IsReference(st->impl)) {
      return absl::UnimplementedError(
          absl::StrCat(s.Signature(), ": oneDNN 2.6 has only its reference kernel (", st->impl,
                       ") for this broadcast / post-op pattern"));
    }
    st->scratchpad_md = pd.scratchpad_desc();
    st->prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    return FromDnnl(e, s.Signature(), absl::StatusCode::kUnimplemented);
  }
  return std::make_shared<const OneDnnMatMul>(s, std::move(y), std::move(st));
}

}  // namespace

OneDnnMatMul::OneDnnMatMul(MatMulSpec spec, std::vector<int64_t> y, std::unique_ptr<State> state)
    : spec_(std::move(spec)), y_(std::move(y)), state_(std::move(state)) {}
OneDnnMatMul::~OneDnnMatMul() = default;
const std::string& OneDnnMatMul::impl() const { return state_->impl; }

absl::StatusOr<std::shared_ptr<const OneDnnMatMul>> OneDnnMatMul::Get(const MatMulSpec& s) {
  static auto* cache = new Cache<OneDnnMatMul>;
  return cache->Get(s, MakeMatMul);
}

absl::StatusOr<at::Tensor> OneDnnMatMul::Run(const at::Tensor& a, const at::Tensor& b,
                                             const at::Tensor* c,
                                             std::span<const at::Tensor> extras) const {
  if ((c != nullptr) != !spec_.c.empty() || extras.size() != spec_.extras.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul Run: got ", c ? "a" : "no", " C and ", extras.size(), " extras; the spec has ",
        spec_.c.empty() ? "no" : "a", " C and ", spec_.extras.size()));
  }
  // A thread's OpenMP thread count starts at the core count; LibTorch applies
  // at::set_num_threads to a thread lazily, before its first parallel region.
  // oneDNN reads omp_get_max_threads() directly, so apply it here too.
  at::internal::lazy_init_num_threads();
  try {
    ASSIGN_OR_RETURN(at::Tensor ac, Input("A", a, spec_.a));
    ASSIGN_OR_RETURN(at::Tensor bc, Input("B", b, spec_.b));
    at::Tensor cc;
    if (c != nullptr) {
      ASSIGN_OR_RETURN(cc, Input("C", *c, spec_.c));
    }
    ASSIGN_OR_RETURN(std::vector<at::Tensor> ec, Inputs(extras, spec_.extras));
    const State& st = *state_;
    at::Tensor y = at::empty(y_, ac.options());
    if (st.c_via_sum) y.copy_(cc.expand(y_));
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, Wrap(st.a_md, ac)},
        {DNNL_ARG_WEIGHTS, Wrap(st.b_md, bc)},
        {DNNL_ARG_DST, Wrap(st.y_md, y)},
    };
    for (const BinaryArg& arg : st.binary_args) {
      const bool is_c = arg.extra == kCOperand;
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(arg.po_index) | DNNL_ARG_SRC_1,
                   Wrap(is_c ? st.c_md : st.extra_mds[arg.extra], is_c ? cc : ec[arg.extra]));
    }
    at::Tensor scratchpad;
    if (st.scratchpad_md.get_size() > 0) {
      scratchpad = Bytes(st.scratchpad_md);
      args.emplace(DNNL_ARG_SCRATCHPAD, Wrap(st.scratchpad_md, scratchpad));
    }
    dnnl::stream& stream = ThreadStream();
    st.prim.execute(stream, args);
    stream.wait();
    return y;
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "MatMul Run", absl::StatusCode::kInternal);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("MatMul Run: ", e.what_without_backtrace()));
  }
}

// ============================================================================
// Convolution
// ============================================================================

struct OneDnnConv::State {
  std::string impl, layout;
  dnnl::convolution_forward prim;
  // *_plain: the NCHW/OIHW tensors Run() gets; *_md: what the kernel wants.
  memory::desc x_plain, x_md, w_plain, w_md, b_md, y_plain, y_md, scratchpad_md;
  std::optional<dnnl::reorder> x_reorder, w_reorder, y_reorder;
  struct Extra {
    memory::desc plain, md;
    std::optional<dnnl::reorder> reorder;
  };
  std::vector<Extra> extras;
  std::vector<BinaryArg> binary_args;
};

namespace {

absl::StatusOr<Dims> ConvOutput(const ConvSpec& s) {
  if (s.x.size() != 4 || s.w.size() != 4) {
    return absl::UnimplementedError(
        absl::StrCat("Conv: only 2-D (X ", DimsStr(s.x), ", W ", DimsStr(s.w), ")"));
  }
  RETURN_IF_ERROR(CheckDims("X", s.x));
  RETURN_IF_ERROR(CheckDims("W", s.w));
  for (const auto* v : {&s.strides, &s.dilations, &s.pads_begin, &s.pads_end}) {
    if (v->size() != 2)
      return absl::InvalidArgumentError("Conv: strides/dilations/pads need 2 values");
  }
  const int64_t g = s.groups;
  if (g < 1 || s.x[1] % g != 0 || s.w[0] % g != 0 || s.w[1] * g != s.x[1]) {
    return absl::InvalidArgumentError(absl::StrCat("Conv: X ", DimsStr(s.x), ", W ", DimsStr(s.w),
                                                   " and groups ", g, " disagree"));
  }
  Dims y = {s.x[0], s.w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (s.strides[i] < 1 || s.dilations[i] < 1 || s.pads_begin[i] < 0 || s.pads_end[i] < 0) {
      return absl::InvalidArgumentError("Conv: strides and dilations must be >= 1, pads >= 0");
    }
    const int64_t span = s.dilations[i] * (s.w[2 + i] - 1) + 1;
    const int64_t room = s.x[2 + i] + s.pads_begin[i] + s.pads_end[i] - span;
    if (room < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Conv: kernel ", DimsStr(s.w), " does not fit the padded input ", DimsStr(s.x)));
    }
    y[2 + i] = room / s.strides[i] + 1;
  }
  return y;
}

// Activation layouts to try, fastest first. For 2.6 on AVX-512, plain NCHW
// has only im2col gemm:jit; the direct kernels want nChw16c or nhwc. The
// layout study of braid-onednn-fused-bench (16x64x56x56 3x3, one thread,
// reorders of X and Y included) measured nChw16c (jit:avx512_core) 1.74-1.82x
// and nhwc (brgconv) 1.60-1.67x faster than plain NCHW; mixed layouts (NCHW
// in, blocked out) are ref:any only. A blocked layout counts only with a
// direct kernel: gemm behind reorders is slower than gemm on NCHW.
struct Layout {
  Tag tag;
  const char* name;
};
constexpr Layout kLayouts[] = {{Tag::nChw16c, "nChw16c"}, {Tag::nhwc, "nhwc"}, {Tag::nchw, "nchw"}};

std::optional<dnnl::reorder> MaybeReorder(const memory::desc& from, const memory::desc& to,
                                          const dnnl::primitive_attr& attr,
                                          memory::desc* scratchpad) {
  if (from == to) return std::nullopt;
  dnnl::reorder::primitive_desc pd(CpuEngine(), from, CpuEngine(), to, attr);
  if (pd.scratchpad_desc().get_size() > scratchpad->get_size()) *scratchpad = pd.scratchpad_desc();
  return dnnl::reorder(pd);
}

absl::StatusOr<std::shared_ptr<const OneDnnConv>> MakeConv(const ConvSpec& s) {
  ASSIGN_OR_RETURN(Dims y, ConvOutput(s));
  RETURN_IF_ERROR(CheckExtras(s.extras, y));
  RETURN_IF_ERROR(ValidatePostOps(s.post_ops, s.extras.size()));
  const int64_t g = s.groups;
  // Grouped weights are 5-D [g, O/g, C/g, kh, kw] (goihw): the same memory as
  // the OIHW tensor.
  const Dims w = g == 1 ? s.w : Dims{g, s.w[0] / g, s.w[1], s.w[2], s.w[3]};
  const Dims dil = {s.dilations[0] - 1, s.dilations[1] - 1};  // oneDNN: 0 = dense
  std::vector<std::string> refusals;
  for (const Layout& layout : kLayouts) {
    auto st = std::make_unique<OneDnnConv::State>();
    st->layout = layout.name;
    st->x_plain = PlainDesc(s.x);
    st->w_plain = PlainDesc(w);
    st->y_plain = PlainDesc(y);
    std::vector<memory::desc> extra_mds;
    for (const Dims& e : s.extras) {
      const Dims e4 = PadLeft(e, 4);
      OneDnnConv::State::Extra& x = st->extras.emplace_back();
      x.plain = PlainDesc(e4);
      // The direct kernels read a full-size operand only in dst's own layout
      // (a plain NCHW one sends them to ref:any); broadcast ones stay plain.
      x.md = e4 == y ? memory::desc(y, kF32, layout.tag) : x.plain;
      extra_mds.push_back(x.md);
    }
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::post_ops po;
      RETURN_IF_ERROR(AppendPostOps(s.post_ops, extra_mds, &po, &st->binary_args));
      attr.set_post_ops(po);
      const memory::desc x_md(s.x, kF32, layout.tag), y_md(y, kF32, layout.tag);
      // Weights `any`: the kernel's blocked layout, reordered on every Run.
      // Measured 0.006 ms for 64x64x3x3 against a 33 ms convolution; weights
      // change every training step, so a cached reorder would not pay.
      const memory::desc w_md(w, kF32, Tag::any);
      const auto prop = dnnl::prop_kind::forward_inference;
      const auto alg = dnnl::algorithm::convolution_direct;
      auto desc = s.has_bias
                      ? dnnl::convolution_forward::desc(prop, alg, x_md, w_md,
                                                        memory::desc({s.w[0]}, kF32, Tag::x), y_md,
                                                        s.strides, dil, s.pads_begin, s.pads_end)
                      : dnnl::convolution_forward::desc(prop, alg, x_md, w_md, y_md, s.strides, dil,
                                                        s.pads_begin, s.pads_end);
      dnnl::convolution_forward::primitive_desc pd(desc, attr, CpuEngine());
      st->impl = pd.impl_info_str();
      const bool plain = layout.tag == Tag::nchw;
      if (IsReference(st->impl) || (!plain && absl::StrContains(st->impl, "gemm"))) {
        refusals.push_back(absl::StrCat(layout.name, ": ", st->impl));
        continue;
      }
      st->x_md = pd.src_desc();
      st->w_md = pd.weights_desc();
      st->b_md = pd.bias_desc();
      st->y_md = pd.dst_desc();
      st->scratchpad_md = pd.scratchpad_desc();
      dnnl::primitive_attr reorder_attr;
      reorder_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      memory::desc* pad = &st->scratchpad_md;
      st->x_reorder = MaybeReorder(st->x_plain, st->x_md, reorder_attr, pad);
      st->w_reorder = MaybeReorder(st->w_plain, st->w_md, reorder_attr, pad);
      st->y_reorder = MaybeReorder(st->y_md, st->y_plain, reorder_attr, pad);
      for (auto& e : st->extras) e.reorder = MaybeReorder(e.plain, e.md, reorder_attr, pad);
      st->prim = dnnl::convolution_forward(pd);
    } catch (const dnnl::error& e) {
      refusals.push_back(absl::StrCat(layout.name, ": ", e.what(), " (dnnl_status ",
                                      static_cast<int>(e.status), ")"));
      continue;
    }
    return std::make_shared<const OneDnnConv>(s, std::move(y), std::move(st));
  }
  return absl::UnimplementedError(absl::StrCat(s.Signature(),
                                               ": oneDNN 2.6 has no optimized kernel for it (",
                                               absl::StrJoin(refusals, "; "), ")"));
}

}  // namespace

OneDnnConv::OneDnnConv(ConvSpec spec, std::vector<int64_t> y, std::unique_ptr<State> state)
    : spec_(std::move(spec)), y_(std::move(y)), state_(std::move(state)) {}
OneDnnConv::~OneDnnConv() = default;
const std::string& OneDnnConv::impl() const { return state_->impl; }
const std::string& OneDnnConv::layout() const { return state_->layout; }

absl::StatusOr<std::shared_ptr<const OneDnnConv>> OneDnnConv::Get(const ConvSpec& s) {
  static auto* cache = new Cache<OneDnnConv>;
  return cache->Get(s, MakeConv);
}

absl::StatusOr<at::Tensor> OneDnnConv::Run(const at::Tensor& x, const at::Tensor& w,
                                           const at::Tensor* bias,
                                           std::span<const at::Tensor> extras) const {
  if ((bias != nullptr) != spec_.has_bias || extras.size() != spec_.extras.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv Run: got ", bias ? "a" : "no", " bias and ", extras.size(), " extras; the spec has ",
        spec_.has_bias ? "a" : "no", " bias and ", spec_.extras.size()));
  }
  at::internal::lazy_init_num_threads();  // as in OneDnnMatMul::Run
  try {
    ASSIGN_OR_RETURN(at::Tensor xc, Input("X", x, spec_.x));
    ASSIGN_OR_RETURN(at::Tensor wc, Input("W", w, spec_.w));
    at::Tensor bc;
    if (bias != nullptr) {
      ASSIGN_OR_RETURN(bc, Input("B", *bias, {spec_.w[0]}));
    }
    ASSIGN_OR_RETURN(std::vector<at::Tensor> ec, Inputs(extras, spec_.extras));
    const State& st = *state_;
    dnnl::stream& stream = ThreadStream();
    at::Tensor scratchpad = Bytes(st.scratchpad_md);
    const memory pad = Wrap(st.scratchpad_md, scratchpad);
    // Runs `reorder` (if any) from `t` into a fresh buffer; the memory the
    // convolution reads. `keep` holds the buffer until the end of Run.
    std::vector<at::Tensor> keep;
    auto in = [&](const std::optional<dnnl::reorder>& reorder, const memory::desc& plain,
                  const memory::desc& md, const at::Tensor& t) {
      if (!reorder) return Wrap(md, t);
      const memory to = Wrap(md, keep.emplace_back(Bytes(md)));
      reorder->execute(
          stream, {{DNNL_ARG_FROM, Wrap(plain, t)}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, pad}});
      return to;
    };
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, in(st.x_reorder, st.x_plain, st.x_md, xc)},
        {DNNL_ARG_WEIGHTS, in(st.w_reorder, st.w_plain, st.w_md, wc)},
        {DNNL_ARG_SCRATCHPAD, pad},
    };
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, Wrap(st.b_md, bc));
    std::vector<std::optional<memory>> extra_mem(extras.size());
    for (const BinaryArg& arg : st.binary_args) {
      std::optional<memory>& m = extra_mem[arg.extra];
      if (!m) {
        const State::Extra& e = st.extras[arg.extra];
        m = in(e.reorder, e.plain, e.md, ec[arg.extra]);
      }
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(arg.po_index) | DNNL_ARG_SRC_1, *m);
    }
    at::Tensor y = at::empty(y_, xc.options());
    const memory y_plain = Wrap(st.y_plain, y);
    const memory y_dev = st.y_reorder ? Wrap(st.y_md, keep.emplace_back(Bytes(st.y_md))) : y_plain;
    args.emplace(DNNL_ARG_DST, y_dev);
    st.prim.execute(stream, args);
    if (st.y_reorder) {
      st.y_reorder->execute(
          stream, {{DNNL_ARG_FROM, y_dev}, {DNNL_ARG_TO, y_plain}, {DNNL_ARG_SCRATCHPAD, pad}});
    }
    stream.wait();
    return y;
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "Conv Run", absl::StatusCode::kInternal);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Conv Run: ", e.what_without_backtrace()));
  }
}

}  // namespace braid::kernels::cpu
