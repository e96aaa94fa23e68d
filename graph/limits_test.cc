// Tests of the model bounds checked at import: dims, attributes, and text
// graphs (UTF-8 validation and escaping: base/text_test.cc).
#include "graph/limits.h"

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;

TEST(LimitsTest, DimsWithinBoundsWithOverflowChecks) {
  EXPECT_TRUE(CheckDims({32, 1024}, "x").ok());
  EXPECT_TRUE(CheckDims({0, kMaxDim}, "x").ok());
  EXPECT_THAT(std::string(CheckDims({1, -3}, "tensor 'x'").message()),
              HasSubstr("tensor 'x' has a negative dimension: [1,-3]"));
  EXPECT_THAT(std::string(CheckDims({int64_t{1} << 62}, "x").message()), HasSubstr("outside [0, 2^32]"));
  // 2^21 cubed = 2^63 wraps an int64 product to a negative count.
  const int64_t d = int64_t{1} << 21;
  EXPECT_THAT(std::string(CheckDims({d, d, d}, "x").message()), HasSubstr("more than 2^40"));
  EXPECT_EQ(CheckDims({1000000000, 1000000000, 1000000000}, "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LimitsTest, WindowAttributesMustBePositive) {
  Attrs conv{{"strides", std::vector<int64_t>{0, 0}}};
  absl::Status s = CheckOpAttrs("Conv", conv, nullptr, "node 'c1' (Conv)");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'c1' (Conv): attribute 'strides' must be in [1,"));
  for (const char* type : {"MaxPool", "AveragePool", "ConvGradData", "ConvTranspose"}) {
    EXPECT_FALSE(CheckOpAttrs(type, {{"dilations", std::vector<int64_t>{1, -1}}}, nullptr, "n").ok())
        << type;
    EXPECT_FALSE(CheckOpAttrs(type, {{"kernel_shape", std::vector<int64_t>{0, 3}}}, nullptr, "n").ok());
    EXPECT_FALSE(CheckOpAttrs(type, {{"pads", std::vector<int64_t>{0, 0, int64_t{1} << 62, 0}}},
                              nullptr, "n")
                     .ok());
  }
  EXPECT_FALSE(CheckOpAttrs("Conv", {{"group", int64_t{0}}}, nullptr, "n").ok());
  EXPECT_FALSE(CheckOpAttrs("DepthToSpace", {{"blocksize", int64_t{0}}}, nullptr, "n").ok());
  // Negative pads are legal for Pad (cropping) and strides are not Slice's attribute.
  EXPECT_TRUE(CheckOpAttrs("Pad", {{"pads", std::vector<int64_t>{-1, -1}}}, nullptr, "n").ok());
  EXPECT_TRUE(CheckOpAttrs("Conv", {{"strides", std::vector<int64_t>{2, 2}},
                                    {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                    {"group", int64_t{32}}},
                           nullptr, "n")
                  .ok());
}

TEST(LimitsTest, AxesPermsAndSplitsAgainstShapes) {
  const std::vector<std::vector<int64_t>> rank4 = {{2, 3, 4, 5}};
  EXPECT_TRUE(CheckOpAttrs("Concat", {{"axis", int64_t{-4}}}, &rank4, "n").ok());
  EXPECT_THAT(std::string(CheckOpAttrs("Concat", {{"axis", int64_t{99}}}, &rank4, "node 'cat'").message()),
              HasSubstr("node 'cat': attribute 'axis' is 99, outside [-4, 3]"));
  EXPECT_TRUE(CheckOpAttrs("Flatten", {{"axis", int64_t{4}}}, &rank4, "n").ok());
  EXPECT_FALSE(CheckOpAttrs("Softmax", {{"axis", int64_t{4}}}, &rank4, "n").ok());
  EXPECT_FALSE(CheckOpAttrs("ReduceMean", {{"axes", std::vector<int64_t>{1, 7}}}, &rank4, "n").ok());
  EXPECT_THAT(std::string(CheckOpAttrs("Transpose", {{"perm", std::vector<int64_t>{5, -7}}},
                                       nullptr, "n").message()),
              HasSubstr("attribute 'perm'"));
  EXPECT_FALSE(CheckOpAttrs("Transpose", {{"perm", std::vector<int64_t>{0, 1, 1, 3}}}, &rank4, "n").ok());
  EXPECT_TRUE(CheckOpAttrs("Transpose", {{"perm", std::vector<int64_t>{3, 2, 1, 0}}}, &rank4, "n").ok());
  const std::vector<std::vector<int64_t>> split_in = {{16, 8}};
  EXPECT_FALSE(CheckOpAttrs("Split", {{"split", std::vector<int64_t>{100, -84}}}, &split_in, "n").ok());
  EXPECT_THAT(std::string(CheckOpAttrs("Split", {{"split", std::vector<int64_t>{4, 4}}}, &split_in,
                                       "n").message()),
              HasSubstr("sums to 8, but the input's dim 0 is 16"));
  EXPECT_TRUE(CheckOpAttrs("Split", {{"split", std::vector<int64_t>{10, 6}}}, &split_in, "n").ok());
}

TEST(LimitsTest, TextGraphsAreCheckedToo) {
  // The text format reaches Graph::Validate, which applies the same bounds.
  absl::StatusOr<Graph> g = ParseText(R"(graph "t"
tensor x f32[1,3,8,8] input
tensor w f32[4,3,3,3] parameter
tensor y f32[1,4,8,8] activation
op c Conv (x, w) -> (y) {strides=[0,0]}
output y
)");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("attribute 'strides'"));
  absl::StatusOr<Graph> big = ParseText(R"(graph "t"
tensor x f32[4611686018427387904,2] input
tensor y f32[4611686018427387904,2] activation
op r Relu (x) -> (y)
output y
)");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("tensor 'x'"));
}

}  // namespace
}  // namespace braid::graph
