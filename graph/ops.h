// Op semantics shared by every layer: what kind of computation an op type is,
// whether a compiler may fuse it, and how to cost it from its tensor shapes.
//
// Op type vocabulary:
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
//   OpCategory c = CategoryOf(op.type);
//   if (IsFusible(g, id)) ...;
//   AnnotateCosts(g);  // fills flops / bytes_read / bytes_written of every op
#ifndef BRAID_GRAPH_OPS_H_
#define BRAID_GRAPH_OPS_H_

#include <string_view>

#include "graph/graph.h"

namespace braid::graph {

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

std::string_view CategoryName(OpCategory c);

// Category of an op type; kOpaque for a type braid does not know.
OpCategory CategoryOf(std::string_view type);

// True when braid knows the op type (its shapes and costs are modelled).
bool IsKnownOpType(std::string_view type);

// True when a compiler may fuse this op with a neighbour (XLA's notion: every
// category except collectives, control flow, opaque ops and recurrent cells).
// Parameters and inputs are tensors, not ops, so are never fused.
bool IsFusible(const Op& op);

// Cheap ops whose fusion XLA treats as free (elementwise, data movement,
// reductions): the producers XLA's instruction fusion pulls into consumers.
bool IsElementwiseLike(const Op& op);

// Fills op.flops, op.bytes_read and op.bytes_written from the shapes of its
// tensors. Unknown/opaque types get 0 FLOPs and their tensor bytes.
void AnnotateCost(Graph& g, OpId id);
void AnnotateCosts(Graph& g);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_OPS_H_
