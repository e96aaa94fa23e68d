#include "graph/graph.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;

Graph Chain() {
  Graph g("chain");
  TensorId x = g.AddTensor("x", {4, 8}, DType::kF32, TensorRole::kInput);
  TensorId w = g.AddTensor("w", {8, 2}, DType::kF32, TensorRole::kParameter);
  TensorId y = g.AddTensor("y", {4, 2}, DType::kF32, TensorRole::kActivation);
  TensorId z = g.AddTensor("z", {4, 2}, DType::kF32, TensorRole::kActivation);
  g.AddOp("mm", "MatMul", {x, w}, {y});
  g.AddOp("relu", "Relu", {y}, {z});
  g.AddOutput(z);
  return g;
}

TEST(GraphTest, ValidChainHasTopologicalOrderAndCounts) {
  Graph g = Chain();
  ASSERT_TRUE(g.Validate().ok()) << g.Validate();
  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(*order, (std::vector<OpId>{0, 1}));
  EXPECT_EQ(g.NumParameters(), 16);
  EXPECT_EQ(g.Successors(0), std::vector<OpId>{1});
  EXPECT_EQ(g.Predecessors(1), std::vector<OpId>{0});
  EXPECT_EQ(g.tensor(0).Bytes(), 4 * 8 * 4);
}

TEST(GraphTest, CycleIsRejectedNamingAnOp) {
  Graph g("cyc");
  TensorId a = g.AddTensor("a", {1}, DType::kF32, TensorRole::kActivation);
  TensorId b = g.AddTensor("b", {1}, DType::kF32, TensorRole::kActivation);
  g.AddOp("f", "Relu", {b}, {a});
  g.AddOp("h", "Relu", {a}, {b});
  absl::Status s = g.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cycle"));
}

TEST(GraphTest, ParameterWithProducerIsRejected) {
  Graph g("bad");
  TensorId x = g.AddTensor("x", {1}, DType::kF32, TensorRole::kInput);
  TensorId w = g.AddTensor("w", {1}, DType::kF32, TensorRole::kParameter);
  g.AddOp("f", "Relu", {x}, {w});
  absl::Status s = g.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("parameter tensor 'w'"));
}

TEST(GraphTest, TwoProducersAreRejected) {
  Graph g("bad");
  TensorId x = g.AddTensor("x", {1}, DType::kF32, TensorRole::kInput);
  TensorId y = g.AddTensor("y", {1}, DType::kF32, TensorRole::kActivation);
  g.AddOp("f", "Relu", {x}, {y});
  g.AddOp("h", "Relu", {x}, {y});
  EXPECT_THAT(std::string(g.Validate().message()), HasSubstr("produced by two ops"));
}

TEST(GraphTest, GradientShapeMustMatchParameter) {
  Graph g("bad");
  TensorId w = g.AddTensor("w", {3}, DType::kF32, TensorRole::kParameter);
  TensorId gw = g.AddTensor("w_grad", {2}, DType::kF32, TensorRole::kGradient);
  g.mutable_tensor(gw).grad_of = w;
  g.AddOp("f", "Relu", {w}, {gw});
  EXPECT_THAT(std::string(g.Validate().message()), HasSubstr("gradient tensor 'w_grad' has shape [2]"));
}

}  // namespace
}  // namespace braid::graph
