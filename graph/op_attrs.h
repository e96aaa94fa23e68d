// Op attributes as ONNX defines them, resolved against the op's shapes: the
// pieces every backend (LibTorch on CPU, cuDNN on GPU) needs to run an op
// the way its graph says.
//
//   std::vector<int64_t> strides = IntsOr(op, "strides", 2, 1);
//   std::vector<int64_t> pads = ResolvePads(op, {56, 56}, {28, 28}, {3, 3}, strides, {1, 1});
//   std::vector<int64_t> axes = ReduceAxes(op, {2, 3, 4}, {2, 4});   // {1}
#ifndef BRAID_GRAPH_OP_ATTRS_H_
#define BRAID_GRAPH_OP_ATTRS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace braid::graph {

// An attribute list of `n` values, `def` each when absent or of another length.
std::vector<int64_t> IntsOr(const Op& op, std::string_view key, size_t n, int64_t def);

// Pads as (begin..., end...) per spatial dim: `pads`, or auto_pad
// SAME_UPPER/SAME_LOWER from the output size, or zeros (VALID, NOTSET).
std::vector<int64_t> ResolvePads(const Op& op, const std::vector<int64_t>& in_spatial,
                                 const std::vector<int64_t>& out_spatial,
                                 const std::vector<int64_t>& kernel,
                                 const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& dilations);

// Reduction axes of a Reduce* op (attribute `axes`, else inferred from the
// input and output shapes, keepdims or not; all axes for a one-element
// output), normalized >= 0.
std::vector<int64_t> ReduceAxes(const Op& op, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& out);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_OP_ATTRS_H_
