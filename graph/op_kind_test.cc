#include "graph/op_kind.h"

#include <map>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/graph.h"
#include "graph/ops.h"

namespace braid::graph {
namespace {

using C = OpCategory;

std::vector<OpKind> AllKinds() {
  std::vector<OpKind> kinds;
  for (size_t i = 0; i < kNumOpKinds; ++i) kinds.push_back(static_cast<OpKind>(i));
  return kinds;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// graph/ops.cc's string tables before op kinds existed, verbatim: the
// categories and elementwise FLOPs every name had, which the traits keep.
const std::map<std::string, double, std::less<>>& OldElementwiseTable() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, double, std::less<>>;
    auto set = [t](std::initializer_list<const char*> types, double flops) {
      for (const char* n : types) (*t)[n] = flops;
    };
    set({"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "ThresholdedRelu",
         "Clip", "Sqrt", "Reciprocal", "Min", "Max", "Sum", "Mean", "Where", "Equal", "Less",
         "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Cast", "CastLike",
         "Sign", "Floor", "Ceil", "Round", "Mod", "IsNaN", "IsInf", "Dropout", "Trilu"},
        1);
    set({"Exp", "Log", "Tanh", "Sigmoid", "Erf", "Softplus", "Pow", "Sin", "Cos", "Tan", "Asin",
         "Acos", "Atan", "Sinh", "Cosh", "Elu", "Selu", "Celu"},
        4);
    set({"Gelu", "Mish"}, 8);
    set({"HardSigmoid", "Softsign"}, 3);
    set({"HardSwish"}, 4);
    return t;
  }();
  return *table;
}

const std::map<std::string, OpCategory, std::less<>>& OldCategoryTable() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, OpCategory, std::less<>>;
    for (const auto& [name, flops] : OldElementwiseTable()) (*t)[name] = C::kElementwise;
    for (const char* n : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                          "ReduceLogSumExp", "GlobalAveragePool", "GlobalMaxPool", "ArgMax",
                          "ArgMin", "CumSum", "ReduceSumGrad", "ReduceMeanGrad", "ReduceMaxGrad",
                          "ReduceMinGrad", "GlobalAveragePoolGrad", "GlobalMaxPoolGrad",
                          "TileGrad"}) {
      (*t)[n] = C::kReduction;
    }
    for (const char* n : {"MatMul", "Gemm", "Einsum"}) (*t)[n] = C::kMatMul;
    for (const char* n : {"Conv", "ConvTranspose", "ConvGradData", "ConvGradFilter",
                          "ConvTransposeGradData", "ConvTransposeGradFilter"}) {
      (*t)[n] = C::kConv;
    }
    for (const char* n :
         {"MaxPool", "AveragePool", "LpPool", "MaxPoolGrad", "AveragePoolGrad", "LpPoolGrad"}) {
      (*t)[n] = C::kPool;
    }
    for (const char* n : {"BatchNormalization", "LayerNormalization", "InstanceNormalization",
                          "GroupNormalization", "BatchNormalizationGrad", "LayerNormalizationGrad",
                          "InstanceNormalizationGrad", "GroupNormalizationGrad"}) {
      (*t)[n] = C::kNormalization;
    }
    for (const char* n : {"Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"}) {
      (*t)[n] = C::kSoftmax;
    }
    for (const char* n :
         {"Reshape", "Transpose", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Expand",
          "Pad", "Tile", "Flatten", "Identity", "Range", "ConstantOfShape", "Constant", "Shape",
          "Size", "DepthToSpace", "SpaceToDepth"}) {
      (*t)[n] = C::kDataMovement;
    }
    for (const char* n : {"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
                          "OneHot", "GatherGrad", "GatherElementsGrad", "GatherNDGrad"}) {
      (*t)[n] = C::kGather;
    }
    for (const char* n : {"LSTM", "GRU", "RNN", "LSTMGrad", "GRUGrad", "RNNGrad"}) {
      (*t)[n] = C::kRecurrent;
    }
    for (const char* n : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
                          "SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
      (*t)[n] = C::kLoss;
    }
    for (const char* n :
         {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll", "Send", "Recv"}) {
      (*t)[n] = C::kCollective;
    }
    for (const char* n : {"SgdMomentumUpdate", "AdamUpdate"}) (*t)[n] = C::kUpdate;
    for (const char* n : {"If", "Loop", "Scan"}) (*t)[n] = C::kControlFlow;
    for (const char* n : {"DivGrad", "PowGrad", "MinGrad", "MaxGrad", "WhereGrad", "MeanGrad"}) {
      (*t)[n] = C::kElementwise;
    }
    return t;
  }();
  return *table;
}

