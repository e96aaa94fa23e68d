#include "graph/onnx_fold.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ConstValue Fold(std::string_view type, const std::vector<const ConstValue*>& in,
                const Attrs& attrs = {}, int opset = 13) {
  absl::StatusOr<std::optional<ConstValue>> r =
      FoldOp(type, attrs, opset, in, kDefaultMaxFoldElements);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r.ok() && r->has_value()) << type << " was not folded";
  return r.ok() && r->has_value() ? **r : ConstValue();
}

TEST(OnnxFoldTest, ShapeArithmeticChain) {
  // Shape [2,3,4,5] -> Gather(1) -> Unsqueeze(0) -> Concat with [-1] -> [3,-1].
  const ConstValue shape = ConstValue::Ints({4}, {2, 3, 4, 5});
  const ConstValue one = ConstValue::Ints({}, {1});
  ConstValue d = Fold("Gather", {&shape, &one});
  EXPECT_TRUE(d.dims.empty());
  EXPECT_THAT(d.ints, ElementsAre(3));
  const ConstValue axes = ConstValue::Ints({1}, {0});
  ConstValue u = Fold("Unsqueeze", {&d, &axes});
  EXPECT_THAT(u.dims, ElementsAre(1));
  const ConstValue minus = ConstValue::Ints({1}, {-1});
  ConstValue c = Fold("Concat", {&u, &minus}, {{"axis", int64_t{0}}});
  EXPECT_THAT(c.dims, ElementsAre(2));
  EXPECT_THAT(c.ints, ElementsAre(3, -1));
  // Opset 11 Unsqueeze takes axes as an attribute.
  ConstValue u11 = Fold("Unsqueeze", {&d}, {{"axes", std::vector<int64_t>{0}}}, 11);
  EXPECT_THAT(u11.dims, ElementsAre(1));
}

TEST(OnnxFoldTest, IntegerArithmeticTruncatesLikeOnnx) {
  const ConstValue a = ConstValue::Ints({3}, {7, -7, 192});
  const ConstValue b = ConstValue::Ints({}, {3});
  EXPECT_THAT(Fold("Div", {&a, &b}).ints, ElementsAre(2, -2, 64));
  EXPECT_THAT(Fold("Mul", {&a, &b}).ints, ElementsAre(21, -21, 576));
  EXPECT_THAT(Fold("Mod", {&a, &b}).ints, ElementsAre(1, 2, 0));  // sign of the divisor
  const ConstValue eq = Fold("Equal", {&a, &b});
  EXPECT_EQ(eq.elem_type, kOnnxBool);
  EXPECT_THAT(eq.ints, ElementsAre(0, 0, 0));
  const ConstValue zero = ConstValue::Ints({}, {0});
  absl::StatusOr<std::optional<ConstValue>> r =
      FoldOp("Div", {}, 13, {&a, &zero}, kDefaultMaxFoldElements);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());  // integer division by zero is left to run time
}

TEST(OnnxFoldTest, BroadcastWhereAndCast) {
  // ViT's expand-shape computation: Where(Equal([1,-1,-1], -1*ones), ones, [1,-1,-1]).
  const ConstValue shape = ConstValue::Ints({3}, {1, -1, -1});
  const ConstValue ones = ConstValue::Ints({3}, {1, 1, 1});
  const ConstValue minus = ConstValue::Ints({}, {-1});
  const ConstValue neg = Fold("Mul", {&ones, &minus});
  const ConstValue cond = Fold("Equal", {&shape, &neg});
  EXPECT_THAT(cond.ints, ElementsAre(0, 1, 1));
  EXPECT_THAT(Fold("Where", {&cond, &ones, &shape}).ints, ElementsAre(1, 1, 1));
  // Row-vector + column-vector broadcast.
  const ConstValue row = ConstValue::Floats({1, 3}, {0.5, 1.5, 2.5});
  const ConstValue col = ConstValue::Floats({2, 1}, {10, 20});
  const ConstValue sum = Fold("Add", {&row, &col});
  EXPECT_THAT(sum.dims, ElementsAre(2, 3));
  EXPECT_THAT(sum.floats, ElementsAre(10.5, 11.5, 12.5, 20.5, 21.5, 22.5));
  const ConstValue as_int = Fold("Cast", {&sum}, {{"to", int64_t{kOnnxInt64}}});
  EXPECT_THAT(as_int.ints, ElementsAre(10, 11, 12, 20, 21, 22));
  const ConstValue d = ConstValue::Ints({}, {64});
  const ConstValue f = Fold("Cast", {&d}, {{"to", int64_t{kOnnxFloat}}});
  EXPECT_DOUBLE_EQ(Fold("Sqrt", {&f}).floats[0], 8.0);
}

