#include "graph/ops.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;

constexpr DType kF = DType::kF32;
constexpr TensorRole kAct = TensorRole::kActivation;
constexpr TensorRole kIn = TensorRole::kInput;
constexpr TensorRole kParam = TensorRole::kParameter;

// Adds a one-op graph and returns the annotated op.
Op Annotated(Graph& g, const std::string& type, std::vector<TensorId> in, std::vector<TensorId> out,
             Attrs attrs = {}) {
  OpId id = g.AddOp("op" + std::to_string(g.num_ops()), type, std::move(in), std::move(out),
                    std::move(attrs));
  AnnotateCost(g, id);
  return g.op(id);
}

TEST(OpsTest, MatMulFlopsAndBytes) {
  Graph g;
  TensorId a = g.AddTensor("a", {32, 1024}, kF, kIn);
  TensorId b = g.AddTensor("b", {1024, 256}, kF, kParam);
  TensorId y = g.AddTensor("y", {32, 256}, kF, kAct);
  Op op = Annotated(g, "MatMul", {a, b}, {y});
  EXPECT_DOUBLE_EQ(op.flops, 2.0 * 32 * 1024 * 256);
  EXPECT_EQ(op.bytes_read, (32 * 1024 + 1024 * 256) * 4);
  EXPECT_EQ(op.bytes_written, 32 * 256 * 4);
}

TEST(OpsTest, BatchedAndTransposedMatMul) {
  Graph g;
  TensorId a = g.AddTensor("a", {4, 8, 16}, kF, kIn);
  TensorId b = g.AddTensor("b", {16, 32}, kF, kParam);
  TensorId y = g.AddTensor("y", {4, 8, 32}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "MatMul", {a, b}, {y}).flops, 2.0 * 4 * 8 * 16 * 32);
  // transA: A is [K=16, M=8].
  TensorId at = g.AddTensor("at", {16, 8}, kF, kIn);
  TensorId y2 = g.AddTensor("y2", {8, 32}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "MatMul", {at, b}, {y2}, {{"transA", int64_t{1}}}).flops,
                   2.0 * 8 * 16 * 32);
}

TEST(OpsTest, GemmWithBiasAddsMN) {
  Graph g;
  TensorId a = g.AddTensor("a", {8, 16}, kF, kIn);
  TensorId w = g.AddTensor("w", {32, 16}, kF, kParam);
  TensorId c = g.AddTensor("c", {32}, kF, kParam);
  TensorId y = g.AddTensor("y", {8, 32}, kF, kAct);
  Op op = Annotated(g, "Gemm", {a, w, c}, {y}, {{"transB", int64_t{1}}});
  EXPECT_DOUBLE_EQ(op.flops, 2.0 * 8 * 16 * 32 + 8 * 32);  // 8448
  TensorId y2 = g.AddTensor("y2", {8, 32}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "Gemm", {a, w}, {y2}, {{"transB", int64_t{1}}}).flops, 8192);
}

TEST(OpsTest, GroupedStridedPaddedConv) {
  // X [2,4,9,9], W [6, 4/2, 3, 3], stride 2, pad 1 -> Hout = (9+2-3)/2+1 = 5.
  Graph g;
  TensorId x = g.AddTensor("x", {2, 4, 9, 9}, kF, kIn);
  TensorId w = g.AddTensor("w", {6, 2, 3, 3}, kF, kParam);
  TensorId b = g.AddTensor("b", {6}, kF, kParam);
  TensorId y = g.AddTensor("y", {2, 6, 5, 5}, kF, kAct);
  Attrs attrs = {{"kernel_shape", std::vector<int64_t>{3, 3}},
                 {"strides", std::vector<int64_t>{2, 2}},
                 {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                 {"group", int64_t{2}}};
  const double core = 2.0 * 2 * 6 * 5 * 5 * 2 * 3 * 3;  // 10800
  EXPECT_DOUBLE_EQ(Annotated(g, "Conv", {x, w}, {y}, attrs).flops, core);
  TensorId y2 = g.AddTensor("y2", {2, 6, 5, 5}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "Conv", {x, w, b}, {y2}, attrs).flops, core + 2 * 6 * 5 * 5);
  // Both gradients cost the forward conv without bias.
  TensorId dx = g.AddTensor("dx", {2, 4, 9, 9}, kF, kAct);
  TensorId dw = g.AddTensor("dw", {6, 2, 3, 3}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "ConvGradData", {y, w}, {dx}, attrs).flops, core);
  EXPECT_DOUBLE_EQ(Annotated(g, "ConvGradFilter", {x, y}, {dw}, attrs).flops, core);
}

