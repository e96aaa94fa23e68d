#include "graph/parallel_shape.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ParallelTensorShape Example() {
  return {.dims = {{64, 2}, {1024, 4}}, .replica_degree = 2, .dtype = DType::kF32};
}

TEST(ParallelShapeTest, PieceTotalDegreeAndBytes) {
  ParallelTensorShape s = Example();
  EXPECT_TRUE(ValidateParallelShape(s).ok());
  EXPECT_EQ(*TotalDegree(s), 16);
  EXPECT_THAT(*PieceShape(s), ElementsAre(32, 256));
  EXPECT_THAT(LogicalShape(s), ElementsAre(64, 1024));
  EXPECT_EQ(*PieceBytes(s), 32 * 256 * 4);
  EXPECT_EQ(*LogicalBytes(s), 64 * 1024 * 4);
  s.dtype = DType::kBF16;
  EXPECT_EQ(*PieceBytes(s), 32 * 256 * 2);
}

TEST(ParallelShapeTest, UnpartitionedShapeHasDegreeOne) {
  ParallelTensorShape s = UnpartitionedShape({8, 3}, DType::kF16);
  EXPECT_EQ(ParallelShapeString(s), "f16[8,3]");
  EXPECT_EQ(*TotalDegree(s), 1);
  EXPECT_EQ(*PieceBytes(s), 48);
}

TEST(ParallelShapeTest, ScalarHasOnePieceOfOneElement) {
  ParallelTensorShape s = {.dims = {}, .replica_degree = 3, .dtype = DType::kF64};
  EXPECT_EQ(ParallelShapeString(s), "f64[]x3");
  EXPECT_EQ(*TotalDegree(s), 3);
  EXPECT_EQ(*PieceBytes(s), 8);
  EXPECT_EQ(*ParseParallelShape("f64[]x3"), s);
}

TEST(ParallelShapeTest, InvalidShapesNameTheRule) {
  ParallelTensorShape s = Example();
  s.dims[1].degree = 3;
  absl::Status st = ValidateParallelShape(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("dim 1 degree 3 does not divide size 1024"));
  EXPECT_EQ(PieceShape(s).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TotalDegree(s).status().code(), absl::StatusCode::kInvalidArgument);

  s = Example();
  s.dims[0].degree = 0;
  EXPECT_THAT(ValidateParallelShape(s).message(), HasSubstr("dim 0 degree 0 must be >= 1"));
  s = Example();
  s.replica_degree = 0;
  EXPECT_THAT(ValidateParallelShape(s).message(), HasSubstr("replica degree 0 must be >= 1"));
  s = Example();
  s.dims[0].size = -4;
  EXPECT_THAT(ValidateParallelShape(s).message(), HasSubstr("dim 0 size -4 is negative"));
  // 2^16 * 2^16 tasks do not fit in an int.
  s = {.dims = {{1 << 16, 1 << 16}, {1 << 16, 1 << 16}}, .replica_degree = 1};
  EXPECT_THAT(ValidateParallelShape(s).message(), HasSubstr("total degree exceeds"));
}

TEST(ParallelShapeTest, PieceBytesOverflowIsAnError) {
  ParallelTensorShape s = UnpartitionedShape({int64_t{1} << 40, int64_t{1} << 30}, DType::kF32);
  absl::StatusOr<int64_t> b = PieceBytes(s);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("overflows"));
}

TEST(ParallelShapeTest, TextFormRoundTrips) {
  EXPECT_EQ(ParallelShapeString(Example()), "f32[64/2,1024/4]x2");
  for (const char* text : {"f32[64/2,1024/4]x2", "bf16[8,16/16]", "i64[]", "f16[0/4]x8",
                           "u8[7,1,5/5]"}) {
    absl::StatusOr<ParallelTensorShape> s = ParseParallelShape(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_EQ(ParallelShapeString(*s), text);
    EXPECT_EQ(*ParseParallelShape(ParallelShapeString(*s)), *s);
  }
  EXPECT_EQ(*ParseParallelShape("f32[64/2,1024/4]x2"), Example());
  // Explicit degree 1 and replica 1 are accepted and printed without.
  EXPECT_EQ(ParallelShapeString(*ParseParallelShape("f32[4/1,2]x1")), "f32[4,2]");
}

TEST(ParallelShapeTest, ParseErrors) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"f32", "expected <dtype>[<dims>]"},
           {"q7[4]", "dtype"},
           {"f32[4/0]", "degree 0 is not in [1, 2^31)"},
           {"f32[4/3]", "degree 3 does not divide size 4"},
           {"f32[a]", "bad size 'a'"},
           {"f32[4,]", "bad size ''"},
           {"f32[4]y2", "unexpected 'y2'"},
           {"f32[4]x", "bad replica degree ''"},
           {"f32[4]x0", "replica degree 0 is not in"},
       }) {
    absl::StatusOr<ParallelTensorShape> s = ParseParallelShape(c.text);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.status().message(), HasSubstr(c.message)) << c.text;
  }
}

}  // namespace
}  // namespace braid::graph
