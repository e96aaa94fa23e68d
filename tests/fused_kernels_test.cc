// Every fused CPU kernel equals op-by-op execution of its members with the
// single-op kernels (worker/cpu_kernels.h) on the same inputs (shared
// TensorSlots): each elementwise kind, each post-op after MatMul and Conv,
// and every group braid's search and the XLA baseline plan on cpu-local for
// five real models (an MLP, a transformer encoder, ResNet-18 in training
// form, MobileNetV3-small and ResNet-50 with folded batch norms: their
// Conv + bias + Relu groups).
#include "worker/fused_kernels.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/fusion_backend.h"
#include "costmodel/op_cost.h"
#include "gmock/gmock.h"
#include "graph/model_source.h"
#include "graph/op_kind.h"
#include "graph/training.h"
#include "gtest/gtest.h"
#include "kernels/cpu/onednn_fused.h"
#include "search/backtracking.h"

namespace braid::worker {
namespace {

using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;
using graph::TensorRole;
using kernels::EwCode;
using ::testing::HasSubstr;

// |got - want| <= rtol (|want| + m), m the median |want| over the finite
// non-zero elements (zeros excluded: half of a Relu's output): relative
// where values are of the tensor's typical size, and an absolute floor of
// the same relative size where a result cancels to near zero (sin at a
// multiple of pi, a GEMM's sum of mixed signs) and only the absolute
// rounding of its terms is left. NaN matches NaN (log of a negative input
// in both), inf the same inf.
::testing::AssertionResult Close(const at::Tensor& got, const at::Tensor& want, double rtol) {
  if (!got.defined() || got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << (got.defined() ? absl::StrJoin(got.sizes(), ",") : "undefined")
           << " != " << absl::StrJoin(want.sizes(), ",");
  }
  const at::Tensor g = got.contiguous().to(at::kDouble);
  const at::Tensor w = want.contiguous().to(at::kDouble);
  const double* gp = g.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  std::vector<double> mags;
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (std::isfinite(wp[i]) && wp[i] != 0) mags.push_back(std::fabs(wp[i]));
  }
  double median = 0;
  if (!mags.empty()) {
    std::nth_element(mags.begin(), mags.begin() + mags.size() / 2, mags.end());
    median = mags[mags.size() / 2];
  }
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (gp[i] == wp[i] || (std::isnan(gp[i]) && std::isnan(wp[i]))) continue;
    if (std::fabs(gp[i] - wp[i]) <= rtol * (std::fabs(wp[i]) + median)) continue;
    return ::testing::AssertionFailure()
           << "element " << i << " of " << g.numel() << ": fused " << gp[i] << ", op-by-op "
           << wp[i] << " (median |x| " << median << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

// The op's single-op kernel reading `slots`. MakeCpuKernel has no mapping
// for a few kinds the fused executor runs (Selu, Softsign, Round, Sign,
// PRelu); their reference is the ATen formula written here.
absl::StatusOr<std::function<at::Tensor()>> Reference(const Graph& g, OpId id, TensorSlots* slots) {
  absl::StatusOr<CpuKernel> k = MakeCpuKernel(g, id, slots);
  if (k.ok()) return k->run;
  if (k.status().code() != absl::StatusCode::kUnimplemented) return k.status();
  const graph::Op& op = g.op(id);
  at::Tensor x = slots->Get(op.inputs[0], g.tensor(op.inputs[0]));
  switch (op.kind) {
    case OpKind::kSelu: return [x] { return at::selu(x); };
    case OpKind::kSoftsign: return [x] { return x / (x.abs() + 1); };
    case OpKind::kRound: return [x] { return at::round(x); };
    case OpKind::kSign: return [x] { return at::sign(x); };
    case OpKind::kPRelu: {
      at::Tensor slope = slots->Get(op.inputs[1], g.tensor(op.inputs[1]));
      return [x, slope] { return at::where(x > 0, x, x * slope); };
    }
    default: return k.status();
  }
}

// Runs `ops` (in topological order) one by one, each output bound to its
// slot for the ops after it, as the executor does. All kernels are made
// before the first runs so that every slot a member reads exists; `prepare`
// may then adjust input values. Returns each member output's value.
absl::StatusOr<std::map<TensorId, at::Tensor>> RunOpByOp(
    const Graph& g, const std::vector<OpId>& ops, TensorSlots* slots,
    const std::function<void(TensorSlots*)>& prepare = nullptr) {
  std::vector<std::function<at::Tensor()>> runs;
  for (OpId o : ops) {
    absl::StatusOr<std::function<at::Tensor()>> r = Reference(g, o, slots);
    if (!r.ok()) return r.status();
    runs.push_back(*r);
  }
  if (prepare) prepare(slots);
  std::map<TensorId, at::Tensor> values;
  for (size_t i = 0; i < ops.size(); ++i) {
    at::Tensor y = runs[i]();
    const TensorId t = g.op(ops[i]).outputs[0];
    slots->Bind(t, y);
    values[t] = y.clone();
  }
  return values;
}

// The fused kernel of `group` against the op-by-op values; "" when equal.
std::string CheckFused(const Graph& g, const std::vector<OpId>& group, TensorSlots* slots,
                       const std::map<TensorId, at::Tensor>& want, double rtol,
                       std::string* kind = nullptr) {
  absl::StatusOr<FusedCpuKernel> k = MakeFusedCpuKernel(g, group, slots);
  if (!k.ok()) return absl::StrCat("MakeFusedCpuKernel: ", k.status().ToString());
  if (kind != nullptr) *kind = k->kind;
  if (absl::Status s = k->run(); !s.ok()) return absl::StrCat("run: ", s.ToString());
  if (k->outputs.empty()) return "no outputs";
  for (size_t i = 0; i < k->outputs.size(); ++i) {
    const TensorId t = k->outputs[i];
    auto it = want.find(t);
    if (it == want.end()) {
      return absl::StrCat("output '", g.tensor(t).name, "' is no member output");
    }
    ::testing::AssertionResult r = Close(k->output(i), it->second, rtol);
    if (!r) return absl::StrCat("output '", g.tensor(t).name, "' (", k->kind, "): ", r.message());
  }
  return "";
}

graph::Op OpOf(OpKind kind, int arity) {
  graph::Op op;
  op.kind = kind;
  op.type = std::string(graph::OpKindName(kind));
  op.inputs.assign(arity, 0);
  op.outputs = {0};
  return op;
}

// (kind, arity) pairs the CPU backend runs as elementwise members.
std::vector<std::pair<OpKind, int>> ElementwiseKinds() {
  std::vector<std::pair<OpKind, int>> out;
  for (size_t k = 0; k < graph::kNumOpKinds; ++k) {
    for (int n = 1; n <= 3; ++n) {
      if (costmodel::CpuElementwiseKind(OpOf(static_cast<OpKind>(k), n))) {
        out.emplace_back(static_cast<OpKind>(k), n);
      }
    }
  }
  return out;
}

TEST(EwCodeOfTest, CoversExactlyTheBackendsElementwiseKinds) {
  int accepted = 0;
  for (size_t k = 0; k < graph::kNumOpKinds; ++k) {
    for (int n = 0; n <= 4; ++n) {
      const graph::Op op = OpOf(static_cast<OpKind>(k), n);
      const std::optional<EwMapping> m = EwMappingOf(op);
      ASSERT_EQ(m.has_value(), costmodel::CpuElementwiseKind(op)) << op.type << "/" << n;
      ASSERT_EQ(EwCodeOf(op).has_value(), m.has_value());
      if (!m) continue;
      ++accepted;
      EXPECT_EQ(static_cast<int>(m->operands.size()), kernels::EwArity(m->code)) << op.type;
      for (int i : m->operands) EXPECT_LT(i, n) << op.type;
      // Every post-op kind the backend accepts is one oneDNN computes.
      if (costmodel::CpuPostOpKind(op)) {
        EXPECT_TRUE(kernels::cpu::OneDnnPostOpSupported(m->code)) << op.type;
      }
    }
  }
  EXPECT_GE(accepted, 50);
  graph::Op gelu = OpOf(OpKind::kGelu, 1);
  gelu.attrs["approximate"] = std::string("tanh");
  EXPECT_EQ(EwCodeOf(gelu), EwCode::kGeluTanh);
  EXPECT_EQ(EwCodeOf(OpOf(OpKind::kExpGrad, 2)), EwCode::kMul);
  EXPECT_EQ(EwCodeOf(OpOf(OpKind::kSoftmax, 1)), std::nullopt);
  EXPECT_EQ(EwCodeOf(OpOf(OpKind::kReshape, 1)), std::nullopt);
}

bool Transcendental(EwCode c) {
  switch (c) {
    case EwCode::kExp:
    case EwCode::kLog:
    case EwCode::kTanh:
    case EwCode::kSigmoid:
    case EwCode::kErf:
    case EwCode::kSoftplus:
    case EwCode::kSin:
    case EwCode::kCos:
    case EwCode::kGelu:
    case EwCode::kGeluTanh:
    case EwCode::kElu:
    case EwCode::kSelu:
    case EwCode::kPow:
    case EwCode::kGeluGrad:
    case EwCode::kGeluTanhGrad:
    case EwCode::kEluGrad:
    case EwCode::kSoftplusGrad:
    case EwCode::kErfGrad:
    case EwCode::kSinGrad:
    case EwCode::kCosGrad:
    case EwCode::kSigmoidGrad:
    case EwCode::kTanhGrad: return true;
    default: return false;
  }
}

// One elementwise kind in the graph
//   x0 = P(x0p); y = OP(x0, x1, ...); z = y * w; u = |y|   (u outside)
// with P = Exp where OP needs a positive first operand, else Neg; the groups
// {P, OP} (operand 0 from inside) and {OP, Mul} (y escapes to u as well as
// feeding z) run fused and equal the four ops run one by one.
void CheckKind(OpKind kind, int arity, const graph::Attrs& attrs) {
  const std::string name = absl::StrCat(std::string(graph::OpKindName(kind)), "/", arity);
  SCOPED_TRACE(name);
  const std::vector<int64_t> s = {3, 37};
  const bool row_operand =
      graph::IsOneOf(kind, {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kPow,
                            OpKind::kMin, OpKind::kMax, OpKind::kPRelu});
  const bool positive = graph::IsOneOf(kind, {OpKind::kLog, OpKind::kSqrt, OpKind::kPow});
  Graph g("kind");
  const TensorId x0p = g.AddTensor("x0p", s, DType::kF32, TensorRole::kInput);
  const TensorId x0 = g.AddTensor("x0", s, DType::kF32, TensorRole::kActivation);
  std::vector<TensorId> in = {x0};
  for (int i = 1; i < arity; ++i) {
    in.push_back(g.AddTensor(absl::StrCat("x", i), row_operand ? std::vector<int64_t>{37} : s,
                             DType::kF32, TensorRole::kInput));
  }
  const TensorId w = g.AddTensor("w", {37}, DType::kF32, TensorRole::kInput);
  const TensorId y = g.AddTensor("y", s, DType::kF32, TensorRole::kActivation);
  const TensorId z = g.AddTensor("z", s, DType::kF32, TensorRole::kActivation);
  const TensorId u = g.AddTensor("u", s, DType::kF32, TensorRole::kActivation);
  const OpId p = g.AddOp("p", positive ? "Exp" : "Neg", {x0p}, {x0});
  const OpId op = g.AddOp("op", std::string(graph::OpKindName(kind)), in, {y}, attrs);
  const OpId mul = g.AddOp("mul", "Mul", {y, w}, {z});
  const OpId abs = g.AddOp("abs", "Abs", {y}, {u});
  ASSERT_TRUE(g.Validate().ok()) << g.Validate();

  TensorSlots slots;
  absl::StatusOr<std::map<TensorId, at::Tensor>> want =
      RunOpByOp(g, {p, op, mul, abs}, &slots, [&](TensorSlots* sl) {
        for (TensorId t : {x0p, w}) sl->Get(t, g.tensor(t)).mul_(2);
        for (size_t i = 1; i < in.size(); ++i) sl->Get(in[i], g.tensor(in[i])).mul_(2);
        // Min/MaxGrad's mask X_i == Y: make it true at about half the points.
        if (graph::IsOneOf(kind, {OpKind::kMinGrad, OpKind::kMaxGrad})) {
          at::Tensor xi = sl->Get(in[1], g.tensor(in[1]));
          at::Tensor yy = sl->Get(in[2], g.tensor(in[2]));
          yy.copy_(at::where(at::rand(s) < 0.5, xi, yy));
        }
      });
  ASSERT_TRUE(want.ok()) << want.status();
  const std::optional<EwMapping> m = EwMappingOf(g.op(op));
  ASSERT_TRUE(m.has_value());
  const double rtol = Transcendental(m->code) || positive ? 1e-4 : 1e-5;
  EXPECT_EQ(CheckFused(g, {p, op}, &slots, *want, rtol), "");
  EXPECT_EQ(CheckFused(g, {op, mul}, &slots, *want, rtol), "");
  // The second group writes y (read by u outside) and z.
  absl::StatusOr<FusedCpuKernel> k = MakeFusedCpuKernel(g, std::vector<OpId>{mul, op}, &slots);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->outputs, (std::vector<TensorId>{y, z}));
  EXPECT_EQ(k->kind, "tile-interpreter");
}

TEST(FusedCpuKernelTest, EveryElementwiseKindEqualsOpByOp) {
  at::manual_seed(1);
  const std::vector<std::pair<OpKind, int>> kinds = ElementwiseKinds();
  ASSERT_GE(kinds.size(), 50u);
  for (const auto& [kind, arity] : kinds) {
    graph::Attrs attrs;
    if (graph::IsOneOf(kind, {OpKind::kLeakyRelu, OpKind::kLeakyReluGrad})) attrs["alpha"] = 0.2;
    if (graph::IsOneOf(kind, {OpKind::kElu, OpKind::kEluGrad})) attrs["alpha"] = 0.7;
    if (kind == OpKind::kMeanGrad) attrs["count"] = int64_t{3};
    CheckKind(kind, arity, attrs);
    if (graph::IsOneOf(kind, {OpKind::kGelu, OpKind::kGeluGrad})) {
      CheckKind(kind, arity, {{"approximate", std::string("tanh")}});
    }
  }
}

// Reductions as sinks and reshape-like members in one program: ReluGrad ->
// ReduceSum over the batch (a bias gradient), Reshape of an escaping value,
// ReduceMean/ReduceMax without keepdims.
TEST(FusedCpuKernelTest, ReductionsAndReshapesEqualOpByOp) {
  at::manual_seed(2);
  Graph g("red");
  const TensorId dy = g.AddTensor("dy", {4, 6, 10}, DType::kF32, TensorRole::kInput);
  const TensorId yf = g.AddTensor("yf", {24, 10}, DType::kF32, TensorRole::kInput);
  const TensorId ys = g.AddTensor("ys", {4, 6, 10}, DType::kF32, TensorRole::kActivation);
  const TensorId dx = g.AddTensor("dx", {4, 6, 10}, DType::kF32, TensorRole::kActivation);
  const TensorId db = g.AddTensor("db", {1, 1, 10}, DType::kF32, TensorRole::kActivation);
  const TensorId flat = g.AddTensor("flat", {240}, DType::kF32, TensorRole::kActivation);
  const TensorId mean = g.AddTensor("mean", {4}, DType::kF32, TensorRole::kActivation);
  const TensorId mx = g.AddTensor("mx", {6}, DType::kF32, TensorRole::kActivation);
  const OpId r1 = g.AddOp("r1", "Reshape", {yf}, {ys}, {{"shape", std::vector<int64_t>{4, 6, 10}}});
  const OpId rg = g.AddOp("rg", "ReluGrad", {dy, ys}, {dx});
  const OpId sum = g.AddOp("sum", "ReduceSum", {dx}, {db}, {{"axes", std::vector<int64_t>{0, 1}}});
  const OpId r2 = g.AddOp("r2", "Reshape", {dx}, {flat}, {{"shape", std::vector<int64_t>{240}}});
  const OpId rm = g.AddOp("rm", "ReduceMean", {dx}, {mean},
                          {{"axes", std::vector<int64_t>{1, 2}}, {"keepdims", int64_t{0}}});
  const OpId rx = g.AddOp("rx", "ReduceMax", {dx}, {mx},
                          {{"axes", std::vector<int64_t>{0, -1}}, {"keepdims", int64_t{0}}});
  ASSERT_TRUE(g.Validate().ok());
  TensorSlots slots;
  auto want = RunOpByOp(g, {r1, rg, sum, r2, rm, rx}, &slots);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::vector<OpId> all = {r1, rg, sum, r2, rm, rx};
  ASSERT_TRUE(costmodel::CpuFusionBackend().CanImplement(g, all).ok());
  EXPECT_EQ(CheckFused(g, all, &slots, *want, 1e-5), "");
  absl::StatusOr<FusedCpuKernel> k = MakeFusedCpuKernel(g, all, &slots);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->outputs, (std::vector<TensorId>{db, flat, mean, mx}));
  // dx escapes only through the reshape, so the program writes flat and
  // never dx itself; a lone reduction is a program too.
  EXPECT_EQ(CheckFused(g, {sum}, &slots, *want, 1e-5), "");
  EXPECT_EQ(CheckFused(g, {rg, r2}, &slots, *want, 1e-5), "");
}

