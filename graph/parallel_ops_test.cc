#include "graph/parallel_ops.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;

ParallelTensorShape P(std::string_view text) {
  absl::StatusOr<ParallelTensorShape> s = ParseParallelShape(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::string Apply(const ParallelOp& op, std::string_view shape) {
  absl::StatusOr<ParallelTensorShape> out = ApplyParallelOp(op, P(shape));
  if (!out.ok()) return std::string(out.status().message());
  return ParallelShapeString(*out);
}

TEST(ParallelOpsTest, ShapeRules) {
  EXPECT_EQ(Apply(ParallelOp::Partition(0, 4), "f32[64,1024]"), "f32[64/4,1024]");
  EXPECT_EQ(Apply(ParallelOp::Partition(1, 2), "f32[64,1024/4]x2"), "f32[64,1024/8]x2");
  EXPECT_EQ(Apply(ParallelOp::Combine(1, 2), "f32[64,1024/8]x2"), "f32[64,1024/4]x2");
  EXPECT_EQ(Apply(ParallelOp::Combine(1, 4), "f32[64,1024/4]"), "f32[64,1024]");
  EXPECT_EQ(Apply(ParallelOp::Replicate(3), "f32[64/2]x2"), "f32[64/2]x6");
  EXPECT_EQ(Apply(ParallelOp::Reduce(2), "f32[64/2]x6"), "f32[64/2]x3");
  EXPECT_EQ(Apply(ParallelOp::Reduce(6), "f32[64/2]x6"), "f32[64/2]");
  // Pipeline splits the size into micro-batches; the degree stays.
  EXPECT_EQ(Apply(ParallelOp::Pipeline(0, 4), "f16[64/2,8]"), "f16[16/2,8]");
  EXPECT_EQ(Apply(ParallelOp::Batch(0, 4), "f16[16/2,8]"), "f16[64/2,8]");
}

TEST(ParallelOpsTest, ViolationsNameTheOpAndTheRule) {
  EXPECT_EQ(Apply(ParallelOp::Partition(0, 3), "f32[64,1024]"),
            "Partition(0,3) on f32[64,1024]: new degree 3 does not divide size 64");
  EXPECT_EQ(Apply(ParallelOp::Partition(0, 64), "f32[64/2]"),
            "Partition(0,64) on f32[64/2]: new degree 128 does not divide size 64");
  EXPECT_EQ(Apply(ParallelOp::Combine(0, 4), "f32[64/2]"),
            "Combine(0,4) on f32[64/2]: 4 does not divide degree 2");
  EXPECT_EQ(Apply(ParallelOp::Reduce(4), "f32[64]x6"),
            "Reduce(4) on f32[64]x6: 4 does not divide replica degree 6");
  EXPECT_EQ(Apply(ParallelOp::Pipeline(0, 8), "f32[64/16]"),
            "Pipeline(0,8) on f32[64/16]: 8 micro-batches of 16 pieces do not divide size 64");
  EXPECT_EQ(Apply(ParallelOp::Partition(2, 2), "f32[64,8]"),
            "Partition(2,2) on f32[64,8]: dim 2 is not in [0, 2)");
  EXPECT_EQ(Apply(ParallelOp::Combine(-1, 2), "f32[64/2]"),
            "Combine(-1,2) on f32[64/2]: dim -1 is not in [0, 1)");
  EXPECT_EQ(Apply(ParallelOp::Replicate(1), "f32[64]"),
            "Replicate(1) on f32[64]: degree 1 must be >= 2");
  EXPECT_EQ(Apply(ParallelOp{ParallelOpKind::kReduce, 0, 2}, "f32[64]x2"),
            "Reduce(2) on f32[64]x2: takes no dim (it acts on the replica dimension)");
  ParallelTensorShape bad = P("f32[64]");
  bad.dims[0].degree = 5;
  absl::StatusOr<ParallelTensorShape> r = ApplyParallelOp(ParallelOp::Replicate(2), bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("invalid input"));
  // Replicating past 2^31-1 tasks.
  r = ApplyParallelOp(ParallelOp::Replicate(1 << 16), P("f32[64/64]x65536"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParallelOpsTest, BackwardPairsUndoTheShapeChange) {
  const std::vector<ParallelOp> ops = {
      ParallelOp::Partition(1, 2), ParallelOp::Combine(0, 2), ParallelOp::Replicate(4),
      ParallelOp::Reduce(2),       ParallelOp::Pipeline(0, 2), ParallelOp::Batch(1, 2)};
  const std::vector<ParallelOpKind> backward = {
      ParallelOpKind::kCombine, ParallelOpKind::kPartition, ParallelOpKind::kReduce,
      ParallelOpKind::kReplicate, ParallelOpKind::kBatch, ParallelOpKind::kPipeline};
  const ParallelTensorShape x = P("f32[64/4,32]x2");
  for (size_t i = 0; i < ops.size(); ++i) {
    const ParallelOp b = BackwardOf(ops[i]);
    EXPECT_EQ(b.kind, backward[i]) << ParallelOpString(ops[i]);
    EXPECT_EQ(b.dim, ops[i].dim);
    EXPECT_EQ(b.degree, ops[i].degree);
    EXPECT_EQ(BackwardOf(b), ops[i]);
    absl::StatusOr<ParallelTensorShape> y = ApplyParallelOp(ops[i], x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(*ApplyParallelOp(b, *y), x) << ParallelOpString(ops[i]);
  }
}

TEST(ParallelOpsTest, SequencesAndTheirErrors) {
  // Megatron-style: replicate the input, partition the weight's columns.
  const std::vector<ParallelOp> ops = {ParallelOp::Partition(0, 2), ParallelOp::Replicate(4),
                                       ParallelOp::Pipeline(0, 4)};
  absl::StatusOr<ParallelTensorShape> y = ApplyParallelOps(ops, P("bf16[64,1024]"));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(ParallelShapeString(*y), "bf16[16/2,1024]x4");
  EXPECT_EQ(*TotalDegree(*y), 8);
  const std::vector<ParallelOp> bad = {ParallelOp::Replicate(2), ParallelOp::Reduce(4)};
  y = ApplyParallelOps(bad, P("f32[8]"));
  EXPECT_EQ(y.status().message(),
            "parallel op #1: Reduce(4) on f32[8]x2: 4 does not divide replica degree 2");
}

TEST(ParallelOpsTest, TextFormRoundTrips) {
  for (const ParallelOp& op :
       {ParallelOp::Partition(0, 4), ParallelOp::Combine(2, 8), ParallelOp::Replicate(2),
        ParallelOp::Reduce(16), ParallelOp::Pipeline(1, 3), ParallelOp::Batch(0, 2)}) {
    absl::StatusOr<ParallelOp> back = ParseParallelOp(ParallelOpString(op));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, op);
  }
  EXPECT_EQ(ParallelOpString(ParallelOp::Partition(0, 4)), "Partition(0,4)");
  EXPECT_EQ(ParallelOpString(ParallelOp::Reduce(16)), "Reduce(16)");
  EXPECT_EQ(*ParseParallelOp("Pipeline(1, 8)"), ParallelOp::Pipeline(1, 8));
  EXPECT_THAT(ParseParallelOp("Split(0,2)").status().message(), HasSubstr("unknown parallel op"));
  EXPECT_THAT(ParseParallelOp("Replicate(0,2)").status().message(),
              HasSubstr("Replicate takes 1 argument"));
  EXPECT_THAT(ParseParallelOp("Partition(2)").status().message(),
              HasSubstr("Partition takes 2 arguments"));
  EXPECT_THAT(ParseParallelOp("Partition(a,2)").status().message(), HasSubstr("bad integer 'a'"));
  EXPECT_THAT(ParseParallelOp("Partition").status().message(), HasSubstr("expected"));
}

}  // namespace
}  // namespace braid::graph
