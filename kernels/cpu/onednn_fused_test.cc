#include "kernels/cpu/onednn_fused.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::kernels::cpu {
namespace {

using Dims = std::vector<int64_t>;
using ::testing::HasSubstr;

std::string Name(EwCode code) { return std::string(EwName(code)); }

constexpr double kRtol = 1e-4, kAtol = 1e-4;

class OneDnnFusedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    at::manual_seed(7);
  }
};

// Inputs in (-s, s) or, for codes defined on positives only, in (0.1, s).
at::Tensor Rand(const Dims& shape, bool positive = false, double s = 1) {
  return positive ? at::rand(shape) * (s - 0.1) + 0.1 : (at::rand(shape) * 2 - 1) * s;
}

// The ATen formula of ew_code.h for one post-op.
at::Tensor Reference(const PostOp& op, const at::Tensor& y, const std::vector<at::Tensor>& ex) {
  const at::Tensor b = op.extra >= 0 ? ex[op.extra] : at::Tensor();
  switch (op.code) {
    case EwCode::kCopy:
      return y;
    case EwCode::kNeg:
      return -y;
    case EwCode::kAbs:
      return at::abs(y);
    case EwCode::kRelu:
      return at::relu(y);
    case EwCode::kLeakyRelu:
      return at::leaky_relu(y, op.p0);
    case EwCode::kSqrt:
      return at::sqrt(y);
    case EwCode::kReciprocal:
      return at::reciprocal(y);
    case EwCode::kExp:
      return at::exp(y);
    case EwCode::kLog:
      return at::log(y);
    case EwCode::kTanh:
      return at::tanh(y);
    case EwCode::kSigmoid:
      return at::sigmoid(y);
    case EwCode::kSoftplus:
      return at::softplus(y, 1, 20);
    case EwCode::kGelu:
      return at::gelu(y);
    case EwCode::kGeluTanh:
      return at::gelu(y, "tanh");
    case EwCode::kElu:
      return at::elu(y, op.p0);
    case EwCode::kSelu:
      return at::selu(y);
    case EwCode::kHardSigmoid:
      return at::clamp(y * op.p0 + op.p1, 0, 1);
    case EwCode::kHardSwish:
      return at::hardswish(y);
    case EwCode::kRound:
      return at::round(y);
    case EwCode::kClip:
      return at::clamp(y, op.p0, op.p1);
    case EwCode::kAffine:
      return y * op.p0 + op.p1;
    case EwCode::kAdd:
      return y + b;
    case EwCode::kSub:
      return y - b;
    case EwCode::kMul:
      return y * b;
    case EwCode::kDiv:
      return y / b;
    case EwCode::kMin:
      return at::minimum(y, b);
    case EwCode::kMax:
      return at::maximum(y, b);
    default:
      ADD_FAILURE() << "no reference for " << EwName(op.code);
      return y;
  }
}

at::Tensor Reference(const std::vector<PostOp>& ops, at::Tensor y,
                     const std::vector<at::Tensor>& ex) {
  for (const PostOp& op : ops) y = Reference(op, y, ex);
  return y;
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const bool close = at::allclose(got, want, kRtol, kAtol, /*equal_nan=*/true);
  EXPECT_TRUE(close) << what << ": max |diff| "
                     << (got - want).abs().nan_to_num(0).max().item<float>();
}

// A post-op with the parameters the tests use for its code.
PostOp WithParams(EwCode code, int extra = -1) {
  PostOp op{code, 0, 0, extra};
  if (code == EwCode::kLeakyRelu) op.p0 = 0.1f;
  if (code == EwCode::kElu) op.p0 = 0.7f;
  if (code == EwCode::kHardSigmoid) op = {code, 0.2f, 0.5f};
  if (code == EwCode::kClip) op = {code, -0.5f, 0.8f};
  if (code == EwCode::kAffine) op = {code, 1.5f, -0.25f};
  return op;
}

bool PositiveOnly(EwCode code) {
  return code == EwCode::kSqrt || code == EwCode::kLog || code == EwCode::kReciprocal;
}

