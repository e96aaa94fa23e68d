// Whole programs on the fused elementwise kernel against LibTorch op by op:
// broadcasting, chains with register reuse, several outputs, reductions,
// bad input, the kernel cache. Tile sizes are varied so that whole-row
// tiles, one-row chunks, partial last tiles and every load mode are hit.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/cpu/fused_elementwise_test_util.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cpu {
namespace {

using testing::AllClose;
using ::testing::HasSubstr;
using testing::MustCompile;
using testing::MustRun;
using testing::ReferenceRun;

constexpr int64_t kTiles[] = {0, 16, 40, 1000};  // 0: the default

void ExpectMatchesReference(const EwProgram& p, const std::vector<at::Tensor>& in, double tol) {
  const std::vector<at::Tensor> want = ReferenceRun(p, in);
  for (int64_t tile : kTiles) {
    for (auto prefetch :
         {FusedElementwiseOptions::Prefetch::kOff, FusedElementwiseOptions::Prefetch::kOn}) {
      SCOPED_TRACE(absl::StrCat("tile ", tile, " prefetch ", static_cast<int>(prefetch)));
      auto k = FusedElementwiseKernel::Compile(p, {tile, EwIsa::kAuto, prefetch});
      ASSERT_TRUE(k.ok()) << k.status();
      const std::vector<at::Tensor> got = MustRun(**k, in);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(AllClose(got[o], want[o], tol, tol)) << "output " << o;
      }
    }
  }
}

std::string Text(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// Random shapes, each input broadcast a random way (full, row vector, column
// vector, scalar [1], rank 0, leading dims dropped, random size-1 dims),
// combined by a random chain whose values are reused; outputs include an
// input, intermediates and random reductions.
TEST(FusedElementwiseProgramTest, RandomBroadcastChainsAndReductions) {
  std::mt19937 rng(11);
  at::manual_seed(11);
  const int64_t kDims[] = {1, 2, 3, 5, 8, 17, 33, 64, 130};
  const EwCode kBinary[] = {EwCode::kAdd, EwCode::kSub,      EwCode::kMul,      EwCode::kMax,
                            EwCode::kMin, EwCode::kReluGrad, EwCode::kTanhGrad, EwCode::kPRelu};
  const EwCode kUnary[] = {EwCode::kRelu, EwCode::kTanh,    EwCode::kNeg,      EwCode::kAffine,
                           EwCode::kGelu, EwCode::kSigmoid, EwCode::kSoftsign, EwCode::kSin};
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int iter = 0; iter < 40; ++iter) {
    EwProgram p;
    const int rank = 1 + pick(4);
    for (int d = 0; d < rank; ++d) p.shape.push_back(kDims[pick(9)]);
    const int n_in = 2 + pick(3);
    for (int i = 0; i < n_in; ++i) {
      std::vector<int64_t> s = p.shape;
      switch (i == 0 ? 0 : pick(7)) {
        case 0: break;                        // full
        case 1: s = {p.shape.back()}; break;  // row vector
        case 2: s.back() = 1; break;          // column vector
        case 3: s = {1}; break;               // scalar
        case 4: s = {}; break;                // rank 0
        case 5: s.erase(s.begin()); break;    // leading dims broadcast
        default:
          for (int64_t& d : s) d = pick(2) ? d : 1;  // random size-1 dims
      }
      p.inputs.push_back(s);
    }
    // A chain folding the inputs in, with unary ops between and an earlier
    // value reused now and then (several readers of one register).
    int acc = 0;
    for (int i = 1; i < n_in; ++i) {
      const int other =
          pick(3) == 0 && p.num_registers() > n_in ? n_in + pick(p.num_registers() - n_in) : i;
      EwInstr b{kBinary[pick(8)], acc, other};
      if (pick(2)) std::swap(b.a, b.b);
      p.instrs.push_back(b);
      acc = p.num_registers() - 1;
      EwInstr u{kUnary[pick(8)], acc};
      u.p0 = 0.5f;
      u.p1 = -0.25f;
      p.instrs.push_back(u);
      acc = p.num_registers() - 1;
    }
    p.instrs.push_back({EwCode::kMul, acc, acc});  // same register twice
    acc = p.num_registers() - 1;
    p.outputs.push_back({acc});
    p.outputs.push_back({pick(n_in)});  // an input written out
    p.outputs.push_back({n_in + pick(static_cast<int>(p.instrs.size()))});
    for (int r = 0; r < 2; ++r) {
      EwOutput o{acc, static_cast<ReduceKind>(1 + pick(3))};
      for (int d = 0; d < rank; ++d) {
        if (pick(2)) o.axes.push_back(d);
      }
      if (o.axes.empty()) o.axes.push_back(pick(rank));
      p.outputs.push_back(o);
    }
    std::vector<at::Tensor> in;
    for (const auto& s : p.inputs) in.push_back(at::randn(s));
    SCOPED_TRACE(p.Signature());
    ExpectMatchesReference(p, in, 1e-4);
  }
}

