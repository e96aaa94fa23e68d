#include "graph/builder.h"

#include <string>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Shape = std::vector<int64_t>;

const Op& ProducerOf(const GraphBuilder& b, TensorId t) {
  return b.graph().op(b.graph().tensor(t).producer);
}

const Tensor& Named(const GraphBuilder& b, const std::string& name) {
  absl::StatusOr<TensorId> t = b.graph().FindTensor(name);
  EXPECT_TRUE(t.ok()) << name;
  return b.graph().tensor(*t);
}

TEST(GraphBuilderTest, ConvSquareStridePad) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {2, 3, 32, 32});
  TensorId y = b.Conv(x, 16, /*kernel=*/3, /*stride=*/2, /*pad=*/1);
  // floor((32 + 2 - 3) / 2) + 1 = 16
  EXPECT_EQ(b.Shape(y), (Shape{2, 16, 16, 16}));
  const Op& op = ProducerOf(b, y);
  EXPECT_EQ(op.type, "Conv");
  EXPECT_EQ(op.name, "conv1");
  EXPECT_THAT(op.GetInts("kernel_shape"), ElementsAre(3, 3));
  EXPECT_THAT(op.GetInts("strides"), ElementsAre(2, 2));
  EXPECT_THAT(op.GetInts("pads"), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(op.GetInts("dilations"), ElementsAre(1, 1));
  EXPECT_EQ(op.GetInt("group", 0), 1);
  ASSERT_EQ(op.inputs.size(), 3u);
  EXPECT_EQ(Named(b, "conv1.weight").shape, (Shape{16, 3, 3, 3}));
  EXPECT_EQ(Named(b, "conv1.bias").shape, (Shape{16}));
  EXPECT_EQ(b.graph().NumParameters(), 16 * 27 + 16);
}

TEST(GraphBuilderTest, ConvAsymmetricPadsDilationGroups) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {1, 8, 10, 12});
  ConvSpec spec;
  spec.out_channels = 8;
  spec.kernel_shape = {3, 5};
  spec.strides = {2, 1};
  spec.pads = {1, 0, 0, 2};  // h_begin, w_begin, h_end, w_end
  spec.dilations = {1, 2};
  spec.group = 4;
  spec.bias = false;
  TensorId y = b.Conv(x, spec);
  // H: floor((10 + 1 + 0 - 1*2 - 1) / 2) + 1 = 5; W: (12 + 0 + 2 - 2*4 - 1) / 1 + 1 = 6.
  EXPECT_EQ(b.Shape(y), (Shape{1, 8, 5, 6}));
  EXPECT_EQ(Named(b, "conv1.weight").shape, (Shape{8, 2, 3, 5}));
  EXPECT_EQ(ProducerOf(b, y).inputs.size(), 2u);  // no bias
  EXPECT_EQ(ProducerOf(b, y).GetInt("group", 0), 4);
  EXPECT_THAT(ProducerOf(b, y).GetInts("pads"), ElementsAre(1, 0, 0, 2));
}

TEST(GraphBuilderTest, DepthwiseConv) {
  GraphBuilder b("t");
  TensorId y = b.Conv(b.Input("x", {1, 32, 7, 7}), 32, 3, 1, 1, /*group=*/32, /*bias=*/false);
  EXPECT_EQ(b.Shape(y), (Shape{1, 32, 7, 7}));
  EXPECT_EQ(b.graph().NumParameters(), 32 * 9);
}

TEST(GraphBuilderTest, ConvBadGroupIsStickyError) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {1, 8, 7, 7});
  TensorId y = b.Conv(x, 16, 3, 1, 1, /*group=*/3);
  EXPECT_EQ(y, kNoId);
  EXPECT_EQ(b.Relu(y), kNoId);  // later calls are no-ops
  EXPECT_TRUE(b.Shape(y).empty());
  absl::StatusOr<Graph> g = std::move(b).Build();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("conv1"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("group 3"));
}

TEST(GraphBuilderTest, ConvWindowLargerThanInput) {
  GraphBuilder b("t");
  b.Conv(b.Input("x", {1, 3, 2, 2}), 4, 5);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("larger than padded input"));
}

TEST(GraphBuilderTest, PoolingShapes) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {4, 64, 112, 112});
  TensorId m = b.MaxPool(x, 3, 2, 1);  // (112 + 2 - 3) / 2 + 1 = 56
  EXPECT_EQ(b.Shape(m), (Shape{4, 64, 56, 56}));
  TensorId a = b.AveragePool(m, 5, 3);  // (56 - 5) / 3 + 1 = 18
  EXPECT_EQ(b.Shape(a), (Shape{4, 64, 18, 18}));
  EXPECT_EQ(b.Shape(b.GlobalAveragePool(a)), (Shape{4, 64, 1, 1}));
  EXPECT_EQ(ProducerOf(b, a).GetInt("count_include_pad", 0), 1);
}

