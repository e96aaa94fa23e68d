// braid's op vocabulary: one enum value per op type braid knows, with the
// traits every layer asks about (category, library op, elementwise, which
// forward op a gradient differentiates, FLOPs per element), in the manner of
// XLA's HloOpcode and flexflow-train's OperatorType.
//
// Op types are strings in the text format, in ONNX files, in fingerprints and
// in profile-store keys; a graph::Op keeps its type string (graph/graph.h) and
// carries the OpKind that Graph::AddOp looked up once from it. Code above the
// importer compares kinds and reads traits, never type strings. A name braid
// does not know maps to OpKind::kOpaque; the op keeps its name in Op::type.
//
//   OpKind k = OpKindFromName("ReluGrad");     // OpKind::kReluGrad
//   OpKindName(k);                             // "ReluGrad"
//   GradOf(k);                                 // OpKind::kRelu
//   CategoryOf(k);                             // OpCategory::kElementwise
//   if (op.kind == OpKind::kConv || IsLibraryKind(op.kind)) ...
#ifndef BRAID_GRAPH_OP_KIND_H_
#define BRAID_GRAPH_OP_KIND_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace braid::graph {

// What kind of computation an op is: how it is costed and fused.
enum class OpCategory : uint8_t {
  kElementwise,   // unary/binary pointwise, casts, activation functions
  kReduction,     // ReduceSum/Mean, global pooling
  kMatMul,        // MatMul, Gemm, batched matmul
  kConv,          // Conv and its gradients
  kPool,          // windowed pooling and its gradients
  kNormalization, // BatchNorm, LayerNorm, and their gradients
  kSoftmax,       // Softmax/LogSoftmax and gradients
  kDataMovement,  // Reshape, Transpose, Concat, Slice, Split, Flatten, Pad, Expand
  kGather,        // Gather/embedding lookups and scatter-add gradients
  kRecurrent,     // LSTM/GRU/RNN and gradients
  kLoss,          // loss functions and their gradients
  kCollective,    // AllReduce & co
  kUpdate,        // optimizer updates
  kControlFlow,   // If, Loop, Scan: never fused
  kOpaque,        // unknown to braid
};

std::string_view CategoryName(OpCategory c);  // "elementwise", "data_movement", ...

// Every op type braid knows. Names (OpKindName) are the ONNX op names for
// forward ops and braid's names for the rest (graph/ops.h): gradients
// "<Forward>Grad" (and ConvGradData/ConvGradFilter, ...), collectives,
// optimizer updates. The last group (category kOpaque) are ONNX ops braid does
// not model (no shapes or costs: the importer keeps them opaque) but that some
// rule names: ops without a gradient, window ops whose attributes are checked.
enum class OpKind : uint16_t {
  // Elementwise (OpCategory::kElementwise): ONNX forward ops, each followed by
  // braid's <Op>Grad, the gradient the training builder emits for it.
  kAdd, kAddGrad,
  kSub, kSubGrad,
  kMul, kMulGrad,
  kDiv, kDivGrad,
  kNeg, kNegGrad,
  kAbs, kAbsGrad,
  kRelu, kReluGrad,
  kLeakyRelu, kLeakyReluGrad,
  kPRelu, kPReluGrad,
  kThresholdedRelu, kThresholdedReluGrad,
  kClip, kClipGrad,
  kSqrt, kSqrtGrad,
  kReciprocal, kReciprocalGrad,
  kMin, kMinGrad,
  kMax, kMaxGrad,
  kSum, kSumGrad,
  kMean, kMeanGrad,
  kWhere, kWhereGrad,
  kEqual, kEqualGrad,
  kLess, kLessGrad,
  kGreater, kGreaterGrad,
  kLessOrEqual, kLessOrEqualGrad,
  kGreaterOrEqual, kGreaterOrEqualGrad,
  kNot, kNotGrad,
  kAnd, kAndGrad,
  kOr, kOrGrad,
  kXor, kXorGrad,
  kCast, kCastGrad,
  kCastLike, kCastLikeGrad,
  kSign, kSignGrad,
  kFloor, kFloorGrad,
  kCeil, kCeilGrad,
  kRound, kRoundGrad,
  kMod, kModGrad,
  kIsNaN, kIsNaNGrad,
  kIsInf, kIsInfGrad,
  kDropout, kDropoutGrad,
  kTrilu, kTriluGrad,
  kExp, kExpGrad,
  kLog, kLogGrad,
  kTanh, kTanhGrad,
  kSigmoid, kSigmoidGrad,
  kErf, kErfGrad,
  kSoftplus, kSoftplusGrad,
  kPow, kPowGrad,
  kSin, kSinGrad,
  kCos, kCosGrad,
  kTan, kTanGrad,
  kAsin, kAsinGrad,
  kAcos, kAcosGrad,
  kAtan, kAtanGrad,
  kSinh, kSinhGrad,
  kCosh, kCoshGrad,
  kElu, kEluGrad,
  kSelu, kSeluGrad,
  kCelu, kCeluGrad,
  kGelu, kGeluGrad,
  kMish, kMishGrad,
  kHardSigmoid, kHardSigmoidGrad,
  kSoftsign, kSoftsignGrad,
  kHardSwish, kHardSwishGrad,
  // OpCategory::kReduction
  kReduceSum, kReduceMean, kReduceMax, kReduceMin, kReduceProd, kReduceL1, kReduceL2,
  kReduceSumSquare, kReduceLogSum, kReduceLogSumExp, kGlobalAveragePool, kGlobalMaxPool, kArgMax,
  kArgMin, kCumSum, kReduceSumGrad, kReduceMeanGrad, kReduceMaxGrad, kReduceMinGrad,
  kGlobalAveragePoolGrad, kGlobalMaxPoolGrad, kTileGrad,
  // OpCategory::kMatMul
  kMatMul, kGemm, kEinsum,
  // OpCategory::kConv
  kConv, kConvTranspose, kConvGradData, kConvGradFilter, kConvTransposeGradData,
  kConvTransposeGradFilter,
  // OpCategory::kPool
  kMaxPool, kAveragePool, kLpPool, kMaxPoolGrad, kAveragePoolGrad, kLpPoolGrad,
  // OpCategory::kNormalization
  kBatchNormalization, kLayerNormalization, kInstanceNormalization, kGroupNormalization,
  kBatchNormalizationGrad, kLayerNormalizationGrad, kInstanceNormalizationGrad,
  kGroupNormalizationGrad,
  // OpCategory::kSoftmax
  kSoftmax, kLogSoftmax, kSoftmaxGrad, kLogSoftmaxGrad,
  // OpCategory::kDataMovement
  kReshape, kTranspose, kConcat, kSplit, kSlice, kSqueeze, kUnsqueeze, kExpand, kPad, kTile,
  kFlatten, kIdentity, kRange, kConstantOfShape, kConstant, kShape, kSize, kDepthToSpace,
  kSpaceToDepth,
  // OpCategory::kGather
  kGather, kGatherElements, kGatherND, kScatterElements, kScatterND, kOneHot, kGatherGrad,
  kGatherElementsGrad, kGatherNDGrad,
  // OpCategory::kRecurrent
  kLSTM, kGRU, kRNN, kLSTMGrad, kGRUGrad, kRNNGrad,
  // OpCategory::kLoss
  kSoftmaxCrossEntropyLoss, kNegativeLogLikelihoodLoss, kSoftmaxCrossEntropyLossGrad,
  kNegativeLogLikelihoodLossGrad,
  // OpCategory::kCollective
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSend, kRecv,
  // OpCategory::kUpdate
  kSgdMomentumUpdate, kAdamUpdate,
  // OpCategory::kControlFlow
  kIf, kLoop, kScan,
  // OpCategory::kOpaque
  kNonZero, kEyeLike, kRandomNormalLike, kRandomUniformLike, kConvInteger, kQLinearConv,
  kDeformConv, kMaxUnpool, kMaxRoiPool, kHardmax, kCompress, kConcatFromSequence,
  // Any other name: an op braid does not know, kept opaque with its name.
  kOpaque,
};