std::vector<EwCode> SupportedUnary() {
  std::vector<EwCode> out;
  for (int c = 0; c < static_cast<int>(EwCode::kCount); ++c) {
    const auto code = static_cast<EwCode>(c);
    if (EwArity(code) == 1 && OneDnnPostOpSupported(code)) out.push_back(code);
  }
  return out;
}

constexpr EwCode kBinary[] = {EwCode::kAdd, EwCode::kSub, EwCode::kMul,
                              EwCode::kDiv, EwCode::kMin, EwCode::kMax};

// ---- which codes ----------------------------------------------------------

TEST_F(OneDnnFusedTest, SupportedSetIsTheDocumentedOne) {
  std::vector<std::string> names;
  for (int c = 0; c < static_cast<int>(EwCode::kCount); ++c) {
    if (OneDnnPostOpSupported(static_cast<EwCode>(c))) {
      names.push_back(Name(static_cast<EwCode>(c)));
    }
  }
  EXPECT_THAT(
      names, ::testing::ElementsAre("Copy", "Neg", "Abs", "Relu", "LeakyRelu", "Sqrt", "Reciprocal",
                                    "Exp", "Log", "Tanh", "Sigmoid", "Softplus", "Gelu", "GeluTanh",
                                    "Elu", "Selu", "HardSigmoid", "HardSwish", "Round", "Clip",
                                    "Affine", "Add", "Sub", "Mul", "Div", "Min", "Max"));
}

// Every code: supported ones build (with a JIT kernel) for both primitives,
// the others are refused as Unimplemented.
TEST_F(OneDnnFusedTest, EveryCodeBuildsIffSupported) {
  for (int c = 0; c < static_cast<int>(EwCode::kCount); ++c) {
    const auto code = static_cast<EwCode>(c);
    const int extra = EwArity(code) > 1 ? 0 : -1;
    MatMulSpec m{
        .a = {4, 8}, .b = {8, 16}, .extras = {{16}}, .post_ops = {WithParams(code, extra)}};
    ConvSpec v{.x = {1, 16, 6, 6},
               .w = {16, 16, 3, 3},
               .extras = {{1, 16, 1, 1}},
               .post_ops = {WithParams(code, extra)}};
    auto mm = OneDnnMatMul::Get(m);
    auto conv = OneDnnConv::Get(v);
    if (OneDnnPostOpSupported(code)) {
      EXPECT_TRUE(mm.ok()) << EwName(code) << ": " << mm.status();
      EXPECT_TRUE(conv.ok()) << EwName(code) << ": " << conv.status();
    } else {
      EXPECT_EQ(mm.status().code(), absl::StatusCode::kUnimplemented) << EwName(code);
      EXPECT_EQ(conv.status().code(), absl::StatusCode::kUnimplemented) << EwName(code);
      EXPECT_THAT(mm.status().message(), HasSubstr(Name(code)));
    }
  }
}

// ---- MatMul -----------------------------------------------------------------

TEST_F(OneDnnFusedTest, MatMulEveryUnaryPostOp) {
  for (EwCode code : SupportedUnary()) {
    const bool pos = PositiveOnly(code);
    // |Y| up to ~6: where GeluTanh and Gelu differ by 5e-4, beyond the tolerance.
    const at::Tensor a = Rand({8, 32}, pos, 1), b = Rand({32, 16}, pos, 1);
    const PostOp op = WithParams(code);
    auto mm = OneDnnMatMul::Get({.a = {8, 32}, .b = {32, 16}, .post_ops = {op}});
    ASSERT_TRUE(mm.ok()) << mm.status();
    auto y = (*mm)->Run(a, b, nullptr, {});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, Reference(op, at::matmul(a, b), {}), Name(code));
  }
}

