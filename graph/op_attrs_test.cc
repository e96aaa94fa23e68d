#include "graph/op_attrs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;

Op MakeOp(Attrs attrs) {
  Op op;
  op.name = "o";
  op.type = "T";
  op.attrs = std::move(attrs);
  return op;
}

TEST(OpAttrsTest, IntsOrFallsBackOnMissingOrWrongLength) {
  Op op = MakeOp({{"strides", std::vector<int64_t>{2, 2}}});
  EXPECT_THAT(IntsOr(op, "strides", 2, 1), ElementsAre(2, 2));
  EXPECT_THAT(IntsOr(op, "strides", 3, 1), ElementsAre(1, 1, 1));
  EXPECT_THAT(IntsOr(op, "dilations", 2, 1), ElementsAre(1, 1));
}

TEST(OpAttrsTest, ResolvePadsExplicitSameAndValid) {
  Op explicit_pads = MakeOp({{"pads", std::vector<int64_t>{1, 0, 1, 2}}});
  EXPECT_THAT(ResolvePads(explicit_pads, {8, 8}, {8, 8}, {3, 3}, {1, 1}, {1, 1}),
              ElementsAre(1, 0, 1, 2));
  // SAME_UPPER, 7 -> 4 with kernel 3, stride 2: total pad 2, split 1/1;
  // 8 -> 4: total 1, the extra pad at the end (upper) or the beginning (lower).
  Op upper = MakeOp({{"auto_pad", std::string("SAME_UPPER")}});
  EXPECT_THAT(ResolvePads(upper, {7}, {4}, {3}, {2}, {1}), ElementsAre(1, 1));
  EXPECT_THAT(ResolvePads(upper, {8}, {4}, {3}, {2}, {1}), ElementsAre(0, 1));
  Op lower = MakeOp({{"auto_pad", std::string("SAME_LOWER")}});
  EXPECT_THAT(ResolvePads(lower, {8}, {4}, {3}, {2}, {1}), ElementsAre(1, 0));
  Op valid = MakeOp({{"auto_pad", std::string("VALID")}});
  EXPECT_THAT(ResolvePads(valid, {8}, {3}, {3}, {2}, {1}), ElementsAre(0, 0));
}

TEST(OpAttrsTest, ReduceAxesFromAttributeOrShapes) {
  Op with_axes = MakeOp({{"axes", std::vector<int64_t>{-1}}});
  EXPECT_THAT(ReduceAxes(with_axes, {2, 3, 4}, {2, 3}), ElementsAre(2));
  Op none = MakeOp({});
  EXPECT_THAT(ReduceAxes(none, {2, 3, 4}, {2, 1, 4}), ElementsAre(1));  // keepdims
  EXPECT_THAT(ReduceAxes(none, {2, 3, 4}, {2, 4}), ElementsAre(1));     // dropped
  EXPECT_THAT(ReduceAxes(none, {2, 3, 4}, {}), ElementsAre(0, 1, 2));   // to a scalar
  EXPECT_THAT(ReduceAxes(none, {1, 1}, {1, 1}), ElementsAre(0, 1));     // one element
}

}  // namespace
}  // namespace braid::graph