// Library groups: the primitive with post-ops equals at::matmul / addmm /
// convolution followed by the ops one by one.
TEST(FusedCpuKernelTest, LibraryGroupsEqualOpByOp) {
  at::manual_seed(3);
  Graph g("lib");
  auto t = [&](const char* n, std::vector<int64_t> s, TensorRole r = TensorRole::kActivation) {
    return g.AddTensor(n, std::move(s), DType::kF32, r);
  };
  const TensorRole in = TensorRole::kInput;
  // MatMul + bias Add + Relu.
  const TensorId a = t("a", {8, 64}, in), b = t("b", {64, 48}, in), bias = t("bias", {48}, in);
  const TensorId mm = t("mm", {8, 48}), mb = t("mb", {8, 48}), mr = t("mr", {8, 48});
  const OpId o_mm = g.AddOp("o_mm", "MatMul", {a, b}, {mm});
  const OpId o_mb = g.AddOp("o_mb", "Add", {bias, mm}, {mb});
  const OpId o_mr = g.AddOp("o_mr", "Relu", {mb}, {mr});
  // Gemm(A^T, B^T, C; alpha, beta) + bias Add + Relu, then Div by a scalar.
  const TensorId ga = t("ga", {64, 8}, in), gb = t("gb", {48, 64}, in), gc = t("gc", {1, 48}, in);
  const TensorId sc = t("sc", {}, in);
  const TensorId gy = t("gy", {8, 48}), gyb = t("gyb", {8, 48}), gyr = t("gyr", {8, 48});
  const TensorId gyd = t("gyd", {8, 48});
  const OpId o_g =
      g.AddOp("o_g", "Gemm", {ga, gb, gc}, {gy},
              {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5}, {"beta", 2.0}});
  const OpId o_gb = g.AddOp("o_gb", "Add", {gy, bias}, {gyb});
  const OpId o_gr = g.AddOp("o_gr", "Relu", {gyb}, {gyr});
  const OpId o_gd = g.AddOp("o_gd", "Div", {gyr, sc}, {gyd});
  // Batched MatMul (transB, the training builder's form) + residual Add + Gelu.
  const TensorId ba = t("ba", {2, 5, 32}, in), bb = t("bb", {24, 32}, in);
  const TensorId res = t("res", {2, 5, 24}, in);
  const TensorId by = t("by", {2, 5, 24}), byr = t("byr", {2, 5, 24}), byg = t("byg", {2, 5, 24});
  const OpId o_b = g.AddOp("o_b", "MatMul", {ba, bb}, {by}, {{"transB", int64_t{1}}});
  const OpId o_br = g.AddOp("o_br", "Add", {res, by}, {byr});
  const OpId o_bg = g.AddOp("o_bg", "Gelu", {byr}, {byg});
  // Conv + channel bias + Relu, dense and strided with asymmetric pads and groups.
  const TensorId x = t("x", {2, 8, 10, 10}, in), w = t("w", {16, 8, 3, 3}, in);
  const TensorId cb = t("cb", {16, 1, 1}, in);
  const TensorId cy = t("cy", {2, 16, 10, 10}), cyb = t("cyb", {2, 16, 10, 10});
  const TensorId cyr = t("cyr", {2, 16, 10, 10});
  const OpId o_c =
      g.AddOp("o_c", "Conv", {x, w}, {cy}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  const OpId o_cb = g.AddOp("o_cb", "Add", {cy, cb}, {cyb});
  const OpId o_cr = g.AddOp("o_cr", "Relu", {cyb}, {cyr});
  const TensorId w2 = t("w2", {16, 4, 3, 3}, in), b2 = t("b2", {16}, in);
  const TensorId c2 = t("c2", {2, 16, 5, 5}), c2b = t("c2b", {1, 16, 1, 1}, in);
  const TensorId c2y = t("c2y", {2, 16, 5, 5}), c2r = t("c2r", {2, 16, 5, 5});
  const OpId o_c2 = g.AddOp("o_c2", "Conv", {x, w2, b2}, {c2},
                            {{"strides", std::vector<int64_t>{2, 2}},
                             {"pads", std::vector<int64_t>{0, 1, 1, 0}},
                             {"group", int64_t{2}}});
  const OpId o_c2b = g.AddOp("o_c2b", "Mul", {c2, c2b}, {c2y});
  const OpId o_c2r = g.AddOp("o_c2r", "LeakyRelu", {c2y}, {c2r}, {{"alpha", 0.1}});
  ASSERT_TRUE(g.Validate().ok()) << g.Validate();

  const std::vector<OpId> order = {o_mm, o_mb, o_mr, o_g,  o_gb, o_gr, o_gd,  o_b,
                                   o_br, o_bg, o_c,  o_cb, o_cr, o_c2, o_c2b, o_c2r};
  TensorSlots slots;
  auto want = RunOpByOp(g, order, &slots,
                        [&](TensorSlots* sl) { sl->Get(sc, g.tensor(sc)).abs_().add_(0.5); });
  ASSERT_TRUE(want.ok()) << want.status();
  struct Case {
    std::vector<OpId> ops;
    std::string kind;
  };
  const std::vector<Case> cases = {
      {{o_mm, o_mb, o_mr}, "onednn-matmul+post-ops"},
      {{o_mm, o_mb}, "onednn-matmul+post-ops"},
      {{o_g, o_gb, o_gr, o_gd}, "onednn-matmul+post-ops"},
      {{o_g}, "onednn-matmul+post-ops"},
      {{o_b, o_br}, "onednn-matmul+post-ops"},
      {{o_b, o_br, o_bg}, "onednn-matmul+post-ops"},
      {{o_c, o_cb, o_cr}, "onednn-conv+post-ops"},
      {{o_c2, o_c2b, o_c2r}, "onednn-conv+post-ops"},
  };
  for (const Case& c : cases) {
    std::string kind;
    EXPECT_EQ(CheckFused(g, c.ops, &slots, *want, 1e-4, &kind), "") << c.ops[0];
    EXPECT_EQ(kind, c.kind);
  }
  // Groups the backend refuses are refused with its reason.
  absl::StatusOr<FusedCpuKernel> k = MakeFusedCpuKernel(g, std::vector<OpId>{o_mm, o_mr}, &slots);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  k = MakeFusedCpuKernel(g, std::vector<OpId>{o_mb, o_mr, o_mm, o_g}, &slots);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("cannot share a primitive"));
}