TEST_F(OneDnnFusedTest, MatMulEveryBinaryPostOpAndBroadcast) {
  const Dims forms[] = {{1}, {16}, {1, 16}, {8, 1}, {8, 16}};
  for (EwCode code : kBinary) {
    for (const Dims& form : forms) {
      const at::Tensor a = Rand({8, 32}), b = Rand({32, 16});
      const at::Tensor e = Rand(form, code == EwCode::kDiv, 1.5);
      const PostOp op{code, 0, 0, 0};
      auto mm =
          OneDnnMatMul::Get({.a = {8, 32}, .b = {32, 16}, .extras = {form}, .post_ops = {op}});
      ASSERT_TRUE(mm.ok()) << mm.status();
      EXPECT_THAT(std::string((*mm)->impl()), ::testing::Not(HasSubstr("ref")));
      auto y = (*mm)->Run(a, b, nullptr, {&e, 1});
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectClose(*y, Reference(op, at::matmul(a, b), {e}),
                  absl::StrCat(Name(code), " extra [", absl::StrJoin(form, ","), "]"));
    }
  }
}

TEST_F(OneDnnFusedTest, GemmTransposesAlphaBetaAndEveryCForm) {
  const int64_t m = 6, k = 20, n = 10;
  const Dims forms[] = {{n}, {1, n}, {m, 1}, {m, n}, {1}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [alpha, beta] : {std::pair{1.f, 1.f}, {0.5f, 1.f}, {1.f, -2.f}, {1.5f, 0.25f}}) {
        for (const Dims& form : forms) {
          const Dims as = ta ? Dims{k, m} : Dims{m, k}, bs = tb ? Dims{n, k} : Dims{k, n};
          const at::Tensor a = Rand(as), b = Rand(bs), c = Rand(form);
          MatMulSpec s{.a = as,
                       .b = bs,
                       .trans_a = ta,
                       .trans_b = tb,
                       .alpha = alpha,
                       .beta = beta,
                       .c = form,
                       .post_ops = {{EwCode::kRelu}}};
          auto mm = OneDnnMatMul::Get(s);
          ASSERT_TRUE(mm.ok()) << mm.status();
          const at::Tensor c_before = c.clone();
          auto y = (*mm)->Run(a, b, &c, {});
          ASSERT_TRUE(y.ok()) << y.status();
          EXPECT_TRUE(c.equal(c_before));  // C is read, never written
          const at::Tensor op_a = ta ? a.t() : a, op_b = tb ? b.t() : b;
          const at::Tensor want = at::relu(at::addmm(c.expand({m, n}), op_a, op_b, beta, alpha));
          ExpectClose(*y, want, s.Signature());
        }
      }
    }
  }
}

TEST_F(OneDnnFusedTest, GemmRankZeroCAndBetaZero) {
  const at::Tensor a = Rand({4, 8}), b = Rand({8, 5}), c = at::scalar_tensor(0.75);
  auto mm = OneDnnMatMul::Get({.a = {4, 8}, .b = {8, 5}, .c = {1}});
  ASSERT_TRUE(mm.ok());
  auto y = (*mm)->Run(a, b, &c, {});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectClose(*y, at::matmul(a, b) + 0.75, "rank-0 C");
  auto zero = OneDnnMatMul::Get({.a = {4, 8}, .b = {8, 5}, .beta = 0, .c = {4, 5}});
  ASSERT_TRUE(zero.ok());
  const at::Tensor c2 = Rand({4, 5});
  auto y2 = (*zero)->Run(a, b, &c2, {});
  ASSERT_TRUE(y2.ok());
  ExpectClose(*y2, at::matmul(a, b), "beta 0");
}

TEST_F(OneDnnFusedTest, BatchedMatMul) {
  struct Case {
    Dims a, b, extra;
  };
  const Case cases[] = {
      {{3, 8, 32}, {3, 32, 16}, {16}},       // equal batch, per-column operand
      {{2, 1, 8, 32}, {1, 3, 32, 16}, {1}},  // both sides broadcast, scalar operand
      {{8, 32}, {4, 32, 16}, {4, 8, 16}},    // rank-2 A against a batch, full operand
      {{5, 8, 32}, {32, 16}, {5, 1, 16}},    // shared B, per-batch row operand
  };
  for (const Case& c : cases) {
    const at::Tensor a = Rand(c.a), b = Rand(c.b), e = Rand(c.extra);
    const std::vector<PostOp> ops = {{EwCode::kAdd, 0, 0, 0}, {EwCode::kGelu}};
    auto mm = OneDnnMatMul::Get({.a = c.a, .b = c.b, .extras = {c.extra}, .post_ops = ops});
    ASSERT_TRUE(mm.ok()) << mm.status();
    auto y = (*mm)->Run(a, b, nullptr, {&e, 1});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, Reference(ops, at::matmul(a, b), {e}), (*mm)->spec().Signature());
  }
}

