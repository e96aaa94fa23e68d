#include "worker/cpu_kernels.h"

#include "gtest/gtest.h"
#include "graph/text_format.h"

namespace braid::worker {
namespace {

// x -> Relu -> y -> Neg -> z.
constexpr char kChain[] = R"(graph "chain"
tensor x f32[4,8] input
tensor y f32[4,8] activation
tensor z f32[4,8] activation
op relu Relu (x) -> (y)
op neg Neg (y) -> (z)
)";

TEST(TensorSlotsTest, ConsumerReadsTheProducersResult) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  TensorSlots slots;
  absl::StatusOr<CpuKernel> relu = MakeCpuKernel(*g, 0, &slots);
  absl::StatusOr<CpuKernel> neg = MakeCpuKernel(*g, 1, &slots);
  ASSERT_TRUE(relu.ok() && neg.ok());
  // Before binding, neg reads its own random stand-in for y.
  at::Tensor stale = neg->run();
  at::Tensor y = relu->run();
  EXPECT_TRUE(at::all(y >= 0).item<bool>());
  EXPECT_FALSE(at::equal(stale, -y));
  ASSERT_TRUE(slots.Bind(1, y));  // tensor id 1 is y
  EXPECT_TRUE(at::equal(neg->run(), -y));
  // The slot shares y's storage: no copy was made.
  at::Tensor y2 = relu->run();
  ASSERT_TRUE(slots.Bind(1, y2));
  EXPECT_TRUE(at::equal(neg->run(), -y2));
}

TEST(TensorSlotsTest, SameInputTensorIsOneSlot) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  TensorSlots slots;
  at::Tensor a = slots.Get(0, g->tensor(0));
  at::Tensor b = slots.Get(0, g->tensor(0));
  EXPECT_EQ(a.unsafeGetTensorImpl(), b.unsafeGetTensorImpl());
  EXPECT_TRUE(slots.Has(0));
  EXPECT_FALSE(slots.Has(2));
}

TEST(TensorSlotsTest, RefusesAResultOfAnotherShapeOrDtype) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  TensorSlots slots;
  absl::StatusOr<CpuKernel> neg = MakeCpuKernel(*g, 1, &slots);
  ASSERT_TRUE(neg.ok());
  at::Tensor before = neg->run();
  EXPECT_FALSE(slots.Bind(1, at::ones({8, 4})));
  EXPECT_FALSE(slots.Bind(1, at::ones({4, 8}, at::kDouble)));
  EXPECT_FALSE(slots.Bind(2, at::ones({4, 8})));  // z: no kernel reads it
  EXPECT_TRUE(at::equal(neg->run(), before));
}

TEST(TensorSlotsTest, WithoutSlotsEveryKernelHasItsOwnInputs) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<CpuKernel> relu = MakeCpuKernel(*g, 0);
  ASSERT_TRUE(relu.ok());
  EXPECT_EQ(relu->run().sizes(), (at::IntArrayRef{4, 8}));
}

}  // namespace
}  // namespace braid::worker