// y = relu(x + b) reduced over leading, trailing, middle and all axes, a
// size-1 axis, and the kept/reduced patterns mixed.
TEST(FusedElementwiseProgramTest, ReductionsOverEveryAxisPattern) {
  at::manual_seed(3);
  EwProgram p;
  p.shape = {6, 1, 7, 300};
  p.inputs = {{6, 1, 7, 300}, {300}};
  p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 2}};
  p.outputs = {{3},
               {3, ReduceKind::kSum, {0}},
               {3, ReduceKind::kSum, {3}},
               {3, ReduceKind::kSum, {2}},
               {3, ReduceKind::kMean, {0, 3}},
               {3, ReduceKind::kMax, {2, 3}},
               {3, ReduceKind::kMax, {0}},
               {3, ReduceKind::kSum, {0, 1, 2, 3}},
               {3, ReduceKind::kMean, {0, 1, 2, 3}},
               {3, ReduceKind::kMax, {0, 1, 2, 3}},
               {3, ReduceKind::kMean, {1}},
               {2, ReduceKind::kSum, {0, 2}}};
  ExpectMatchesReference(p, {at::randn({6, 1, 7, 300}), at::randn({300})}, 1e-5);
}

// The bias-gradient pattern: dx = relu_grad(dy, y) and its column sums.
TEST(FusedElementwiseProgramTest, ReluGradWithColumnSum) {
  at::manual_seed(4);
  EwProgram p{{512, 96},
              {{512, 96}, {512, 96}},
              {{EwCode::kReluGrad, 0, 1}},
              {{2}, {2, ReduceKind::kSum, {0}}}};
  const at::Tensor dy = at::randn({512, 96});
  const at::Tensor y = at::relu(at::randn({512, 96}));
  ExpectMatchesReference(p, {dy, y}, 1e-5);
  const std::vector<at::Tensor> out = MustRun(*MustCompile(p), {dy, y});
  EXPECT_TRUE(AllClose(out[1], at::threshold_backward(dy, y, 0).sum(0, true), 1e-5, 1e-5));
}

// 1M-point sums (all points, per column, per row) stay within 1e-5 relative
// of at::sum and of a double-precision sum: float accumulation would not.
TEST(FusedElementwiseProgramTest, LargeSumsAreAccurate) {
  at::manual_seed(5);
  const int64_t n = 1 << 20;
  const at::Tensor x = at::rand({n}) + 0.25;
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> axes;
  };
  for (const Case& c : {Case{{n}, {0}}, Case{{n / 8, 8}, {0}}, Case{{8, n / 8}, {1}}}) {
    SCOPED_TRACE(Text(c.shape));
    EwProgram p{c.shape, {c.shape}, {{EwCode::kCopy, 0}}, {{1, ReduceKind::kSum, c.axes}}};
    const at::Tensor xs = x.view(c.shape);
    const at::Tensor got = MustRun(*MustCompile(p), {xs})[0];
    std::vector<int64_t> axes(c.axes.begin(), c.axes.end());
    EXPECT_TRUE(AllClose(got, at::sum(xs, axes, true), 1e-5, 0));
    EXPECT_TRUE(AllClose(got, at::sum(xs.to(at::kDouble), axes, true), 2e-7, 0));
  }
}