TEST_F(OneDnnFusedTest, MatMulPostOpChains) {
  const int64_t m = 8, n = 16;
  const std::vector<Dims> extras = {{1}, {n}, {m, 1}, {m, n}};
  const std::vector<std::vector<PostOp>> chains = {
      {{EwCode::kAdd, 0, 0, 1}, {EwCode::kRelu}},                           // bias, relu
      {{EwCode::kMul, 0, 0, 0}, {EwCode::kAdd, 0, 0, 2}, {EwCode::kTanh}},  // scale, row bias
      {{EwCode::kAdd, 0, 0, 1}, {EwCode::kGelu}, {EwCode::kAdd, 0, 0, 3}},  // residual
      {{EwCode::kSub, 0, 0, 2},
       {EwCode::kLeakyRelu, 0.2f},
       {EwCode::kMax, 0, 0, 0},
       {EwCode::kMul, 0, 0, 3}},
  };
  std::vector<at::Tensor> ex;
  for (const Dims& e : extras) ex.push_back(Rand(e));
  for (const auto& ops : chains) {
    const at::Tensor a = Rand({m, 24}), b = Rand({24, n});
    auto mm = OneDnnMatMul::Get({.a = {m, 24}, .b = {24, n}, .extras = extras, .post_ops = ops});
    ASSERT_TRUE(mm.ok()) << mm.status();
    auto y = (*mm)->Run(a, b, nullptr, ex);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, Reference(ops, at::matmul(a, b), ex), (*mm)->spec().Signature());
  }
}

// ---- Conv -------------------------------------------------------------------

at::Tensor TorchConv(const ConvSpec& s, const at::Tensor& x, const at::Tensor& w,
                     const at::Tensor& b) {
  // ONNX pads may be asymmetric; at::conv2d pads symmetrically, so pad first.
  const at::Tensor xp =
      at::constant_pad_nd(x, {s.pads_begin[1], s.pads_end[1], s.pads_begin[0], s.pads_end[0]}, 0);
  return at::conv2d(xp, w, b, s.strides, /*padding=*/at::IntArrayRef{0, 0}, s.dilations, s.groups);
}

TEST_F(OneDnnFusedTest, ConvEveryUnaryPostOp) {
  // 16 channels: the blocked nChw16c kernel on AVX-512 machines.
  const ConvSpec base{.x = {2, 16, 7, 7},
                      .w = {16, 16, 3, 3},
                      .has_bias = true,
                      .pads_begin = {1, 1},
                      .pads_end = {1, 1}};
  for (EwCode code : SupportedUnary()) {
    const bool pos = PositiveOnly(code);
    ConvSpec s = base;
    s.post_ops = {WithParams(code)};
    const at::Tensor x = Rand(s.x, pos, 0.5), w = Rand(s.w, pos, 0.5), b = Rand({16}, pos, 0.5);
    auto conv = OneDnnConv::Get(s);
    ASSERT_TRUE(conv.ok()) << conv.status();
    auto y = (*conv)->Run(x, w, &b, {});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, Reference(s.post_ops[0], TorchConv(s, x, w, b), {}),
                absl::StrCat(Name(code), " (", (*conv)->layout(), ")"));
  }
}