TEST(GraphBuilderTest, MatMulBroadcasting) {
  GraphBuilder b("t");
  TensorId a = b.Input("a", {2, 1, 4, 3});
  TensorId w = b.Input("w", {5, 3, 6});
  EXPECT_EQ(b.Shape(b.MatMul(a, w)), (Shape{2, 5, 4, 6}));
  TensorId v = b.Input("v", {3});
  EXPECT_EQ(b.Shape(b.MatMul(v, b.Input("m", {3, 6}))), (Shape{6}));
  EXPECT_EQ(b.Shape(b.MatMul(b.Input("m2", {7, 4, 3}), v)), (Shape{7, 4}));
  EXPECT_EQ(b.Shape(b.MatMul(v, v)), (Shape{}));
  EXPECT_TRUE(b.status().ok());
  b.MatMul(a, b.Input("bad", {4, 6}));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("inner dims differ"));
}

TEST(GraphBuilderTest, MatMulBatchMismatch) {
  absl::StatusOr<Shape> s = MatMulShape({3, 4, 5}, {2, 5, 6}, "mm");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("do not broadcast"));
  EXPECT_EQ(*BroadcastShapes({8, 1, 6, 1}, {7, 1, 5}, "add"), (Shape{8, 7, 6, 5}));
}

TEST(GraphBuilderTest, GemmAndLinear) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {8, 32});
  TensorId y = b.Linear(x, 10);
  EXPECT_EQ(b.Shape(y), (Shape{8, 10}));
  const Op& gemm = ProducerOf(b, y);
  EXPECT_EQ(gemm.type, "Gemm");
  EXPECT_EQ(gemm.GetInt("transB", 0), 1);
  EXPECT_EQ(Named(b, "linear1.weight").shape, (Shape{10, 32}));  // PyTorch [out, in]

  TensorId s = b.Input("s", {8, 5, 32});
  TensorId z = b.Linear(s, 10);
  EXPECT_EQ(b.Shape(z), (Shape{8, 5, 10}));
  EXPECT_EQ(ProducerOf(b, z).type, "Add");
  EXPECT_EQ(Named(b, "linear2.weight").shape, (Shape{32, 10}));  // MatMul [in, out]
  EXPECT_EQ(Named(b, "linear2.matmul").shape, (Shape{8, 5, 10}));

  TensorId t = b.Gemm(b.Input("at", {32, 8}), b.Input("bt", {10, 32}), b.Input("c", {10}),
                      /*trans_a=*/true, /*trans_b=*/true);
  EXPECT_EQ(b.Shape(t), (Shape{8, 10}));
  EXPECT_EQ(b.graph().NumParameters(), 2 * (32 * 10 + 10));
}

TEST(GraphBuilderTest, LstmOnnxLayout) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {35, 20, 100});
  TensorId y = b.LSTM(x, 50);
  EXPECT_EQ(b.Shape(y), (Shape{35, 1, 20, 50}));
  const Op& op = ProducerOf(b, y);
  EXPECT_EQ(op.type, "LSTM");
  EXPECT_EQ(op.GetInt("hidden_size", 0), 50);
  EXPECT_EQ(op.GetString("direction", ""), "forward");
  EXPECT_EQ(Named(b, "lstm1.W").shape, (Shape{1, 200, 100}));
  EXPECT_EQ(Named(b, "lstm1.R").shape, (Shape{1, 200, 50}));
  EXPECT_EQ(Named(b, "lstm1.B").shape, (Shape{1, 400}));
  // 4H*in + 4H*H + 8H = 20000 + 10000 + 400.
  EXPECT_EQ(b.graph().NumParameters(), 30400);
  b.LSTM(b.Input("bad", {35, 100}), 50);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("[seq, batch, input]"));
}

TEST(GraphBuilderTest, BatchNormRolesAndLayerNorm) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {4, 16, 8, 8});
  TensorId y = b.BatchNorm(x);
  EXPECT_EQ(b.Shape(y), (Shape{4, 16, 8, 8}));
  EXPECT_EQ(Named(b, "bn1.weight").role, TensorRole::kParameter);
  EXPECT_EQ(Named(b, "bn1.bias").role, TensorRole::kParameter);
  EXPECT_EQ(Named(b, "bn1.running_mean").role, TensorRole::kConstant);
  EXPECT_EQ(Named(b, "bn1.running_var").role, TensorRole::kConstant);
  EXPECT_EQ(ProducerOf(b, y).inputs.size(), 5u);  // ONNX: X, scale, B, mean, var
  TensorId l = b.LayerNorm(b.Input("s", {2, 7, 24}));
  EXPECT_EQ(ProducerOf(b, l).GetInt("axis", 0), 2);
  EXPECT_EQ(b.graph().NumParameters(), 2 * 16 + 2 * 24);
}