// A program moving more than the streaming threshold (32 MiB here) gets
// short tiles and prefetch by default, one that fits in cache neither.
TEST(FusedElementwiseProgramTest, DefaultTilingFollowsProgramSize) {
  at::manual_seed(12);
  const std::vector<int64_t> big = {2048, 1024};
  EwProgram p{big,
              {big, big, {1024}},
              {{EwCode::kAdd, 0, 1}, {EwCode::kMul, 3, 2}, {EwCode::kRelu, 4}},
              {{5}, {5, ReduceKind::kSum, {0}}}};
  auto k = FusedElementwiseKernel::Get(p);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->tile_elems(), 256);
  EXPECT_TRUE((*k)->prefetch());
  const std::vector<at::Tensor> in = {at::randn(big), at::randn(big), at::randn({1024})};
  const std::vector<at::Tensor> got = MustRun(**k, in);
  const std::vector<at::Tensor> want = ReferenceRun(p, in);
  EXPECT_TRUE(AllClose(got[0], want[0], 1e-6, 1e-6));
  EXPECT_TRUE(AllClose(got[1], want[1], 1e-5, 1e-4));

  EwProgram small = p;
  small.shape = {16, 1024};
  small.inputs = {{16, 1024}, {16, 1024}, {1024}};
  auto ks = FusedElementwiseKernel::Get(small);
  ASSERT_TRUE(ks.ok()) << ks.status();
  EXPECT_EQ((*ks)->tile_elems(), 1024);
  EXPECT_FALSE((*ks)->prefetch());
}

TEST(FusedElementwiseProgramTest, MaxPropagatesNan) {
  at::Tensor x = at::randn({4, 50});
  x[2][7] = NAN;
  EwProgram p{{4, 50},
              {{4, 50}, {50}},
              {{EwCode::kMax, 0, 1}, {EwCode::kRelu, 0}},
              {{2}, {3}, {0, ReduceKind::kMax, {1}}, {0, ReduceKind::kMax, {0}}}};
  ExpectMatchesReference(p, {x, at::randn({50})}, 1e-6);
}

// Liveness: a long chain needs few buffers, dead code is dropped, one value
// read by several instructions and written to several outputs.
TEST(FusedElementwiseProgramTest, ChainReusesBuffersAndSkipsDeadCode) {
  at::manual_seed(6);
  EwProgram p;
  p.shape = {33, 70};
  p.inputs = {{33, 70}, {33, 70}, {70}};
  p.instrs = {
      {EwCode::kMul, 0, 1},                       // r3
      {EwCode::kTanh, 3},                         // r4
      {EwCode::kAdd, 3, 4},                       // r5: r3 read twice
      {EwCode::kMul, 5, 5},                       // r6
      {EwCode::kLog, 0},                          // r7: dead (NaN for negative x, never read)
      {EwCode::kSub, 6, 2},                       // r8
      {EwCode::kGeluGrad, 8, 3},                  // r9
      {EwCode::kRelu, 9},                         // r10
      {EwCode::kAffine, 10, -1, -1, 2.0f, 1.0f},  // r11
  };
  p.outputs = {{11}, {4}, {0}, {11}, {2}, {3, ReduceKind::kMean, {1}}};
  const std::vector<at::Tensor> in = {at::randn({33, 70}), at::randn({33, 70}), at::randn({70})};
  ExpectMatchesReference(p, in, 1e-4);
  auto k = MustCompile(p);
  ASSERT_NE(k, nullptr);
  EXPECT_LE(k->num_buffers(), 3);
}