TEST_F(OneDnnFusedTest, ConvEveryBinaryPostOpAndBroadcast) {
  const Dims forms[] = {{1}, {1, 16, 1, 1}, {16, 1, 1}, {2, 16, 7, 7}, {2, 1, 1, 1}, {1, 1, 7, 7}};
  for (EwCode code : kBinary) {
    for (const Dims& form : forms) {
      const ConvSpec s{.x = {2, 16, 7, 7},
                       .w = {16, 16, 3, 3},
                       .pads_begin = {1, 1},
                       .pads_end = {1, 1},
                       .extras = {form},
                       .post_ops = {{code, 0, 0, 0}}};
      const at::Tensor x = Rand(s.x), w = Rand(s.w, false, 0.2);
      const at::Tensor e = Rand(form, code == EwCode::kDiv, 1.5);
      auto conv = OneDnnConv::Get(s);
      ASSERT_TRUE(conv.ok()) << conv.status();
      auto y = (*conv)->Run(x, w, nullptr, {&e, 1});
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectClose(*y, Reference(s.post_ops[0], TorchConv(s, x, w, {}), {e}),
                  absl::StrCat(Name(code), " [", absl::StrJoin(form, ","), "] (", (*conv)->layout(),
                               " ", (*conv)->impl(), ")"));
    }
  }
}

TEST_F(OneDnnFusedTest, ConvGeometries) {
  struct Case {
    const char* name;
    ConvSpec s;
  };
  const Case cases[] = {
      {"stride 2",
       {.x = {2, 16, 9, 9},
        .w = {32, 16, 3, 3},
        .strides = {2, 2},
        .pads_begin = {1, 1},
        .pads_end = {1, 1}}},
      {"asymmetric pads",
       {.x = {1, 16, 8, 7}, .w = {16, 16, 3, 2}, .pads_begin = {1, 0}, .pads_end = {2, 1}}},
      {"dilation 2",
       {.x = {2, 16, 11, 11},
        .w = {16, 16, 3, 3},
        .dilations = {2, 2},
        .pads_begin = {2, 2},
        .pads_end = {2, 2}}},
      {"groups 2",
       {.x = {2, 32, 8, 8},
        .w = {32, 16, 3, 3},
        .pads_begin = {1, 1},
        .pads_end = {1, 1},
        .groups = 2}},
      {"depthwise",
       {.x = {2, 32, 8, 8},
        .w = {32, 1, 3, 3},
        .pads_begin = {1, 1},
        .pads_end = {1, 1},
        .groups = 32}},
      {"depthwise x2",
       {.x = {1, 8, 8, 8},
        .w = {16, 1, 3, 3},
        .strides = {2, 1},
        .pads_begin = {1, 1},
        .pads_end = {0, 1},
        .groups = 8}},
      {"3 input channels",
       {.x = {2, 3, 12, 12},
        .w = {8, 3, 5, 5},
        .strides = {2, 2},
        .pads_begin = {2, 2},
        .pads_end = {2, 2}}},
      {"1x1 odd channels", {.x = {3, 5, 6, 4}, .w = {7, 5, 1, 1}}},
  };
  for (const Case& c : cases) {
    for (bool bias : {false, true}) {
      ConvSpec s = c.s;
      s.has_bias = bias;
      s.extras = {{1, s.w[0], 1, 1}};
      s.post_ops = {{EwCode::kMul, 0, 0, 0}, {EwCode::kRelu}};
      const at::Tensor x = Rand(s.x), w = Rand(s.w, false, 0.3), b = Rand({s.w[0]});
      const at::Tensor e = Rand(s.extras[0]);
      auto conv = OneDnnConv::Get(s);
      ASSERT_TRUE(conv.ok()) << c.name << ": " << conv.status();
      auto y = (*conv)->Run(x, w, bias ? &b : nullptr, {&e, 1});
      ASSERT_TRUE(y.ok()) << y.status();
      const at::Tensor want = at::relu(TorchConv(s, x, w, bias ? b : at::Tensor()) * e);
      ExpectClose(*y, want,
                  absl::StrCat(c.name, bias ? " +bias" : "", " (", (*conv)->layout(), " ",
                               (*conv)->impl(), ")"));
    }
  }
}