OpCategory OldCategoryOf(std::string_view type) {
  auto it = OldCategoryTable().find(type);
  if (it != OldCategoryTable().end()) return it->second;
  if (EndsWith(type, "Grad") &&
      OldElementwiseTable().count(type.substr(0, type.size() - 4)) != 0) {
    return C::kElementwise;
  }
  return C::kOpaque;
}

TEST(OpKindTest, EveryNameRoundTrips) {
  std::set<std::string_view> names;
  for (OpKind k : AllKinds()) {
    EXPECT_EQ(Traits(k).kind, k);
    if (k == OpKind::kOpaque) continue;
    const std::string_view name = OpKindName(k);
    EXPECT_FALSE(name.empty()) << static_cast<int>(k);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_EQ(OpKindFromName(name), k) << name;
    EXPECT_EQ(OpKindFromName(std::string(name)), k) << name;
  }
  EXPECT_EQ(kNumOpKinds, 234u);
  EXPECT_EQ(OpKindName(OpKind::kConvGradFilter), "ConvGradFilter");
  EXPECT_EQ(OpKindName(OpKind::kSgdMomentumUpdate), "SgdMomentumUpdate");
  EXPECT_EQ(OpKindFromName("BatchNormalization"), OpKind::kBatchNormalization);
  EXPECT_EQ(OpKindName(OpKind::kOpaque), "");
}

TEST(OpKindTest, UnknownNamesAreOpaque) {
  for (std::string_view name : {"", "NoSuchOp", "NoSuchOpGrad", "ReluGradGrad", "relu", "Conv ",
                                "com.microsoft.Gelu", "ConvGrad", "MatMulGrad", "opaque"}) {
    EXPECT_EQ(OpKindFromName(name), OpKind::kOpaque) << name;
  }
  EXPECT_EQ(CategoryOf(OpKind::kOpaque), C::kOpaque);
  EXPECT_FALSE(IsKnownOpKind(OpKind::kOpaque));
  EXPECT_FALSE(IsGradientKind(OpKind::kOpaque));
  EXPECT_EQ(Traits(static_cast<OpKind>(60000)).kind, OpKind::kOpaque);
}

// grad_of replaces stripping a "Grad" suffix: a kind named "<F>Grad..." is the
// gradient of F, and every other kind is a gradient of nothing.
TEST(OpKindTest, GradOfMatchesTheNames) {
  int gradients = 0;
  for (OpKind k : AllKinds()) {
    const std::string name(OpKindName(k));
    const size_t at = name.find("Grad");
    if (at == std::string::npos || at == 0) {
      EXPECT_EQ(GradOf(k), OpKind::kOpaque) << name;
      EXPECT_FALSE(IsGradientKind(k)) << name;
      continue;
    }
    ++gradients;
    const OpKind forward = OpKindFromName(name.substr(0, at));
    EXPECT_NE(forward, OpKind::kOpaque) << name;
    EXPECT_EQ(GradOf(k), forward) << name;
    EXPECT_FALSE(IsGradientKind(forward)) << name;
    if (EndsWith(name, "Grad")) {
      EXPECT_EQ(GradientKindOf(forward), k) << name;
    } else {  // ConvGradData & co: Conv has two gradients, none named ConvGrad
      EXPECT_EQ(GradientKindOf(forward), OpKind::kOpaque) << name;
    }
  }
  EXPECT_EQ(gradients, 61 + 7 + 4 + 3 + 4 + 2 + 3 + 3 + 2);
  EXPECT_EQ(GradOf(OpKind::kReluGrad), OpKind::kRelu);
  EXPECT_EQ(GradOf(OpKind::kConvTransposeGradFilter), OpKind::kConvTranspose);
  EXPECT_EQ(GradOf(OpKind::kTileGrad), OpKind::kTile);
  EXPECT_EQ(GradientKindOf(OpKind::kLSTM), OpKind::kLSTMGrad);
  EXPECT_EQ(GradientKindOf(OpKind::kMatMul), OpKind::kOpaque);
  EXPECT_EQ(GradientKindOf(OpKind::kAllReduce), OpKind::kOpaque);
}