// Inputs that are only written out, in every load mode (full, scalar,
// pattern, gathered), next to a chain that needs buffers of its own.
TEST(FusedElementwiseProgramTest, InputsWrittenOutOnly) {
  at::manual_seed(7);
  EwProgram p;
  p.shape = {9, 5, 40};
  p.inputs = {{9, 5, 40}, {1}, {40}, {9, 1, 40}, {9, 5, 40}};
  p.instrs = {{EwCode::kMul, 0, 4}, {EwCode::kTanh, 5}, {EwCode::kAdd, 6, 5}};
  p.outputs = {{1}, {2}, {3}, {7}, {3, ReduceKind::kSum, {1}}, {1, ReduceKind::kMax, {0, 2}}};
  std::vector<at::Tensor> in;
  for (const auto& s : p.inputs) in.push_back(at::randn(s));
  ExpectMatchesReference(p, in, 1e-5);
}

TEST(FusedElementwiseProgramTest, SinglePointAndRankZero) {
  EwProgram scalar{{}, {{}, {}}, {{EwCode::kAdd, 0, 1}}, {{2}}};
  ExpectMatchesReference(scalar, {at::scalar_tensor(1.5f), at::scalar_tensor(-4.0f)}, 0);
  EwProgram point{{1, 1}, {{1}}, {{EwCode::kExp, 0}}, {{1}, {1, ReduceKind::kSum, {0, 1}}}};
  ExpectMatchesReference(point, {at::full({1}, 0.5f)}, 1e-6);
}

TEST(FusedElementwiseProgramTest, NonContiguousInputs) {
  at::manual_seed(8);
  EwProgram p{
      {40, 24}, {{40, 24}, {40, 24}, {24}}, {{EwCode::kMul, 0, 1}, {EwCode::kAdd, 3, 2}}, {{4}}};
  const at::Tensor xt = at::randn({24, 40}).t();              // transposed
  const at::Tensor yb = at::randn({1, 24}).expand({40, 24});  // stride-0 rows
  const at::Tensor bs = at::randn({48}).slice(0, 1, 48, 2);   // strided slice
  ASSERT_FALSE(xt.is_contiguous());
  ASSERT_FALSE(yb.is_contiguous());
  ASSERT_FALSE(bs.is_contiguous());
  ExpectMatchesReference(p, {xt, yb, bs}, 1e-6);
}

TEST(FusedElementwiseProgramTest, RunIntoWritesCallerOutputs) {
  EwProgram p{{8, 16}, {{8, 16}}, {{EwCode::kNeg, 0}}, {{1}, {1, ReduceKind::kSum, {1}}}};
  auto k = MustCompile(p);
  ASSERT_NE(k, nullptr);
  const at::Tensor x = at::randn({8, 16});
  std::vector<at::Tensor> out = {at::empty({8, 16}), at::empty({8, 1})};
  ASSERT_TRUE(k->RunInto({&x, 1}, out).ok());
  EXPECT_TRUE(AllClose(out[0], -x, 0, 0));
  EXPECT_TRUE(AllClose(out[1], -x.sum(1, true), 1e-5, 1e-5));
}