// Every post-op the backend accepts after a MatMul and a Conv: the unary
// kinds (CpuPostOpKind; Log and Sqrt after an Abs, for their domain) and the
// binary ones with each operand form (scalar, row/channel vector, full).
TEST(FusedCpuKernelTest, EveryPostOpEqualsOpByOp) {
  at::manual_seed(5);
  int checked = 0;
  for (const bool conv : {false, true}) {
    const std::vector<int64_t> ys =
        conv ? std::vector<int64_t>{2, 8, 6, 6} : std::vector<int64_t>{6, 40};
    const std::vector<std::vector<int64_t>> forms =
        conv ? std::vector<std::vector<int64_t>>{{1}, {8, 1, 1}, {1, 8, 1, 1}, ys}
             : std::vector<std::vector<int64_t>>{{}, {40}, {1, 40}, ys};
    std::vector<std::pair<std::string, int>> steps;  // (type, operand form or -1)
    for (size_t k = 0; k < graph::kNumOpKinds; ++k) {
      const graph::Op op = OpOf(static_cast<OpKind>(k), 1);
      if (costmodel::CpuPostOpKind(op)) steps.emplace_back(op.type, -1);
    }
    for (const char* bin : {"Add", "Sub", "Mul", "Div", "Min", "Max"}) {
      for (size_t f = 0; f < forms.size(); ++f) steps.emplace_back(bin, static_cast<int>(f));
    }
    ASSERT_EQ(steps.size(), 12u + 6u * 4u);
    for (const auto& [type, form] : steps) {
      SCOPED_TRACE(absl::StrCat(conv ? "Conv+" : "MatMul+", type, " form ", form));
      Graph g("post");
      std::vector<OpId> group;
      TensorId y = g.AddTensor("y", ys, DType::kF32, TensorRole::kActivation);
      if (conv) {
        const TensorId x = g.AddTensor("x", {2, 4, 6, 6}, DType::kF32, TensorRole::kInput);
        const TensorId w = g.AddTensor("w", {8, 4, 3, 3}, DType::kF32, TensorRole::kInput);
        group.push_back(
            g.AddOp("lib", "Conv", {x, w}, {y}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
      } else {
        const TensorId a = g.AddTensor("a", {6, 16}, DType::kF32, TensorRole::kInput);
        const TensorId b = g.AddTensor("b", {16, 40}, DType::kF32, TensorRole::kInput);
        group.push_back(g.AddOp("lib", "MatMul", {a, b}, {y}));
      }
      if (type == "Log" || type == "Sqrt") {
        const TensorId ya = g.AddTensor("ya", ys, DType::kF32, TensorRole::kActivation);
        group.push_back(g.AddOp("abs", "Abs", {y}, {ya}));
        y = ya;
      }
      const TensorId out = g.AddTensor("out", ys, DType::kF32, TensorRole::kActivation);
      std::vector<TensorId> in = {y};
      if (form >= 0) {
        const TensorId e = g.AddTensor("e", forms[form], DType::kF32, TensorRole::kInput);
        // The chain value on the right where the op commutes.
        in = type == "Sub" || type == "Div" ? std::vector<TensorId>{y, e}
                                            : std::vector<TensorId>{e, y};
      }
      group.push_back(g.AddOp("post", type, in, {out}));
      ASSERT_TRUE(g.Validate().ok()) << g.Validate();
      ASSERT_TRUE(costmodel::CpuFusionBackend().CanImplement(g, group).ok());
      TensorSlots slots;
      auto want = RunOpByOp(g, group, &slots);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_EQ(CheckFused(g, group, &slots, *want, 1e-4), "");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 36);
}

// Groups the executor cannot run come back Unimplemented (the caller runs
// their ops one by one), whether or not CanImplement already refuses them:
// a MatMul with a 1-D operand (oneDNN's matmul takes rank >= 2) and a chain
// of more post-ops than oneDNN 2.6's list holds (32).
TEST(FusedCpuKernelTest, GroupsTheExecutorCannotRunAreUnimplemented) {
  Graph g("gaps");
  const TensorId a = g.AddTensor("a", {8, 16}, DType::kF32, TensorRole::kInput);
  const TensorId v = g.AddTensor("v", {16}, DType::kF32, TensorRole::kInput);
  const TensorId b = g.AddTensor("b", {16, 24}, DType::kF32, TensorRole::kInput);
  const TensorId mv = g.AddTensor("mv", {8}, DType::kF32, TensorRole::kActivation);
  const TensorId mvr = g.AddTensor("mvr", {8}, DType::kF32, TensorRole::kActivation);
  const std::vector<OpId> matvec = {g.AddOp("mv", "MatMul", {a, v}, {mv}),
                                    g.AddOp("mvr", "Relu", {mv}, {mvr})};
  TensorId y = g.AddTensor("y", {8, 24}, DType::kF32, TensorRole::kActivation);
  std::vector<OpId> chain = {g.AddOp("mm", "MatMul", {a, b}, {y})};
  for (int i = 0; i < 33; ++i) {
    const TensorId z =
        g.AddTensor(absl::StrCat("c", i), {8, 24}, DType::kF32, TensorRole::kActivation);
    chain.push_back(g.AddOp(absl::StrCat("op", i), i % 2 ? "Neg" : "Tanh", {y}, {z}));
    y = z;
  }
  ASSERT_TRUE(g.Validate().ok());
  TensorSlots slots;
  EXPECT_EQ(MakeFusedCpuKernel(g, matvec, &slots).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(MakeFusedCpuKernel(g, chain, &slots).status().code(), absl::StatusCode::kUnimplemented);
  chain.pop_back();  // 32 post-ops fit
  EXPECT_TRUE(MakeFusedCpuKernel(g, chain, &slots).ok());
}

std::string DataFile(const std::string& name) {
  // ctest runs tests from the source root; a manual run may be elsewhere.
  std::filesystem::path dir = std::filesystem::current_path();
  for (int up = 0; up < 4; ++up) {
    const std::filesystem::path p = dir / "tests" / "data" / name;
    if (std::filesystem::exists(p)) return p.string();
    dir = dir.parent_path();
  }
  return (std::filesystem::path("tests") / "data" / name).string();
}

struct ModelReport {
  int groups = 0;
  std::map<std::string, int> by_kind;
};

// The groups braid's search (short) and the XLA baseline plan for `model`
// on cpu-local, each run fused and op by op.
ModelReport CheckModel(const std::string& file) {
  SCOPED_TRACE(file);
  const auto start = std::chrono::steady_clock::now();
  ModelReport rep;
  graph::LoadOptions lo;
  lo.batch = 2;
  std::vector<std::string> warnings;
  const std::string source = file.rfind("zoo:", 0) == 0 ? file : DataFile(file);
  absl::StatusOr<Graph> fwd = graph::LoadModel(source, lo, &warnings);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  if (!fwd.ok()) return rep;
  graph::TrainingOptions topts;
  topts.ranks = 2;
  absl::StatusOr<Graph> g = graph::BuildTrainingGraph(*fwd, topts);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return rep;
  absl::StatusOr<costmodel::ClusterSpec> spec = costmodel::ClusterPreset("cpu-local");
  EXPECT_TRUE(spec.ok());
  spec = costmodel::WithRanks(*spec, 2);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<costmodel::CommModel> comm = costmodel::CommModelFromStore(*spec, nullptr);
  EXPECT_TRUE(comm.ok());
  costmodel::ClusterCostModel cm(*spec, nullptr, nullptr, *comm);
  search::SearchConfig cfg;
  cfg.seed = 0;
  cfg.patience = 200;
  cfg.time_budget_s = search::SearchConfig::kNoDeadlineS * 10;  // deterministic
  absl::StatusOr<search::SearchResult> r = search::RunFusionSearch(*g, cm, cfg);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return rep;

  std::set<std::vector<OpId>> groups;
  auto add = [&](const search::Plan& plan) {
    for (const search::FusionGroup& fg : plan.groups) {
      std::vector<OpId> ops = fg.ops;
      std::sort(ops.begin(), ops.end());
      if (ops.size() > 1) groups.insert(ops);
    }
  };
  add(r->plan);
  EXPECT_TRUE(r->baselines.has_value());
  if (r->baselines) {
    const search::EvaluatedPlan* xla = r->baselines->Find("xla_op_fusion");
    EXPECT_NE(xla, nullptr);
    if (xla != nullptr) add(xla->plan);
  }
  absl::StatusOr<std::vector<OpId>> topo = g->TopologicalOrder();
  EXPECT_TRUE(topo.ok());
  std::vector<int> pos(g->num_ops());
  for (size_t i = 0; i < topo->size(); ++i) pos[(*topo)[i]] = static_cast<int>(i);

  at::manual_seed(4);
  for (std::vector<OpId> ops : groups) {
    std::sort(ops.begin(), ops.end(), [&](OpId x, OpId y) { return pos[x] < pos[y]; });
    std::vector<std::string> names;
    for (OpId o : ops) names.push_back(absl::StrCat(g->op(o).name, ":", g->op(o).type));
    SCOPED_TRACE(absl::StrJoin(names, " "));
    TensorSlots slots;
    absl::StatusOr<std::map<TensorId, at::Tensor>> want = RunOpByOp(*g, ops, &slots);
    EXPECT_TRUE(want.ok()) << want.status();
    if (!want.ok()) continue;
    std::string kind;
    EXPECT_EQ(CheckFused(*g, ops, &slots, *want, 1e-4, &kind), "");
    ++rep.groups;
    ++rep.by_kind[kind];
  }
  std::cout << file << ": " << rep.groups << " fused groups checked (braid "
            << r->plan.groups.size() << " groups, origin " << r->origin << ", " << r->stats.steps
            << " steps);";
  for (const auto& [k, n] : rep.by_kind) std::cout << " " << k << " " << n;
  std::cout << " (" << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s)" << std::endl;
  return rep;
}

// The models of the fusion-gain benchmark and two convolution-heavy ones:
// every group braid and the XLA baseline plan runs fused as op by op.
TEST(FusedCpuKernelTest, BenchmarkModelsGroupsEqualOpByOp) {
  for (const char* m : {"mlp8x1024_opset14.onnx", "transformer_encoder_train_opset14.onnx",
                        "resnet18_train_opset13.onnx", "mobilenet_v3_small_opset16.onnx",
                        "resnet50_opset17.onnx"}) {
    EXPECT_GT(CheckModel(m).groups, 0) << m;
  }
}

// The other ONNX test models and the zoo models at batch 1 (lo.batch = 2 is
// overridden by @1), except gpt3_layers (29 GB of fp32 parameters: its groups
// are checked with CanImplement only, tests/zoo_backend_test.cc). The quick
// ones run in CI (16 s); BRAID_FUSED_ALL_MODELS=1 adds the large ones: 2064
// groups in all, about 5.5 minutes on the 2-core build machine, 4.8 of them
// for zoo:reformer@1's 80 groups.
TEST(FusedCpuKernelTest, OtherTestAndZooModelsGroupsEqualOpByOp) {
  struct Case {
    const char* model;
    bool quick;
  };
  const Case cases[] = {
      {"vgg11_opset13.onnx", true}, {"gpt_decoder_train_opset14.onnx", true},
      {"multihead_attention_opset13.onnx", true}, {"transformer_encoder_d256_opset14.onnx", true},
      {"lstm_lm_opset14.onnx", true}, {"zoo:mlp@1", true}, {"zoo:dlrm@1", true},
      {"zoo:reformer@1", false}, {"densenet121_opset15.onnx", false},
      {"inception_v3_opset13.onnx", false}, {"resnext50_32x4d_opset15.onnx", false},
      {"vit_b_16_opset14.onnx", false}, {"zoo:transformer@1", false}, {"zoo:vgg19@1", false},
      {"zoo:resnet50@1", false}, {"zoo:resnext50@1", false}, {"zoo:inception_v3@1", false},
      {"zoo:bert_large@1", false}};
  const char* all = std::getenv("BRAID_FUSED_ALL_MODELS");
  const bool everything = all != nullptr && std::string(all) == "1";
  for (const Case& c : cases) {
    if (!c.quick && !everything) continue;
    ModelReport r = CheckModel(c.model);
    EXPECT_GT(r.groups, 0) << c.model;  // every one of them fuses something
  }
  // rnnlm (an LSTM and its embedding) has nothing the CPU executor fuses.
  EXPECT_EQ(CheckModel("zoo:rnnlm@1").groups, 0);
}

}  // namespace
}  // namespace braid::worker