TEST(GraphBuilderTest, DataMovementShapes) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {2, 3, 4, 5});
  EXPECT_EQ(b.Shape(b.Flatten(x)), (Shape{2, 60}));
  EXPECT_EQ(b.Shape(b.Flatten(x, 3)), (Shape{24, 5}));
  TensorId r = b.Reshape(x, {0, -1, 10});
  EXPECT_EQ(b.Shape(r), (Shape{2, 6, 10}));
  EXPECT_THAT(ProducerOf(b, r).GetInts("shape"), ElementsAre(2, 6, 10));
  EXPECT_EQ(b.Shape(b.Transpose(x, {0, 2, 3, 1})), (Shape{2, 4, 5, 3}));
  EXPECT_EQ(b.Shape(b.Concat({x, b.Input("y", {2, 7, 4, 5})}, -3)), (Shape{2, 10, 4, 5}));
  EXPECT_EQ(b.Shape(b.Expand(b.Input("e", {3, 1, 5}), {2, 3, 4, 5})), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(b.Shape(b.ReduceSum(x, {1, -1}, false)), (Shape{2, 4}));
  EXPECT_EQ(b.Shape(b.ReduceMean(x, {2}, true)), (Shape{2, 3, 1, 5}));
  TensorId sm = b.Softmax(x, -1);
  EXPECT_EQ(ProducerOf(b, sm).GetInt("axis", 0), 3);
  EXPECT_TRUE(b.status().ok());
  b.Reshape(x, {7, -1});
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("cannot infer -1"));
}

TEST(GraphBuilderTest, GatherAndEmbedding) {
  GraphBuilder b("t");
  TensorId ids = b.Input("ids", {8, 128}, DType::kI64);
  TensorId table = kNoId;
  TensorId e = b.Embedding(ids, 1000, 64, &table);
  EXPECT_EQ(b.Shape(e), (Shape{8, 128, 64}));
  EXPECT_EQ(b.graph().tensor(table).shape, (Shape{1000, 64}));
  EXPECT_EQ(b.graph().tensor(e).dtype, DType::kF32);
  // Tied reuse of the same table, and a gather along axis 1 by a scalar index.
  EXPECT_EQ(b.Shape(b.Gather(table, b.Input("ids2", {4}, DType::kI64))), (Shape{4, 64}));
  EXPECT_EQ(b.Shape(b.Gather(e, b.Constant("first", {}, DType::kI64), 1)), (Shape{8, 64}));
  EXPECT_EQ(b.graph().NumParameters(), 64000);
  b.Gather(table, b.Input("f", {4}));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("i64 or i32"));
}

TEST(GraphBuilderTest, ScopedUniqueNames) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {1, 4, 8, 8});
  {
    auto s = b.NameScope("layer1");
    auto t = b.NameScope("0");
    x = b.Conv(x, 4, 3, 1, 1);
    x = b.Conv(x, 4, 3, 1, 1);
  }
  x = b.Conv(x, 4, 3, 1, 1);
  EXPECT_TRUE(b.graph().FindTensor("layer1.0.conv1.weight").ok());
  EXPECT_TRUE(b.graph().FindTensor("layer1.0.conv2.bias").ok());
  EXPECT_EQ(b.graph().op(b.graph().tensor(x).producer).name, "conv1");
  b.Input("x", {1});
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("'x' is used twice"));
}

TEST(GraphBuilderTest, BinaryOpsCheckDtypeAndBroadcast) {
  GraphBuilder b("t");
  TensorId a = b.Input("a", {4, 1, 3});
  EXPECT_EQ(b.Shape(b.Mul(a, b.Input("b", {5, 1}))), (Shape{4, 5, 3}));
  EXPECT_EQ(b.Shape(b.Scale(a, 0.5)), (Shape{4, 1, 3}));
  b.Add(a, b.Input("i", {3}, DType::kI64));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("different dtypes"));
}

TEST(GraphBuilderTest, BuildAnnotatesCostsAndValidates) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {4, 3});
  TensorId y = b.MatMul(x, b.Param("w", {3, 6}));
  b.MarkOutput(b.Relu(y));
  absl::StatusOr<Graph> g = std::move(b).Build();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_ops(), 2);
  EXPECT_EQ(g->outputs().size(), 1u);
  EXPECT_DOUBLE_EQ(g->op(0).flops, 2.0 * 4 * 6 * 3);
  EXPECT_EQ(g->op(0).bytes_written, 4 * 6 * 4);
}

TEST(GraphBuilderTest, CustomOpWithGivenShapes) {
  GraphBuilder b("t");
  TensorId x = b.Input("x", {6, 4});
  std::vector<TensorId> outs =
      b.Custom("split", "Split", {x}, {{3, 4}, {3, 4}}, {{"axis", int64_t{0}}});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(b.graph().tensor(outs[1]).name, "split1.out1");
  EXPECT_EQ(b.Shape(outs[0]), (Shape{3, 4}));
  EXPECT_EQ(ProducerOf(b, outs[0]).outputs.size(), 2u);
  b.MarkOutput(b.Add(outs[0], outs[1]));
  EXPECT_TRUE(std::move(b).Build().ok());
}

TEST(GraphBuilderTest, BuildNeedsAnOutput) {
  GraphBuilder b("empty");
  b.Relu(b.Input("x", {3}));
  absl::StatusOr<Graph> g = std::move(b).Build();
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("no outputs"));
}

}  // namespace
}  // namespace braid::graph