inline constexpr size_t kNumOpKinds = static_cast<size_t>(OpKind::kOpaque) + 1;

// The traits of one kind; Traits(k) is a table lookup.
struct OpKindTraits {
  OpKind kind;
  std::string_view name;  // "" for kOpaque
  OpCategory category;
  // Runs as a library call on GPUs (cuBLAS/cuDNN) rather than as generated
  // code: categories kMatMul and kConv. A fused kernel holds at most one.
  bool library;
  bool elementwise;  // category kElementwise
  // The forward kind this gradient kind differentiates (kReluGrad -> kRelu,
  // kConvGradFilter -> kConv); kOpaque when the kind is not a gradient.
  // MatMul/Gemm backward ops are plain kMatMul and have none.
  OpKind grad_of;
  // Elementwise kinds: FLOPs per output element (graph/ops.h); a gradient's
  // is twice its forward's. 0 for other categories.
  double flops_per_element;
  // Elementwise kinds taking any number of inputs (Sum, Mean, Min, Max):
  // their FLOPs are (inputs - 1) per output element.
  bool variadic;
};

const OpKindTraits& Traits(OpKind k);

// One hash lookup; kOpaque for a name braid does not know (and for "").
OpKind OpKindFromName(std::string_view name);
// The op type string of `k` (byte-identical to what the text format, ONNX
// and the profile store use); "" for kOpaque.
inline std::string_view OpKindName(OpKind k) { return Traits(k).name; }

inline OpCategory CategoryOf(OpKind k) { return Traits(k).category; }
// Its shapes and costs are modelled (category other than kOpaque).
// True when `k` is one of `kinds`: for the short lists of kinds that one
// rule of an importer, a builder or a checker applies to.
inline bool IsOneOf(OpKind k, std::initializer_list<OpKind> kinds) {
  for (OpKind x : kinds) {
    if (x == k) return true;
  }
  return false;
}
inline bool IsKnownOpKind(OpKind k) { return Traits(k).category != OpCategory::kOpaque; }
inline bool IsLibraryKind(OpKind k) { return Traits(k).library; }
inline bool IsElementwiseKind(OpKind k) { return Traits(k).elementwise; }
inline bool IsCollectiveKind(OpKind k) { return Traits(k).category == OpCategory::kCollective; }
inline OpKind GradOf(OpKind k) { return Traits(k).grad_of; }
inline bool IsGradientKind(OpKind k) { return Traits(k).grad_of != OpKind::kOpaque; }
// The "<Forward>Grad" kind of a forward kind (kRelu -> kReluGrad), kOpaque
// when there is none (MatMul, Conv: their gradients are MatMul and
// ConvGradData/ConvGradFilter).
OpKind GradientKindOf(OpKind forward);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_OP_KIND_H_