TEST(OpKindTest, CategoriesAreThoseOfTheStringTables) {
  std::set<std::string, std::less<>> known;
  for (OpKind k : AllKinds()) {
    const std::string_view name = OpKindName(k);
    EXPECT_EQ(CategoryOf(k), OldCategoryOf(name)) << name;
    EXPECT_EQ(CategoryOf(name), OldCategoryOf(name)) << name;
    EXPECT_EQ(IsKnownOpKind(k), OldCategoryOf(name) != C::kOpaque) << name;
    if (IsKnownOpKind(k)) known.insert(std::string(name));
  }
  // Every name the old tables knew is a kind, and no other name is known.
  for (const auto& [name, cat] : OldCategoryTable()) {
    EXPECT_EQ(known.count(name), 1u) << name;
    EXPECT_EQ(CategoryOf(OpKindFromName(name)), cat) << name;
  }
  for (const auto& [name, flops] : OldElementwiseTable()) {
    const std::string grad = name + "Grad";
    EXPECT_EQ(known.count(grad), 1u) << grad;
  }
  EXPECT_EQ(known.size(), OldCategoryTable().size() + OldElementwiseTable().size() - 6);
  for (std::string_view name : {"NoSuchOp", "NoSuchOpGrad", "ReluGradGrad", "NonZero"}) {
    EXPECT_EQ(CategoryOf(name), OldCategoryOf(name)) << name;
  }
}

TEST(OpKindTest, TraitsFollowTheCategories) {
  for (OpKind k : AllKinds()) {
    const OpKindTraits& t = Traits(k);
    EXPECT_EQ(t.library, t.category == C::kMatMul || t.category == C::kConv) << t.name;
    EXPECT_EQ(t.elementwise, t.category == C::kElementwise) << t.name;
    EXPECT_EQ(IsCollectiveKind(k), t.category == C::kCollective) << t.name;
    if (!t.elementwise) {
      EXPECT_EQ(t.flops_per_element, 0) << t.name;
      EXPECT_FALSE(t.variadic) << t.name;
    } else if (IsGradientKind(k)) {
      EXPECT_EQ(t.flops_per_element, 2 * Traits(t.grad_of).flops_per_element) << t.name;
      EXPECT_FALSE(t.variadic) << t.name;
    } else {
      EXPECT_EQ(t.flops_per_element, OldElementwiseTable().at(std::string(t.name))) << t.name;
      EXPECT_EQ(t.variadic, t.name == "Sum" || t.name == "Mean" || t.name == "Min" ||
                                t.name == "Max")
          << t.name;
    }
  }
  EXPECT_TRUE(IsLibraryKind(OpKind::kGemm));
  EXPECT_TRUE(IsLibraryKind(OpKind::kConvGradData));
  EXPECT_TRUE(IsLibraryKind(OpKind::kEinsum));
  EXPECT_FALSE(IsLibraryKind(OpKind::kLSTM));
  EXPECT_TRUE(IsElementwiseKind(OpKind::kDropoutGrad));
  EXPECT_EQ(CategoryName(CategoryOf(OpKind::kSplit)), "data_movement");
}

TEST(OpKindTest, AddOpSetsTheKindAndValidateCatchesAStaleOne) {
  Graph g("g");
  TensorId x = g.AddTensor("x", {4}, DType::kF32, TensorRole::kInput);
  TensorId y = g.AddTensor("y", {4}, DType::kF32, TensorRole::kActivation);
  TensorId z = g.AddTensor("z", {4}, DType::kF32, TensorRole::kActivation);
  OpId relu = g.AddOp("relu", "Relu", {x}, {y});
  OpId custom = g.AddOp("custom", "com.acme.Frobnicate", {y}, {z});
  EXPECT_EQ(g.op(relu).kind, OpKind::kRelu);
  EXPECT_EQ(g.op(custom).kind, OpKind::kOpaque);
  EXPECT_EQ(g.op(custom).type, "com.acme.Frobnicate");
  EXPECT_TRUE(g.Validate().ok());
  g.mutable_op(relu).type = "Tanh";  // without the kind: a programmer bug
  absl::Status s = g.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("op 'relu' has type Tanh but kind Relu"));
}

}  // namespace
}  // namespace braid::graph
