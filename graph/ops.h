// Op semantics shared by every layer: what kind of computation an op type is,
// whether a compiler may fuse it, and how to cost it from its tensor shapes.
//
// Op type vocabulary (graph/op_kind.h lists every kind, with its category):
//  - Forward ops use ONNX names: Conv, MatMul, Gemm, Relu, Add, BatchNormalization,
//    LayerNormalization, Softmax, MaxPool, GlobalAveragePool, LSTM, Gather, ...
//  - Backward ops are named after the forward op they differentiate:
//    ConvGradData, ConvGradFilter, <Elementwise>Grad (ReluGrad, GeluGrad, ...),
//    BatchNormalizationGrad, LayerNormalizationGrad, SoftmaxGrad, MaxPoolGrad,
//    AveragePoolGrad, LSTMGrad, GatherGrad (embedding scatter-add), ...;
//    MatMul/Gemm backward are plain MatMul ops with transA/transB attributes.
//  - Communication: AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll,
//    Send, Recv (attribute "group_size").
//  - Update: SgdMomentumUpdate, AdamUpdate.
//
// Cost conventions (AnnotateCost). bytes_read is the sum of the bytes of the
// op's distinct input tensors, bytes_written the sum of its output bytes; pure
// views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) still report theirs.
//  - MatMul: 2*K per output element (so 2*M*K*N times the batch); K is the
//    contracted dim of A, honouring transA. Gemm: 2*M*K*N, plus M*N with C.
//  - Conv: 2*N*Cout*Hout*Wout*(Cin/group)*kh*kw, plus N*Cout*Hout*Wout with a
//    bias. ConvTranspose: 2*N*Cin*Hin*Win*(Cout/group)*kh*kw (+ bias).
//    ConvGradData(dY, W) and ConvGradFilter(X, dY) each cost the forward
//    conv without bias; likewise ConvTransposeGradData/ConvTransposeGradFilter.
//  - Elementwise: FLOPs per output element: 1 for arithmetic, comparisons,
//    casts, selects, Relu-like and Sqrt/Reciprocal; kTranscendentalFlops (4)
//    for Exp, Log, Tanh, Sigmoid, Erf, Softplus, Pow, trig, Elu/Selu/Celu;
//    8 for Gelu and Mish (two transcendental evaluations); HardSigmoid 3,
//    HardSwish 4, Softsign 3. Variadic Sum/Mean/Min/Max: n-1 per element.
//    <Elementwise>Grad ops (and DivGrad, PowGrad, MaxGrad, WhereGrad, ...):
//    twice the forward constant per output element.
//  - Normalization (BatchNormalization, LayerNormalization,
//    InstanceNormalization, GroupNormalization): 5 per input element
//    (statistics, normalize, scale, shift); their Grad ops 10 per element.
//  - Softmax/LogSoftmax: 8 per element (max, subtract, exp, sum, divide);
//    SoftmaxGrad 4, LogSoftmaxGrad 7 per element.
//  - MaxPool/AveragePool/LpPool and their Grad ops: prod(kernel_shape) per
//    pooled (dY) element. Global pooling: 1 per input element; its Grad 1 per
//    dX element.
//  - Reductions (ReduceSum/Mean/Max/..., ArgMax, CumSum): 1 per input
//    element. ReduceSumGrad is a broadcast (0); ReduceMeanGrad and
//    ReduceMaxGrad 1 per output element. TileGrad 1 per dY element.
//  - Gather family and data movement: 0 FLOPs. GatherGrad,
//    GatherElementsGrad, GatherNDGrad (scatter-add): 1 per dY element.
//  - LSTM: per step and batch row and direction 2*(input+H)*4H (the two gate
//    matmuls) + 32H pointwise (bias adds 8H, three sigmoids and two tanh at 4
//    each 20H, cell update 3H, output 1H). GRU: 2*(input+H)*3H + 23H.
//    RNN: 2*(input+H)*H + 6H. LSTMGrad/GRUGrad/RNNGrad: twice the forward
//    (their inputs start with the forward X, W, R).
//  - Einsum: prod(all index sizes) * (inputs-1 + 1 if an index is summed).
//  - SoftmaxCrossEntropyLoss: 8 per score element; its Grad 6 (from
//    log-probabilities). NegativeLogLikelihoodLoss: 1 per target element; its
//    Grad 1 per score element.
//  - Collectives, control flow, opaque ops: 0 FLOPs (collectives are timed by
//    the comm model). SgdMomentumUpdate 4 per parameter element, AdamUpdate 12.
//
//   OpCategory c = CategoryOf(op.kind);
//   if (IsFusible(g, id)) ...;
//   AnnotateCosts(g);  // fills flops / bytes_read / bytes_written of every op
#ifndef BRAID_GRAPH_OPS_H_
#define BRAID_GRAPH_OPS_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "graph/graph.h"

namespace braid::graph {

// Category of an op type name; kOpaque for a type braid does not know. Code
// holding an Op asks CategoryOf(op.kind) (graph/op_kind.h) instead.
OpCategory CategoryOf(std::string_view type);

// True when braid knows the op type (its shapes and costs are modelled).
bool IsKnownOpType(std::string_view type);

// True when a compiler may fuse this op with a neighbour (XLA's notion: every
// category except collectives, optimizer updates, control flow, opaque ops and
// recurrent cells; an op with `opaque` set is never fusible).
// Parameters and inputs are tensors, not ops, so are never fused.
bool IsFusible(const Op& op);

// Cheap ops whose fusion XLA treats as free (elementwise, data movement,
// reductions): the producers XLA's instruction fusion pulls into consumers.
bool IsElementwiseLike(const Op& op);

// Fills op.flops, op.bytes_read and op.bytes_written from the shapes of its
// tensors. Unknown/opaque types get 0 FLOPs and their tensor bytes.
void AnnotateCost(Graph& g, OpId id);
void AnnotateCosts(Graph& g);

// Output shape of an ONNX Einsum equation ("bij,bjk->bik", "...ij,...jk",
// implicit output allowed) over the given input shapes. InvalidArgument when
// the equation is malformed or does not match the shapes.
absl::StatusOr<std::vector<int64_t>> EinsumOutputShape(
    std::string_view equation, const std::vector<std::vector<int64_t>>& input_shapes);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_OPS_H_