TEST(OpsTest, ConvTransposeIteratesItsInput) {
  // X [1,8,4,4], W [8, 3, 2, 2] (Cout/group = 3), stride 2 -> Y [1,3,8,8].
  Graph g;
  TensorId x = g.AddTensor("x", {1, 8, 4, 4}, kF, kIn);
  TensorId w = g.AddTensor("w", {8, 3, 2, 2}, kF, kParam);
  TensorId y = g.AddTensor("y", {1, 3, 8, 8}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "ConvTranspose", {x, w}, {y}).flops, 2.0 * 8 * 16 * 3 * 4);
}

TEST(OpsTest, ElementwiseConstants) {
  Graph g;
  TensorId a = g.AddTensor("a", {3, 5}, kF, kIn);
  TensorId b = g.AddTensor("b", {5}, kF, kIn);
  auto out = [&] { return g.AddTensor("t" + std::to_string(g.num_tensors()), {3, 5}, kF, kAct); };
  EXPECT_DOUBLE_EQ(Annotated(g, "Relu", {a}, {out()}).flops, 15);
  EXPECT_DOUBLE_EQ(Annotated(g, "Add", {a, b}, {out()}).flops, 15);
  EXPECT_DOUBLE_EQ(Annotated(g, "Sigmoid", {a}, {out()}).flops, 60);
  EXPECT_DOUBLE_EQ(Annotated(g, "Gelu", {a}, {out()}).flops, 120);
  EXPECT_DOUBLE_EQ(Annotated(g, "Sum", {a, a, b}, {out()}).flops, 30);
  // Gradients cost twice the forward.
  EXPECT_DOUBLE_EQ(Annotated(g, "ReluGrad", {a, a}, {out()}).flops, 30);
  EXPECT_DOUBLE_EQ(Annotated(g, "GeluGrad", {a, a}, {out()}).flops, 240);
  // Data movement is free of FLOPs but not of bytes; a repeated input is read once.
  TensorId r = g.AddTensor("r", {15}, kF, kAct);
  Op reshape = Annotated(g, "Reshape", {a}, {r});
  EXPECT_DOUBLE_EQ(reshape.flops, 0);
  EXPECT_EQ(reshape.bytes_read, 60);
  EXPECT_EQ(reshape.bytes_written, 60);
  EXPECT_EQ(Annotated(g, "Mul", {a, a}, {out()}).bytes_read, 60);
}

TEST(OpsTest, NormalizationSoftmaxPoolReduction) {
  Graph g;
  TensorId x = g.AddTensor("x", {1, 2, 4, 4}, kF, kIn);
  TensorId s = g.AddTensor("s", {2}, kF, kParam);
  TensorId y = g.AddTensor("y", {1, 2, 4, 4}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "BatchNormalization", {x, s, s, s, s}, {y}).flops, 5 * 32);
  TensorId y2 = g.AddTensor("y2", {1, 2, 4, 4}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "Softmax", {x}, {y2}).flops, 8 * 32);
  TensorId p = g.AddTensor("p", {1, 2, 2, 2}, kF, kAct);
  EXPECT_DOUBLE_EQ(
      Annotated(g, "MaxPool", {x}, {p}, {{"kernel_shape", std::vector<int64_t>{3, 3}}}).flops,
      9 * 8);
  TensorId gp = g.AddTensor("gp", {1, 2, 1, 1}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "GlobalAveragePool", {x}, {gp}).flops, 32);
  TensorId r = g.AddTensor("r", {1, 2}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "ReduceMean", {x}, {r}).flops, 32);
}

TEST(OpsTest, LstmCountsGatesAndPointwise) {
  // seq 5, batch 2, input 3, hidden 4: per row 2*(3+4)*16 + 32*4 = 352.
  Graph g;
  TensorId x = g.AddTensor("x", {5, 2, 3}, kF, kIn);
  TensorId w = g.AddTensor("w", {1, 16, 3}, kF, kParam);
  TensorId r = g.AddTensor("r", {1, 16, 4}, kF, kParam);
  TensorId y = g.AddTensor("y", {5, 1, 2, 4}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "LSTM", {x, w, r}, {y}, {{"hidden_size", int64_t{4}}}).flops,
                   10 * 352);
  TensorId dx = g.AddTensor("dx", {5, 2, 3}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "LSTMGrad", {x, w, r, y}, {dx}).flops, 2 * 10 * 352);
}