TEST_F(OneDnnFusedTest, ConvPostOpChains) {
  const ConvSpec base{.x = {2, 32, 8, 8},
                      .w = {32, 32, 3, 3},
                      .has_bias = true,
                      .pads_begin = {1, 1},
                      .pads_end = {1, 1},
                      .extras = {{1}, {1, 32, 1, 1}, {2, 32, 8, 8}}};
  const std::vector<std::vector<PostOp>> chains = {
      {{EwCode::kAdd, 0, 0, 2}, {EwCode::kRelu}},                                // residual
      {{EwCode::kMul, 0, 0, 1}, {EwCode::kAdd, 0, 0, 0}, {EwCode::kHardSwish}},  // BN-like
      {{EwCode::kMul, 0, 0, 1},
       {EwCode::kAdd, 0, 0, 1},
       {EwCode::kAdd, 0, 0, 2},
       {EwCode::kClip, 0, 6}},                        // relu6
      {{EwCode::kSigmoid}, {EwCode::kMul, 0, 0, 2}},  // gating
  };
  const at::Tensor x = Rand(base.x), w = Rand(base.w, false, 0.2), b = Rand({32});
  std::vector<at::Tensor> ex;
  for (const Dims& e : base.extras) ex.push_back(Rand(e));
  for (const auto& ops : chains) {
    ConvSpec s = base;
    s.post_ops = ops;
    auto conv = OneDnnConv::Get(s);
    ASSERT_TRUE(conv.ok()) << conv.status();
    auto y = (*conv)->Run(x, w, &b, ex);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*y, Reference(ops, TorchConv(s, x, w, b), ex),
                absl::StrCat(s.Signature(), " (", (*conv)->layout(), ")"));
  }
}

// On AVX-512 machines the cases above cover all three activation layouts
// OneDnnConv picks from, so Run()'s reorders (X, Y, full-size extras) are
// exercised; pinned here.
TEST_F(OneDnnFusedTest, ConvLayoutsOnAvx512) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  if ((isa & avx512) != avx512) GTEST_SKIP() << "layout choices measured on AVX-512 only";
  const ConvSpec blocked{.x = {2, 16, 7, 7},
                         .w = {16, 16, 3, 3},
                         .extras = {{2, 16, 5, 5}},
                         .post_ops = {{EwCode::kAdd, 0, 0, 0}}};
  const ConvSpec nhwc{.x = {2, 3, 12, 12}, .w = {8, 3, 5, 5}, .strides = {2, 2}};
  ConvSpec plain = blocked;
  plain.extras = {{2, 1, 1, 1}};  // a per-image operand: only gemm:jit on NCHW takes it
  EXPECT_EQ(OneDnnConv::Get(blocked).value()->layout(), "nChw16c");
  EXPECT_EQ(OneDnnConv::Get(nhwc).value()->layout(), "nhwc");
  EXPECT_EQ(OneDnnConv::Get(plain).value()->layout(), "nchw");
}

// ---- formula corners --------------------------------------------------------

TEST_F(OneDnnFusedTest, SoftplusAboveTorchThresholdAndRoundHalvesToEven) {
  // A = diag values, B = identity: Y is exactly A, so the post-op sees
  // chosen inputs (halves for Round, the 20 < x < 88.7 band for Softplus).
  const at::Tensor v = at::tensor({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 19.f, 20.5f, 30.f, 87.f,
                                   90.f, 100.f, -30.f, 0.f, 3.25f, -7.75f});
  const at::Tensor a = v.reshape({1, 16}), eye = at::eye(16);
  for (EwCode code : {EwCode::kSoftplus, EwCode::kRound}) {
    auto mm = OneDnnMatMul::Get({.a = {1, 16}, .b = {16, 16}, .post_ops = {{code}}});
    ASSERT_TRUE(mm.ok());
    auto y = (*mm)->Run(a, eye, nullptr, {});
    ASSERT_TRUE(y.ok());
    ExpectClose(*y, Reference(PostOp{code}, a, {}), Name(code));
  }
}

TEST_F(OneDnnFusedTest, ClipRefusalsAndOneSidedBounds) {
  const float inf = std::numeric_limits<float>::infinity();
  auto upper_only =
      OneDnnMatMul::Get({.a = {2, 4}, .b = {4, 3}, .post_ops = {{EwCode::kClip, -inf, 0.25f}}});
  ASSERT_TRUE(upper_only.ok()) << upper_only.status();
  const at::Tensor a = Rand({2, 4}), b = Rand({4, 3});
  auto y = (*upper_only)->Run(a, b, nullptr, {});
  ASSERT_TRUE(y.ok());
  ExpectClose(*y, at::clamp_max(at::matmul(a, b), 0.25), "clip(-inf, 0.25)");
  auto inverted =
      OneDnnMatMul::Get({.a = {2, 4}, .b = {4, 3}, .post_ops = {{EwCode::kClip, 1, 0}}});
  EXPECT_EQ(inverted.status().code(), absl::StatusCode::kUnimplemented) << inverted.status();
}

