#include "graph/canonicalize.h"

#include "gmock/gmock.h"
#include "graph/builder.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

const Op* FindType(const Graph& g, std::string_view type, int nth = 0) {
  for (const Op& op : g.ops())
    if (op.type == type && nth-- == 0) return &op;
  return nullptr;
}

int Count(const Graph& g, std::string_view type) {
  int n = 0;
  for (const Op& op : g.ops()) n += op.type == type;
  return n;
}

// nn.MultiheadAttention as torch.onnx exports it: the packed projection
// sliced in three, batch and heads merged into one dim.
Graph SeqFirstAttention() {
  constexpr int64_t S = 6, B = 4, E = 16, H = 2, D = E / H;
  GraphBuilder b("mha");
  TensorId x = b.Input("x", {S, B, E});
  TensorId qkv = b.Linear(x, 3 * E);
  auto slice = [&](int64_t k) {
    return b.Custom("slice", "Slice", {qkv}, {{S, B, E}},
                    {{"starts", std::vector<int64_t>{k * E}},
                     {"ends", std::vector<int64_t>{(k + 1) * E}},
                     {"axes", std::vector<int64_t>{-1}}})[0];
  };
  TensorId q = b.Transpose(b.Reshape(slice(0), {S, B * H, D}), {1, 0, 2});
  TensorId k = b.Transpose(b.Reshape(slice(1), {S, B * H, D}), {1, 2, 0});
  TensorId v = b.Transpose(b.Reshape(slice(2), {S, B * H, D}), {1, 0, 2});
  TensorId a = b.Dropout(b.Softmax(b.MatMul(b.Scale(q, 0.5), k), -1), 0.25);
  TensorId o = b.Reshape(b.Transpose(b.MatMul(a, v), {1, 0, 2}), {S * B, E});
  b.MarkOutput(b.Linear(o, 16));
  return *std::move(b).Build();
}

TEST(CanonicalizeTest, AttentionKeepsBatchAndHeadsApart) {
  const Graph g = SeqFirstAttention();
  absl::StatusOr<Graph> c = CanonicalizeForSharding(g);
  ASSERT_TRUE(c.ok()) << c.status();
  // The three Slices became one Split into equal parts.
  EXPECT_EQ(Count(*c, "Slice"), 0);
  const Op* split = FindType(*c, "Split");
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->GetInt("axis", -1), 2);
  EXPECT_EQ(split->GetInts("split"), (std::vector<int64_t>{16, 16, 16}));
  // [S, B*H, D] is held as [S, B, H, D] up to the Reshape that merges back.
  const Op* r = FindType(*c, "Reshape");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(c->tensor(r->outputs[0]).shape, (std::vector<int64_t>{6, 4, 2, 8}));
  EXPECT_EQ(r->GetInts("shape"), (std::vector<int64_t>{6, 4, 2, 8}));
  const Op* softmax = FindType(*c, "Softmax");
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(c->tensor(softmax->outputs[0]).shape, (std::vector<int64_t>{4, 2, 6, 6}));
  EXPECT_EQ(softmax->GetInt("axis", 0), 3);
  const Op* kt = FindType(*c, "Transpose", 1);  // the keys: [1, 2, 0] -> [1, 2, 3, 0]
  ASSERT_NE(kt, nullptr);
  EXPECT_EQ(kt->GetInts("perm"), (std::vector<int64_t>{1, 2, 3, 0}));
  // No Reshape was added: every reader took the split dims.
  EXPECT_EQ(Count(*c, "Reshape"), Count(g, "Reshape"));
  EXPECT_EQ(c->num_ops(), g.num_ops() - 2);
  // Parameters and the output are untouched.
  EXPECT_EQ(c->NumParameters(), g.NumParameters());
  ASSERT_EQ(c->outputs().size(), 1u);
  EXPECT_EQ(c->tensor(c->outputs()[0]).shape, g.tensor(g.outputs()[0]).shape);
}

TEST(CanonicalizeTest, ReadersThatReduceTheMergedDimGetItMergedBack) {
  GraphBuilder b("reduce");
  TensorId x = b.Input("x", {6, 4, 16});
  TensorId y = b.Relu(b.Reshape(x, {6, 8, 8}));  // 4 x (2 of 8): a partial merge
  b.MarkOutput(b.ReduceSum(y, {1}, false));
  b.MarkOutput(y);
  const Graph g = *std::move(b).Build();
  absl::StatusOr<Graph> c = CanonicalizeForSharding(g);
  ASSERT_TRUE(c.ok()) << c.status();
  const Op* relu = FindType(*c, "Relu");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(c->tensor(relu->outputs[0]).shape, (std::vector<int64_t>{6, 4, 2, 8}));
  // The ReduceSum and the graph output read the merged [6, 8, 8].
  const Op* sum = FindType(*c, "ReduceSum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(c->tensor(sum->inputs[0]).shape, (std::vector<int64_t>{6, 8, 8}));
  ASSERT_EQ(c->outputs().size(), 2u);
  EXPECT_EQ(c->tensor(c->outputs()[1]).shape, (std::vector<int64_t>{6, 8, 8}));
  EXPECT_EQ(c->tensor(c->outputs()[1]).producer, c->tensor(sum->inputs[0]).producer);
}

TEST(CanonicalizeTest, WholeDimMergesAndUnequalSlicesAreLeftAlone) {
  GraphBuilder b("cnn");
  TensorId x = b.Input("x", {2, 3, 4, 4});
  TensorId f = b.Reshape(x, {2, 48});  // whole dims merged: nothing to keep apart
  TensorId s0 = b.Custom("s", "Slice", {f}, {{2, 16}},
                         {{"starts", std::vector<int64_t>{0}}, {"ends", std::vector<int64_t>{16}},
                          {"axes", std::vector<int64_t>{1}}})[0];
  TensorId s1 = b.Custom("s", "Slice", {f}, {{2, 32}},
                         {{"starts", std::vector<int64_t>{16}}, {"ends", std::vector<int64_t>{48}},
                          {"axes", std::vector<int64_t>{1}}})[0];
  b.MarkOutput(s0);
  b.MarkOutput(s1);
  const Graph g = *std::move(b).Build();
  absl::StatusOr<Graph> c = CanonicalizeForSharding(g);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Count(*c, "Slice"), 2);
  EXPECT_EQ(Count(*c, "Split"), 0);
  EXPECT_EQ(c->tensor(f).shape, (std::vector<int64_t>{2, 48}));
  EXPECT_EQ(c->num_ops(), g.num_ops());
}

}  // namespace
}  // namespace braid::graph