TEST(FusedElementwiseProgramTest, BadInputsAreInvalidArgument) {
  EwProgram p{{8, 16}, {{8, 16}, {16}}, {{EwCode::kAdd, 0, 1}}, {{2}}};
  auto k = MustCompile(p);
  ASSERT_NE(k, nullptr);
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor b = at::randn({16});
  struct Bad {
    std::vector<at::Tensor> in;
    std::string message;
  };
  const Bad bad[] = {
      {{x}, "got 1 inputs"},
      {{x, at::randn({8, 16})}, "input 1 has shape [8,16], want [16]"},
      {{x, at::randn({1, 16})}, "input 1 has shape [1,16]"},
      {{x.to(at::kDouble), b}, "input 0 is Double"},
      {{x, b.to(at::kInt)}, "input 1 is Int"},
      {{x, at::Tensor()}, "input 1 is undefined"},
  };
  for (const Bad& c : bad) {
    auto out = k->Run(c.in);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.message));
  }
  std::vector<at::Tensor> in = {x, b};
  std::vector<at::Tensor> wrong_shape = {at::empty({16, 8})};
  EXPECT_EQ(k->RunInto(in, wrong_shape).code(), absl::StatusCode::kInvalidArgument);
  std::vector<at::Tensor> strided = {at::empty({16, 8}).t()};
  EXPECT_EQ(k->RunInto(in, strided).code(), absl::StatusCode::kInvalidArgument);
  std::vector<at::Tensor> aliased = {x};
  const absl::Status overlap = k->RunInto(in, aliased);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(overlap.message()), HasSubstr("overlaps input 0"));
  std::vector<at::Tensor> too_many = {at::empty({8, 16}), at::empty({8, 16})};
  EXPECT_EQ(k->RunInto(in, too_many).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FusedElementwiseProgramTest, InvalidProgramsAreRejected) {
  const EwProgram bad[] = {
      {{8}, {{8}}, {{EwCode::kAdd, 0, 1}}, {{1}}},                       // reads itself
      {{8}, {{4}}, {{EwCode::kRelu, 0}}, {{1}}},                         // not broadcastable
      {{8}, {{8}}, {{EwCode::kRelu, 0}}, {}},                            // no outputs
      {{8}, {{8}}, {{EwCode::kRelu, 0}}, {{1, ReduceKind::kSum, {1}}}},  // bad axis
  };
  for (const EwProgram& p : bad) {
    EXPECT_EQ(FusedElementwiseKernel::Get(p).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(FusedElementwiseKernel::Compile(p, {}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EwProgram bad_kind{{8}, {{8}}, {{EwCode::kRelu, 0}}, {{1, static_cast<ReduceKind>(9), {0}}}};
  EXPECT_EQ(FusedElementwiseKernel::Get(bad_kind).status().code(),
            absl::StatusCode::kInvalidArgument);
  EwProgram ok{{8}, {{8}}, {{EwCode::kRelu, 0}}, {{1}}};
  EXPECT_EQ(FusedElementwiseKernel::Compile(ok, {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FusedElementwiseProgramTest, CacheReturnsOneKernelPerSignature) {
  EwProgram p{{4, 9}, {{4, 9}}, {{EwCode::kLeakyRelu, 0, -1, -1, 0.01f}}, {{1}}};
  auto a = FusedElementwiseKernel::Get(p);
  auto b = FusedElementwiseKernel::Get(p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(p.Signature(), (*a)->program().Signature());
  EwProgram q = p;
  q.instrs[0].p0 = 0.02f;  // another parameter: another kernel
  auto c = FusedElementwiseKernel::Get(q);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->get(), c->get());
}

TEST(FusedElementwiseProgramTest, ConcurrentRunsAgree) {
  at::manual_seed(9);
  EwProgram p{{300, 70},
              {{300, 70}, {70}},
              {{EwCode::kAdd, 0, 1}, {EwCode::kGelu, 2}},
              {{3}, {3, ReduceKind::kSum, {0}}}};
  auto k = FusedElementwiseKernel::Get(p);
  ASSERT_TRUE(k.ok());
  const std::vector<at::Tensor> in = {at::randn({300, 70}), at::randn({70})};
  const std::vector<at::Tensor> want = ReferenceRun(p, in);
  std::vector<std::vector<at::Tensor>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&] {
      for (int r = 0; r < 5; ++r) g = *(*k)->Run(in);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) {
    EXPECT_TRUE(AllClose(g[0], want[0], 1e-5, 1e-5));
    EXPECT_TRUE(AllClose(g[1], want[1], 1e-5, 1e-5));
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