TEST(OpsTest, EinsumShapeAndFlops) {
  auto shape = EinsumOutputShape("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}});
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_THAT(*shape, ElementsAre(2, 3, 5));
  auto ell = EinsumOutputShape("...ij,jk", {{7, 2, 3}, {3, 6}});
  ASSERT_TRUE(ell.ok()) << ell.status();
  EXPECT_THAT(*ell, ElementsAre(7, 2, 6));
  EXPECT_FALSE(EinsumOutputShape("ij,jk->iz", {{2, 3}, {3, 4}}).ok());
  Graph g;
  TensorId a = g.AddTensor("a", {2, 3, 4}, kF, kIn);
  TensorId b = g.AddTensor("b", {2, 4, 5}, kF, kIn);
  TensorId y = g.AddTensor("y", {2, 3, 5}, kF, kAct);
  EXPECT_DOUBLE_EQ(
      Annotated(g, "Einsum", {a, b}, {y}, {{"equation", std::string("bij,bjk->bik")}}).flops,
      2.0 * 2 * 3 * 4 * 5);
}

TEST(OpsTest, UpdatesAndCollectives) {
  Graph g;
  TensorId p = g.AddTensor("p", {10, 10}, kF, kParam);
  TensorId o1 = g.AddTensor("o1", {10, 10}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "SgdMomentumUpdate", {p}, {o1}).flops, 400);
  TensorId o2 = g.AddTensor("o2", {10, 10}, kF, kAct);
  EXPECT_DOUBLE_EQ(Annotated(g, "AdamUpdate", {p}, {o2}).flops, 1200);
  TensorId o3 = g.AddTensor("o3", {10, 10}, kF, kAct);
  Op ar = Annotated(g, "AllReduce", {p}, {o3});
  EXPECT_DOUBLE_EQ(ar.flops, 0);
  EXPECT_EQ(ar.bytes_read, 400);
}

TEST(OpsTest, CategoriesAndFusibility) {
  EXPECT_EQ(CategoryOf("Conv"), OpCategory::kConv);
  EXPECT_EQ(CategoryOf("ConvGradFilter"), OpCategory::kConv);
  EXPECT_EQ(CategoryOf("ReluGrad"), OpCategory::kElementwise);
  EXPECT_EQ(CategoryOf("GeluGrad"), OpCategory::kElementwise);
  EXPECT_EQ(CategoryOf("BatchNormalizationGrad"), OpCategory::kNormalization);
  EXPECT_EQ(CategoryOf("GatherGrad"), OpCategory::kGather);
  EXPECT_EQ(CategoryOf("SoftmaxCrossEntropyLoss"), OpCategory::kLoss);
  EXPECT_EQ(CategoryOf("Loop"), OpCategory::kControlFlow);
  EXPECT_EQ(CategoryOf("NoSuchOp"), OpCategory::kOpaque);
  EXPECT_EQ(CategoryOf("NoSuchOpGrad"), OpCategory::kOpaque);
  EXPECT_EQ(CategoryName(OpCategory::kDataMovement), "data_movement");
  EXPECT_TRUE(IsKnownOpType("Einsum"));
  EXPECT_TRUE(IsKnownOpType("If"));
  EXPECT_FALSE(IsKnownOpType("NoSuchOp"));

  auto op = [](std::string type) {
    Op o;
    o.type = std::move(type);
    o.kind = OpKindFromName(o.type);
    return o;
  };
  for (const char* t : {"Conv", "MatMul", "Relu", "Reshape", "ReduceSum", "LayerNormalization",
                        "Softmax", "SoftmaxCrossEntropyLoss", "Gather", "MaxPool", "ReluGrad"}) {
    EXPECT_TRUE(IsFusible(op(t))) << t;
  }
  for (const char* t :
       {"AllReduce", "SgdMomentumUpdate", "AdamUpdate", "If", "LSTM", "LSTMGrad", "NoSuchOp"}) {
    EXPECT_FALSE(IsFusible(op(t))) << t;
  }
  Op opaque_relu = op("Relu");
  opaque_relu.opaque = true;
  EXPECT_FALSE(IsFusible(opaque_relu));
  EXPECT_TRUE(IsElementwiseLike(op("Add")));
  EXPECT_TRUE(IsElementwiseLike(op("Transpose")));
  EXPECT_TRUE(IsElementwiseLike(op("ReduceMean")));
  EXPECT_FALSE(IsElementwiseLike(op("MatMul")));
  EXPECT_FALSE(IsElementwiseLike(op("Softmax")));
}

TEST(OpsTest, OpaqueOpsCostOnlyBytes) {
  Graph g;
  TensorId x = g.AddTensor("x", {4}, kF, kIn);
  TensorId y = g.AddTensor("y", {8}, kF, kAct);
  Op op = Annotated(g, "NoSuchOp", {x}, {y});
  EXPECT_DOUBLE_EQ(op.flops, 0);
  EXPECT_EQ(op.bytes_read, 16);
  EXPECT_EQ(op.bytes_written, 32);
}

}  // namespace
}  // namespace braid::graph
