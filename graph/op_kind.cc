// The traits table of graph/op_kind.h, in enum order.
#include "graph/op_kind.h"

#include <array>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace braid::graph {
namespace {

using C = OpCategory;
using K = OpKind;

constexpr OpKindTraits Make(K kind, std::string_view name, C category, K grad_of = K::kOpaque,
                            double flops_per_element = 0, bool variadic = false) {
  return OpKindTraits{kind,
                      name,
                      category,
                      /*library=*/category == C::kMatMul || category == C::kConv,
                      /*elementwise=*/category == C::kElementwise,
                      grad_of,
                      flops_per_element,
                      variadic};
}
constexpr OpKindTraits Kind(K kind, std::string_view name, C category) {
  return Make(kind, name, category);
}
constexpr OpKindTraits Grad(K kind, std::string_view name, C category, K of) {
  return Make(kind, name, category, of);
}
constexpr OpKindTraits Elementwise(K kind, std::string_view name, double flops, bool variadic) {
  return Make(kind, name, C::kElementwise, K::kOpaque, flops, variadic);
}
// A gradient of an elementwise op costs twice its forward per element.
constexpr OpKindTraits ElementwiseGrad(K kind, std::string_view name, K of, double forward_flops) {
  return Make(kind, name, C::kElementwise, of, 2 * forward_flops);
}

// FLOPs per element of elementwise ops (graph/ops.h): 1 for arithmetic,
// comparisons, casts, selects and Relu-like ops; a transcendental evaluation
// for Exp, Log, Tanh, ...; two for Gelu and Mish.
constexpr double kTranscendentalFlops = 4;

constexpr std::array<OpKindTraits, kNumOpKinds> kTraits = {{
    // Elementwise forward ops and their <Op>Grad.
    Elementwise(K::kAdd, "Add", 1, /*variadic=*/false),
    ElementwiseGrad(K::kAddGrad, "AddGrad", K::kAdd, 1),
    Elementwise(K::kSub, "Sub", 1, /*variadic=*/false),
    ElementwiseGrad(K::kSubGrad, "SubGrad", K::kSub, 1),
    Elementwise(K::kMul, "Mul", 1, /*variadic=*/false),
    ElementwiseGrad(K::kMulGrad, "MulGrad", K::kMul, 1),
    Elementwise(K::kDiv, "Div", 1, /*variadic=*/false),
    ElementwiseGrad(K::kDivGrad, "DivGrad", K::kDiv, 1),
    Elementwise(K::kNeg, "Neg", 1, /*variadic=*/false),
    ElementwiseGrad(K::kNegGrad, "NegGrad", K::kNeg, 1),
    Elementwise(K::kAbs, "Abs", 1, /*variadic=*/false),
    ElementwiseGrad(K::kAbsGrad, "AbsGrad", K::kAbs, 1),
    Elementwise(K::kRelu, "Relu", 1, /*variadic=*/false),
    ElementwiseGrad(K::kReluGrad, "ReluGrad", K::kRelu, 1),
    Elementwise(K::kLeakyRelu, "LeakyRelu", 1, /*variadic=*/false),
    ElementwiseGrad(K::kLeakyReluGrad, "LeakyReluGrad", K::kLeakyRelu, 1),
    Elementwise(K::kPRelu, "PRelu", 1, /*variadic=*/false),
    ElementwiseGrad(K::kPReluGrad, "PReluGrad", K::kPRelu, 1),
    Elementwise(K::kThresholdedRelu, "ThresholdedRelu", 1, /*variadic=*/false),
    ElementwiseGrad(K::kThresholdedReluGrad, "ThresholdedReluGrad", K::kThresholdedRelu, 1),
    Elementwise(K::kClip, "Clip", 1, /*variadic=*/false),
    ElementwiseGrad(K::kClipGrad, "ClipGrad", K::kClip, 1),
    Elementwise(K::kSqrt, "Sqrt", 1, /*variadic=*/false),
    ElementwiseGrad(K::kSqrtGrad, "SqrtGrad", K::kSqrt, 1),
    Elementwise(K::kReciprocal, "Reciprocal", 1, /*variadic=*/false),
    ElementwiseGrad(K::kReciprocalGrad, "ReciprocalGrad", K::kReciprocal, 1),
    Elementwise(K::kMin, "Min", 1, /*variadic=*/true),
    ElementwiseGrad(K::kMinGrad, "MinGrad", K::kMin, 1),
    Elementwise(K::kMax, "Max", 1, /*variadic=*/true),
    ElementwiseGrad(K::kMaxGrad, "MaxGrad", K::kMax, 1),
    Elementwise(K::kSum, "Sum", 1, /*variadic=*/true),
    ElementwiseGrad(K::kSumGrad, "SumGrad", K::kSum, 1),
    Elementwise(K::kMean, "Mean", 1, /*variadic=*/true),
    ElementwiseGrad(K::kMeanGrad, "MeanGrad", K::kMean, 1),
    Elementwise(K::kWhere, "Where", 1, /*variadic=*/false),
    ElementwiseGrad(K::kWhereGrad, "WhereGrad", K::kWhere, 1),
    Elementwise(K::kEqual, "Equal", 1, /*variadic=*/false),
    ElementwiseGrad(K::kEqualGrad, "EqualGrad", K::kEqual, 1),
    Elementwise(K::kLess, "Less", 1, /*variadic=*/false),
    ElementwiseGrad(K::kLessGrad, "LessGrad", K::kLess, 1),
    Elementwise(K::kGreater, "Greater", 1, /*variadic=*/false),
    ElementwiseGrad(K::kGreaterGrad, "GreaterGrad", K::kGreater, 1),
    Elementwise(K::kLessOrEqual, "LessOrEqual", 1, /*variadic=*/false),
    ElementwiseGrad(K::kLessOrEqualGrad, "LessOrEqualGrad", K::kLessOrEqual, 1),
    Elementwise(K::kGreaterOrEqual, "GreaterOrEqual", 1, /*variadic=*/false),
    ElementwiseGrad(K::kGreaterOrEqualGrad, "GreaterOrEqualGrad", K::kGreaterOrEqual, 1),
    Elementwise(K::kNot, "Not", 1, /*variadic=*/false),
    ElementwiseGrad(K::kNotGrad, "NotGrad", K::kNot, 1),
    Elementwise(K::kAnd, "And", 1, /*variadic=*/false),
    ElementwiseGrad(K::kAndGrad, "AndGrad", K::kAnd, 1),
    Elementwise(K::kOr, "Or", 1, /*variadic=*/false),
    ElementwiseGrad(K::kOrGrad, "OrGrad", K::kOr, 1),
    Elementwise(K::kXor, "Xor", 1, /*variadic=*/false),
    ElementwiseGrad(K::kXorGrad, "XorGrad", K::kXor, 1),
    Elementwise(K::kCast, "Cast", 1, /*variadic=*/false),
    ElementwiseGrad(K::kCastGrad, "CastGrad", K::kCast, 1),
    Elementwise(K::kCastLike, "CastLike", 1, /*variadic=*/false),
    ElementwiseGrad(K::kCastLikeGrad, "CastLikeGrad", K::kCastLike, 1),
    Elementwise(K::kSign, "Sign", 1, /*variadic=*/false),
    ElementwiseGrad(K::kSignGrad, "SignGrad", K::kSign, 1),
    Elementwise(K::kFloor, "Floor", 1, /*variadic=*/false),
    ElementwiseGrad(K::kFloorGrad, "FloorGrad", K::kFloor, 1),
    Elementwise(K::kCeil, "Ceil", 1, /*variadic=*/false),
    ElementwiseGrad(K::kCeilGrad, "CeilGrad", K::kCeil, 1),
    Elementwise(K::kRound, "Round", 1, /*variadic=*/false),
    ElementwiseGrad(K::kRoundGrad, "RoundGrad", K::kRound, 1),
    Elementwise(K::kMod, "Mod", 1, /*variadic=*/false),
    ElementwiseGrad(K::kModGrad, "ModGrad", K::kMod, 1),
    Elementwise(K::kIsNaN, "IsNaN", 1, /*variadic=*/false),
    ElementwiseGrad(K::kIsNaNGrad, "IsNaNGrad", K::kIsNaN, 1),
    Elementwise(K::kIsInf, "IsInf", 1, /*variadic=*/false),
    ElementwiseGrad(K::kIsInfGrad, "IsInfGrad", K::kIsInf, 1),
    Elementwise(K::kDropout, "Dropout", 1, /*variadic=*/false),
    ElementwiseGrad(K::kDropoutGrad, "DropoutGrad", K::kDropout, 1),
    Elementwise(K::kTrilu, "Trilu", 1, /*variadic=*/false),
    ElementwiseGrad(K::kTriluGrad, "TriluGrad", K::kTrilu, 1),
    Elementwise(K::kExp, "Exp", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kExpGrad, "ExpGrad", K::kExp, kTranscendentalFlops),
    Elementwise(K::kLog, "Log", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kLogGrad, "LogGrad", K::kLog, kTranscendentalFlops),
    Elementwise(K::kTanh, "Tanh", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kTanhGrad, "TanhGrad", K::kTanh, kTranscendentalFlops),
    Elementwise(K::kSigmoid, "Sigmoid", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kSigmoidGrad, "SigmoidGrad", K::kSigmoid, kTranscendentalFlops),
    Elementwise(K::kErf, "Erf", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kErfGrad, "ErfGrad", K::kErf, kTranscendentalFlops),
    Elementwise(K::kSoftplus, "Softplus", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kSoftplusGrad, "SoftplusGrad", K::kSoftplus, kTranscendentalFlops),
    Elementwise(K::kPow, "Pow", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kPowGrad, "PowGrad", K::kPow, kTranscendentalFlops),
    Elementwise(K::kSin, "Sin", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kSinGrad, "SinGrad", K::kSin, kTranscendentalFlops),
    Elementwise(K::kCos, "Cos", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kCosGrad, "CosGrad", K::kCos, kTranscendentalFlops),
    Elementwise(K::kTan, "Tan", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kTanGrad, "TanGrad", K::kTan, kTranscendentalFlops),
    Elementwise(K::kAsin, "Asin", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kAsinGrad, "AsinGrad", K::kAsin, kTranscendentalFlops),
    Elementwise(K::kAcos, "Acos", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kAcosGrad, "AcosGrad", K::kAcos, kTranscendentalFlops),
    Elementwise(K::kAtan, "Atan", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kAtanGrad, "AtanGrad", K::kAtan, kTranscendentalFlops),
    Elementwise(K::kSinh, "Sinh", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kSinhGrad, "SinhGrad", K::kSinh, kTranscendentalFlops),
    Elementwise(K::kCosh, "Cosh", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kCoshGrad, "CoshGrad", K::kCosh, kTranscendentalFlops),
    Elementwise(K::kElu, "Elu", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kEluGrad, "EluGrad", K::kElu, kTranscendentalFlops),
    Elementwise(K::kSelu, "Selu", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kSeluGrad, "SeluGrad", K::kSelu, kTranscendentalFlops),
    Elementwise(K::kCelu, "Celu", kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kCeluGrad, "CeluGrad", K::kCelu, kTranscendentalFlops),
    Elementwise(K::kGelu, "Gelu", 2 * kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kGeluGrad, "GeluGrad", K::kGelu, 2 * kTranscendentalFlops),
    Elementwise(K::kMish, "Mish", 2 * kTranscendentalFlops, /*variadic=*/false),
    ElementwiseGrad(K::kMishGrad, "MishGrad", K::kMish, 2 * kTranscendentalFlops),
    Elementwise(K::kHardSigmoid, "HardSigmoid", 3, /*variadic=*/false),
    ElementwiseGrad(K::kHardSigmoidGrad, "HardSigmoidGrad", K::kHardSigmoid, 3),
    Elementwise(K::kSoftsign, "Softsign", 3, /*variadic=*/false),
    ElementwiseGrad(K::kSoftsignGrad, "SoftsignGrad", K::kSoftsign, 3),
    Elementwise(K::kHardSwish, "HardSwish", 4, /*variadic=*/false),
    ElementwiseGrad(K::kHardSwishGrad, "HardSwishGrad", K::kHardSwish, 4),
    // OpCategory::kReduction
    Kind(K::kReduceSum, "ReduceSum", C::kReduction),
    Kind(K::kReduceMean, "ReduceMean", C::kReduction),
    Kind(K::kReduceMax, "ReduceMax", C::kReduction),
    Kind(K::kReduceMin, "ReduceMin", C::kReduction),
    Kind(K::kReduceProd, "ReduceProd", C::kReduction),
    Kind(K::kReduceL1, "ReduceL1", C::kReduction),
    Kind(K::kReduceL2, "ReduceL2", C::kReduction),
    Kind(K::kReduceSumSquare, "ReduceSumSquare", C::kReduction),
    Kind(K::kReduceLogSum, "ReduceLogSum", C::kReduction),
    Kind(K::kReduceLogSumExp, "ReduceLogSumExp", C::kReduction),
    Kind(K::kGlobalAveragePool, "GlobalAveragePool", C::kReduction),
    Kind(K::kGlobalMaxPool, "GlobalMaxPool", C::kReduction),
    Kind(K::kArgMax, "ArgMax", C::kReduction),
    Kind(K::kArgMin, "ArgMin", C::kReduction),
    Kind(K::kCumSum, "CumSum", C::kReduction),
    Grad(K::kReduceSumGrad, "ReduceSumGrad", C::kReduction, K::kReduceSum),
    Grad(K::kReduceMeanGrad, "ReduceMeanGrad", C::kReduction, K::kReduceMean),
    Grad(K::kReduceMaxGrad, "ReduceMaxGrad", C::kReduction, K::kReduceMax),
    Grad(K::kReduceMinGrad, "ReduceMinGrad", C::kReduction, K::kReduceMin),
    Grad(K::kGlobalAveragePoolGrad, "GlobalAveragePoolGrad", C::kReduction, K::kGlobalAveragePool),
    Grad(K::kGlobalMaxPoolGrad, "GlobalMaxPoolGrad", C::kReduction, K::kGlobalMaxPool),
    Grad(K::kTileGrad, "TileGrad", C::kReduction, K::kTile),
    // OpCategory::kMatMul
    Kind(K::kMatMul, "MatMul", C::kMatMul),
    Kind(K::kGemm, "Gemm", C::kMatMul),
    Kind(K::kEinsum, "Einsum", C::kMatMul),
    // OpCategory::kConv
    Kind(K::kConv, "Conv", C::kConv),
    Kind(K::kConvTranspose, "ConvTranspose", C::kConv),
    Grad(K::kConvGradData, "ConvGradData", C::kConv, K::kConv),
    Grad(K::kConvGradFilter, "ConvGradFilter", C::kConv, K::kConv),
    Grad(K::kConvTransposeGradData, "ConvTransposeGradData", C::kConv, K::kConvTranspose),
    Grad(K::kConvTransposeGradFilter, "ConvTransposeGradFilter", C::kConv, K::kConvTranspose),
    // OpCategory::kPool
    Kind(K::kMaxPool, "MaxPool", C::kPool),
    Kind(K::kAveragePool, "AveragePool", C::kPool),
    Kind(K::kLpPool, "LpPool", C::kPool),
    Grad(K::kMaxPoolGrad, "MaxPoolGrad", C::kPool, K::kMaxPool),
    Grad(K::kAveragePoolGrad, "AveragePoolGrad", C::kPool, K::kAveragePool),
    Grad(K::kLpPoolGrad, "LpPoolGrad", C::kPool, K::kLpPool),
    // OpCategory::kNormalization
    Kind(K::kBatchNormalization, "BatchNormalization", C::kNormalization),
    Kind(K::kLayerNormalization, "LayerNormalization", C::kNormalization),
    Kind(K::kInstanceNormalization, "InstanceNormalization", C::kNormalization),
    Kind(K::kGroupNormalization, "GroupNormalization", C::kNormalization),
    Grad(K::kBatchNormalizationGrad, "BatchNormalizationGrad", C::kNormalization, K::kBatchNormalization),
    Grad(K::kLayerNormalizationGrad, "LayerNormalizationGrad", C::kNormalization, K::kLayerNormalization),
    Grad(K::kInstanceNormalizationGrad, "InstanceNormalizationGrad", C::kNormalization, K::kInstanceNormalization),
    Grad(K::kGroupNormalizationGrad, "GroupNormalizationGrad", C::kNormalization, K::kGroupNormalization),
    // OpCategory::kSoftmax
    Kind(K::kSoftmax, "Softmax", C::kSoftmax),
    Kind(K::kLogSoftmax, "LogSoftmax", C::kSoftmax),
    Grad(K::kSoftmaxGrad, "SoftmaxGrad", C::kSoftmax, K::kSoftmax),
    Grad(K::kLogSoftmaxGrad, "LogSoftmaxGrad", C::kSoftmax, K::kLogSoftmax),
    // OpCategory::kDataMovement
    Kind(K::kReshape, "Reshape", C::kDataMovement),
    Kind(K::kTranspose, "Transpose", C::kDataMovement),
    Kind(K::kConcat, "Concat", C::kDataMovement),
    Kind(K::kSplit, "Split", C::kDataMovement),
    Kind(K::kSlice, "Slice", C::kDataMovement),
    Kind(K::kSqueeze, "Squeeze", C::kDataMovement),
    Kind(K::kUnsqueeze, "Unsqueeze", C::kDataMovement),
    Kind(K::kExpand, "Expand", C::kDataMovement),
    Kind(K::kPad, "Pad", C::kDataMovement),
    Kind(K::kTile, "Tile", C::kDataMovement),
    Kind(K::kFlatten, "Flatten", C::kDataMovement),
    Kind(K::kIdentity, "Identity", C::kDataMovement),
    Kind(K::kRange, "Range", C::kDataMovement),
    Kind(K::kConstantOfShape, "ConstantOfShape", C::kDataMovement),
    Kind(K::kConstant, "Constant", C::kDataMovement),
    Kind(K::kShape, "Shape", C::kDataMovement),
    Kind(K::kSize, "Size", C::kDataMovement),
    Kind(K::kDepthToSpace, "DepthToSpace", C::kDataMovement),
    Kind(K::kSpaceToDepth, "SpaceToDepth", C::kDataMovement),
    // OpCategory::kGather
    Kind(K::kGather, "Gather", C::kGather),
    Kind(K::kGatherElements, "GatherElements", C::kGather),
    Kind(K::kGatherND, "GatherND", C::kGather),
    Kind(K::kScatterElements, "ScatterElements", C::kGather),
    Kind(K::kScatterND, "ScatterND", C::kGather),
    Kind(K::kOneHot, "OneHot", C::kGather),
    Grad(K::kGatherGrad, "GatherGrad", C::kGather, K::kGather),
    Grad(K::kGatherElementsGrad, "GatherElementsGrad", C::kGather, K::kGatherElements),
    Grad(K::kGatherNDGrad, "GatherNDGrad", C::kGather, K::kGatherND),
    // OpCategory::kRecurrent
    Kind(K::kLSTM, "LSTM", C::kRecurrent),
    Kind(K::kGRU, "GRU", C::kRecurrent),
    Kind(K::kRNN, "RNN", C::kRecurrent),
    Grad(K::kLSTMGrad, "LSTMGrad", C::kRecurrent, K::kLSTM),
    Grad(K::kGRUGrad, "GRUGrad", C::kRecurrent, K::kGRU),
    Grad(K::kRNNGrad, "RNNGrad", C::kRecurrent, K::kRNN),
    // OpCategory::kLoss
    Kind(K::kSoftmaxCrossEntropyLoss, "SoftmaxCrossEntropyLoss", C::kLoss),
    Kind(K::kNegativeLogLikelihoodLoss, "NegativeLogLikelihoodLoss", C::kLoss),
    Grad(K::kSoftmaxCrossEntropyLossGrad, "SoftmaxCrossEntropyLossGrad", C::kLoss, K::kSoftmaxCrossEntropyLoss),
    Grad(K::kNegativeLogLikelihoodLossGrad, "NegativeLogLikelihoodLossGrad", C::kLoss, K::kNegativeLogLikelihoodLoss),
    // OpCategory::kCollective
    Kind(K::kAllReduce, "AllReduce", C::kCollective),
    Kind(K::kAllGather, "AllGather", C::kCollective),
    Kind(K::kReduceScatter, "ReduceScatter", C::kCollective),
    Kind(K::kBroadcast, "Broadcast", C::kCollective),
    Kind(K::kAllToAll, "AllToAll", C::kCollective),
    Kind(K::kSend, "Send", C::kCollective),
    Kind(K::kRecv, "Recv", C::kCollective),
    // OpCategory::kUpdate
    Kind(K::kSgdMomentumUpdate, "SgdMomentumUpdate", C::kUpdate),
    Kind(K::kAdamUpdate, "AdamUpdate", C::kUpdate),
    // OpCategory::kControlFlow
    Kind(K::kIf, "If", C::kControlFlow),
    Kind(K::kLoop, "Loop", C::kControlFlow),
    Kind(K::kScan, "Scan", C::kControlFlow),
    // OpCategory::kOpaque
    Kind(K::kNonZero, "NonZero", C::kOpaque),
    Kind(K::kEyeLike, "EyeLike", C::kOpaque),
    Kind(K::kRandomNormalLike, "RandomNormalLike", C::kOpaque),
    Kind(K::kRandomUniformLike, "RandomUniformLike", C::kOpaque),
    Kind(K::kConvInteger, "ConvInteger", C::kOpaque),
    Kind(K::kQLinearConv, "QLinearConv", C::kOpaque),
    Kind(K::kDeformConv, "DeformConv", C::kOpaque),
    Kind(K::kMaxUnpool, "MaxUnpool", C::kOpaque),
    Kind(K::kMaxRoiPool, "MaxRoiPool", C::kOpaque),
    Kind(K::kHardmax, "Hardmax", C::kOpaque),
    Kind(K::kCompress, "Compress", C::kOpaque),
    Kind(K::kConcatFromSequence, "ConcatFromSequence", C::kOpaque),
    Kind(K::kOpaque, "", C::kOpaque),
}};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<size_t>(kTraits[i].kind) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kTraits must list every OpKind once, in enum order");

}  // namespace

