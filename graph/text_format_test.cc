#include "graph/text_format.h"

#include "gmock/gmock.h"
#include "graph/fingerprint.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;

constexpr char kMlp[] = R"(graph "mlp"
# a two-layer perceptron with one gradient
tensor x f32[32,64] input
tensor w1 f32[64,128] parameter
tensor h f32[32,128] activation
tensor "odd name=1" f32[32,128] activation
tensor w1.grad f32[64,128] gradient of=w1
op mm1 MatMul (x, w1) -> (h) {transB=0} flops=524288.0 read=40960 written=16384
op act Gelu (h) -> ("odd name=1") {approximate="tanh", alpha=0.5, pads=[0,1,-2], scales=f[1.5,2.0], empty=[]}
op mm1.grad MatMul (x, "odd name=1") -> (w1.grad) {transA=1} phase=backward flops=524288.0 opaque
output "odd name=1"
)";

TEST(TextFormatTest, ParsesEveryField) {
  auto g = ParseText(kMlp);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), "mlp");
  ASSERT_EQ(g->num_tensors(), 5);
  ASSERT_EQ(g->num_ops(), 3);
  EXPECT_EQ(g->tensor(3).name, "odd name=1");
  EXPECT_EQ(g->tensor(4).grad_of, 1);
  const Op& act = g->op(1);
  EXPECT_EQ(act.GetString("approximate", ""), "tanh");
  EXPECT_DOUBLE_EQ(act.GetFloat("alpha", 0), 0.5);
  EXPECT_EQ(act.GetInts("pads"), (std::vector<int64_t>{0, 1, -2}));
  EXPECT_EQ(std::get<std::vector<double>>(act.attrs.at("scales")), (std::vector<double>{1.5, 2.0}));
  EXPECT_EQ(g->op(0).bytes_read, 40960);
  EXPECT_DOUBLE_EQ(g->op(0).flops, 524288.0);
  EXPECT_EQ(g->op(2).phase, Phase::kBackward);
  EXPECT_TRUE(g->op(2).opaque);
  EXPECT_EQ(g->outputs(), std::vector<TensorId>{3});
}

TEST(TextFormatTest, RoundTripsExactly) {
  auto g = ParseText(kMlp);
  ASSERT_TRUE(g.ok()) << g.status();
  std::string text = ToText(*g);
  auto again = ParseText(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(ToText(*again), text);
  EXPECT_EQ(*Fingerprint(*again), *Fingerprint(*g));
  // Doubles survive bit-exactly.
  Graph h("d");
  TensorId x = h.AddTensor("x", {1}, DType::kF32, TensorRole::kInput);
  TensorId y = h.AddTensor("y", {1}, DType::kF32, TensorRole::kActivation);
  OpId o = h.AddOp("o", "Relu", {x}, {y}, {{"c", 0.1 + 0.2}});
  h.mutable_op(o).flops = 1.0 / 3.0;
  auto h2 = ParseText(ToText(h));
  ASSERT_TRUE(h2.ok()) << h2.status();
  EXPECT_EQ(h2->op(0).flops, 1.0 / 3.0);
  EXPECT_EQ(h2->op(0).GetFloat("c", 0), 0.1 + 0.2);
}

TEST(TextFormatTest, ErrorsNameTheLine) {
  auto bad = ParseText("graph \"g\"\ntensor x f32[2] input\nop a Relu (x, nope) -> (x)\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 3: unknown tensor 'nope'"));
  auto dtype = ParseText("graph \"g\"\ntensor x q7[2] input\n");
  EXPECT_THAT(std::string(dtype.status().message()), HasSubstr("line 2: unknown dtype 'q7'"));
  auto header = ParseText("tensor x f32[2] input\n");
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("line 1: expected the header"));
  auto cycle = ParseText(
      "graph \"c\"\ntensor a f32[1] activation\ntensor b f32[1] activation\n"
      "op f Relu (a) -> (b)\nop g Relu (b) -> (a)\n");
  EXPECT_THAT(std::string(cycle.status().message()), HasSubstr("cycle"));
  auto grad = ParseText("graph \"g\"\ntensor w f32[2] parameter\ntensor g f32[2] gradient of=v\n");
  EXPECT_THAT(std::string(grad.status().message()), HasSubstr("unknown parameter 'v'"));
}

constexpr char kDiamondA[] = R"(graph "a"
tensor x f32[8,8] input
tensor w f32[8,8] parameter
tensor a f32[8,8] activation
tensor b f32[8,8] activation
tensor c f32[8,8] activation
tensor d f32[8,8] activation
op mm MatMul (x, w) -> (a)
op r Relu (a) -> (b)
op s Sigmoid (a) -> (c)
op add Add (b, c) -> (d)
output d
)";

// Same graph: other names, ops listed in another (still topological) order,
// tensors declared in another order.
constexpr char kDiamondB[] = R"(graph "b"
tensor weights f32[8,8] parameter
tensor data f32[8,8] input
tensor t0 f32[8,8] activation
tensor t2 f32[8,8] activation
tensor t1 f32[8,8] activation
tensor out f32[8,8] activation
op op0 MatMul (data, weights) -> (t0)
op op1 Sigmoid (t0) -> (t2)
op op2 Relu (t0) -> (t1)
op op3 Add (t1, t2) -> (out)
output out
)";

TEST(FingerprintTest, InvariantToNamesAndListingOrder) {
  auto a = ParseText(kDiamondA);
  auto b = ParseText(kDiamondB);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*Fingerprint(*a), *Fingerprint(*b));
  EXPECT_EQ(FingerprintHex(*a)->size(), 16u);
}

TEST(FingerprintTest, ChangesWithStructure) {
  std::string base = kDiamondA;
  auto fp = [](const std::string& text) {
    auto g = ParseText(text);
    EXPECT_TRUE(g.ok()) << g.status();
    return *Fingerprint(*g);
  };
  const uint64_t f0 = fp(base);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(fp(replaced("op s Sigmoid", "op s Tanh")), f0);            // op type
  EXPECT_NE(fp(replaced("tensor w f32[8,8]", "tensor w f16[8,8]")), f0);  // dtype
  EXPECT_NE(fp(replaced("op add Add (b, c)", "op add Add (c, b)")), f0);  // operand order
  EXPECT_NE(fp(replaced("op r Relu (a) -> (b)", "op r Relu (a) -> (b) {x=1}")), f0);  // attr
  EXPECT_NE(fp(replaced("op r Relu (a)", "op r Relu (x)")), f0);        // edge
}

}  // namespace
}  // namespace braid::graph