// What oneDNN 2.6's JIT post-ops make of NaN (pinned so that a library
// change shows): most codes keep it, as ATen does; these do not, because
// the injector clamps with vmaxps/vminps, which return the non-NaN operand.
TEST_F(OneDnnFusedTest, NanInputs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  at::Tensor v = at::full({1, 16}, nan);
  const at::Tensor zeros = at::zeros({1, 16}), eye = at::eye(16);
  for (EwCode code : SupportedUnary()) {
    const PostOp op = WithParams(code);
    // Y = 0 + v: the NaN enters through a binary operand (a NaN in A would
    // reach every output through the GEMM).
    auto mm = OneDnnMatMul::Get({.a = {1, 16},
                                 .b = {16, 16},
                                 .extras = {{1, 16}},
                                 .post_ops = {{EwCode::kAdd, 0, 0, 0}, op}});
    ASSERT_TRUE(mm.ok());
    auto y = (*mm)->Run(zeros, eye, nullptr, {&v, 1});
    ASSERT_TRUE(y.ok());
    const float got = (*y)[0][0].item<float>();
    switch (code) {
      case EwCode::kRelu:
        EXPECT_EQ(got, 0.f);
        break;  // ATen: NaN
      case EwCode::kClip:
        EXPECT_EQ(got, op.p0);
        break;  // ATen: NaN
      case EwCode::kHardSigmoid:
        EXPECT_EQ(got, 0.f);
        break;  // ATen: NaN
      case EwCode::kExp:
        EXPECT_EQ(got, inf);
        break;  // ATen: NaN
      default:
        EXPECT_TRUE(std::isnan(got)) << Name(code) << " gave " << got;
    }
  }
  const at::Tensor one = at::ones({1, 16});
  for (EwCode code : kBinary) {
    auto mm = OneDnnMatMul::Get({.a = {1, 16},
                                 .b = {16, 16},
                                 .extras = {{1, 16}, {1, 16}},
                                 .post_ops = {{EwCode::kAdd, 0, 0, 0}, {code, 0, 0, 1}}});
    ASSERT_TRUE(mm.ok());
    const std::vector<at::Tensor> nan_in_y = {v, one}, nan_in_operand = {zeros, v};
    const float y_nan = (*(*mm)->Run(zeros, eye, nullptr, nan_in_y))[0][0].item<float>();
    const float operand_nan =
        (*(*mm)->Run(zeros, eye, nullptr, nan_in_operand))[0][0].item<float>();
    EXPECT_TRUE(std::isnan(operand_nan)) << Name(code);
    if (code == EwCode::kMin || code == EwCode::kMax) {
      EXPECT_EQ(y_nan, 1.f) << Name(code);  // the operand; ATen: NaN
    } else {
      EXPECT_TRUE(std::isnan(y_nan)) << Name(code);
    }
  }
}

// ---- errors and the cache ---------------------------------------------------