std::string_view CategoryName(OpCategory c) {
  switch (c) {
    case C::kElementwise:
      return "elementwise";
    case C::kReduction:
      return "reduction";
    case C::kMatMul:
      return "matmul";
    case C::kConv:
      return "conv";
    case C::kPool:
      return "pool";
    case C::kNormalization:
      return "normalization";
    case C::kSoftmax:
      return "softmax";
    case C::kDataMovement:
      return "data_movement";
    case C::kGather:
      return "gather";
    case C::kRecurrent:
      return "recurrent";
    case C::kLoss:
      return "loss";
    case C::kCollective:
      return "collective";
    case C::kUpdate:
      return "update";
    case C::kControlFlow:
      return "control_flow";
    case C::kOpaque:
      return "opaque";
  }
  return "?";
}

const OpKindTraits& Traits(OpKind k) {
  const size_t i = static_cast<size_t>(k);
  return kTraits[i < kNumOpKinds ? i : kNumOpKinds - 1];
}

OpKind OpKindFromName(std::string_view name) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, OpKind>;
    for (const OpKindTraits& t : kTraits) {
      if (t.kind != K::kOpaque) m->emplace(t.name, t.kind);
    }
    return m;
  }();
  auto it = index->find(name);
  return it == index->end() ? K::kOpaque : it->second;
}

OpKind GradientKindOf(OpKind forward) {
  static const auto* inverse = [] {
    auto* a = new std::array<OpKind, kNumOpKinds>;
    a->fill(K::kOpaque);
    for (const OpKindTraits& t : kTraits) {
      if (t.grad_of == K::kOpaque) continue;
      const std::string_view of = Traits(t.grad_of).name;
      if (t.name == std::string(of) + "Grad") (*a)[static_cast<size_t>(t.grad_of)] = t.kind;
    }
    return a;
  }();
  return (*inverse)[static_cast<size_t>(Traits(forward).kind)];
}

}  // namespace braid::graph