TEST(OnnxFoldTest, SliceReshapeTransposeExpand) {
  const ConstValue v = ConstValue::Ints({6}, {10, 11, 12, 13, 14, 15});
  const ConstValue starts = ConstValue::Ints({1}, {-1});
  const ConstValue ends = ConstValue::Ints({1}, {INT64_MIN});
  const ConstValue axes = ConstValue::Ints({1}, {0});
  const ConstValue steps = ConstValue::Ints({1}, {-2});
  EXPECT_THAT(Fold("Slice", {&v, &starts, &ends, &axes, &steps}).ints, ElementsAre(15, 13, 11));
  const ConstValue s1 = ConstValue::Ints({1}, {1});
  const ConstValue big = ConstValue::Ints({1}, {INT64_MAX});
  EXPECT_THAT(Fold("Slice", {&v, &s1, &big}).ints, ElementsAre(11, 12, 13, 14, 15));

  const ConstValue shape = ConstValue::Ints({2}, {0, -1});
  const ConstValue m = ConstValue::Ints({2, 3}, {1, 2, 3, 4, 5, 6});
  const ConstValue r = Fold("Reshape", {&m, &shape});
  EXPECT_THAT(r.dims, ElementsAre(2, 3));  // 0 copies dim 0, -1 infers 3
  const ConstValue t = Fold("Transpose", {&m}, {{"perm", std::vector<int64_t>{1, 0}}});
  EXPECT_THAT(t.dims, ElementsAre(3, 2));
  EXPECT_THAT(t.ints, ElementsAre(1, 4, 2, 5, 3, 6));
  const ConstValue to = ConstValue::Ints({3}, {2, 2, 3});
  const ConstValue e = Fold("Expand", {&m, &to});
  EXPECT_THAT(e.dims, ElementsAre(2, 2, 3));
  EXPECT_EQ(e.ints[6], 1);
  const ConstValue bad = ConstValue::Ints({2}, {4, 4});
  absl::StatusOr<std::optional<ConstValue>> err =
      FoldOp("Reshape", {}, 13, {&m, &bad}, kDefaultMaxFoldElements);
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(std::string(err.status().message()), HasSubstr("Reshape"));
}

TEST(OnnxFoldTest, TriluRangeAndLimits) {
  absl::StatusOr<std::optional<ConstValue>> ones =
      FillConst({3, 3}, ConstValue::Floats({}, {1.0}), kDefaultMaxFoldElements);
  ASSERT_TRUE(ones.ok() && ones->has_value());
  const ConstValue lower = Fold("Trilu", {&**ones}, {{"upper", int64_t{0}}});
  EXPECT_THAT(lower.floats, ElementsAre(1, 0, 0, 1, 1, 0, 1, 1, 1));
  const ConstValue start = ConstValue::Ints({}, {0});
  const ConstValue limit = ConstValue::Ints({}, {7});
  const ConstValue delta = ConstValue::Ints({}, {3});
  const ConstValue range = Fold("Range", {&start, &limit, &delta});
  EXPECT_THAT(range.ints, ElementsAre(0, 3, 6));
  // Results over the limit stay ops.
  absl::StatusOr<std::optional<ConstValue>> huge =
      FillConst({1024, 1024}, ConstValue::Floats({}, {0.0}), kDefaultMaxFoldElements);
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->has_value());
  absl::StatusOr<std::optional<ConstValue>> unknown =
      FoldOp("Conv", {}, 13, {&start}, kDefaultMaxFoldElements);
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());
  const ConstValue shape = ConstValue::Ints({2}, {2, 3});
  const ConstValue axis = ConstValue::Ints({}, {2});
  absl::StatusOr<std::optional<ConstValue>> bad_axis =
      FoldOp("Gather", {}, 13, {&shape, &axis}, kDefaultMaxFoldElements);
  ASSERT_FALSE(bad_axis.ok());
  EXPECT_THAT(std::string(bad_axis.status().message()), HasSubstr("index 2 out of range"));
}

}  // namespace
}  // namespace braid::graph