TEST_F(OneDnnFusedTest, InvalidSpecsAndInputs) {
  EXPECT_EQ(OneDnnMatMul::Get({.a = {4, 8}, .b = {9, 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OneDnnMatMul::Get({.a = {2, 4, 8}, .b = {3, 8, 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OneDnnMatMul::Get({.a = {4, 8}, .b = {8, 3}, .c = {4, 2}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OneDnnMatMul::Get(
                {.a = {4, 8}, .b = {8, 3}, .extras = {{5}}, .post_ops = {{EwCode::kAdd, 0, 0, 0}}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      OneDnnMatMul::Get({.a = {4, 8}, .b = {8, 3}, .post_ops = {{EwCode::kAdd}}}).status().code(),
      absl::StatusCode::kInvalidArgument);  // binary without an operand
  EXPECT_EQ(OneDnnMatMul::Get({.a = {8}, .b = {8, 3}}).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(OneDnnConv::Get({.x = {1, 6, 5, 5}, .w = {4, 4, 3, 3}, .groups = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OneDnnConv::Get({.x = {1, 4, 2, 2}, .w = {4, 4, 3, 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto mm = OneDnnMatMul::Get({.a = {4, 8}, .b = {8, 3}});
  ASSERT_TRUE(mm.ok());
  EXPECT_EQ((*mm)->Run(Rand({4, 9}), Rand({8, 3}), nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*mm)->Run(Rand({4, 8}).to(at::kDouble), Rand({8, 3}), nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const at::Tensor c = Rand({3});
  EXPECT_EQ((*mm)->Run(Rand({4, 8}), Rand({8, 3}), &c, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Non-contiguous inputs are fine (copied).
  const at::Tensor at = Rand({8, 4}), b = Rand({8, 3});
  auto y = (*mm)->Run(at.t(), b, nullptr, {});
  ASSERT_TRUE(y.ok());
  ExpectClose(*y, at::matmul(at.t(), b), "non-contiguous A");
}

TEST_F(OneDnnFusedTest, BroadcastOnlyTheReferenceKernelRunsIsUnimplemented) {
  // Batched [B, M, 1] operands have no brgemm broadcast strategy in 2.6.
  auto mm = OneDnnMatMul::Get({.a = {4, 8, 16},
                               .b = {4, 16, 8},
                               .extras = {{4, 8, 1}},
                               .post_ops = {{EwCode::kAdd, 0, 0, 0}}});
  EXPECT_EQ(mm.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(mm.status().message(), HasSubstr("reference"));
}

TEST_F(OneDnnFusedTest, CacheReturnsTheSamePrimitive) {
  const MatMulSpec s{.a = {4, 8}, .b = {8, 3}, .post_ops = {{EwCode::kRelu}}};
  auto first = OneDnnMatMul::Get(s);
  auto again = OneDnnMatMul::Get(s);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->get(), again->get());
  MatMulSpec other = s;
  other.post_ops[0].code = EwCode::kTanh;
  EXPECT_NE(OneDnnMatMul::Get(other)->get(), first->get());
  const ConvSpec c{.x = {1, 4, 5, 5}, .w = {4, 4, 3, 3}};
  EXPECT_EQ(OneDnnConv::Get(c)->get(), OneDnnConv::Get(c)->get());
  // A primitive is built per thread count (oneDNN fixes it at creation).
  at::set_num_threads(2);
  auto two = OneDnnMatMul::Get(s);
  at::set_num_threads(1);
  ASSERT_TRUE(two.ok());
  EXPECT_NE(two->get(), first->get());
  EXPECT_EQ(OneDnnMatMul::Get(s)->get(), first->get());
}

// Get and Run from several threads at once: one primitive, right results.
TEST_F(OneDnnFusedTest, ConcurrentGetAndRun) {
  const ConvSpec s{.x = {2, 16, 9, 9},
                   .w = {16, 16, 3, 3},
                   .has_bias = true,
                   .pads_begin = {1, 1},
                   .pads_end = {1, 1},
                   .extras = {{2, 16, 9, 9}},
                   .post_ops = {{EwCode::kAdd, 0, 0, 0}, {EwCode::kRelu}}};
  const at::Tensor x = Rand(s.x), w = Rand(s.w, false, 0.3), b = Rand({16}), r = Rand(s.extras[0]);
  const at::Tensor want = at::relu(TorchConv(s, x, w, b) + r);
  auto first = OneDnnConv::Get(s);
  ASSERT_TRUE(first.ok());
  std::vector<const OneDnnConv*> got(4);
  std::vector<int> good(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // New threads take LibTorch's global count (1) on first use.
      auto conv = OneDnnConv::Get(s);
      if (!conv.ok()) return;
      got[t] = conv->get();
      for (int i = 0; i < 10; ++i) {
        auto y = (*conv)->Run(x, w, &b, {&r, 1});
        good[t] += y.ok() && at::allclose(*y, want, kRtol, kAtol);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(got[t], first->get());
    EXPECT_EQ(good[t], 10);
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
