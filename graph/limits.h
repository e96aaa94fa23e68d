// The bounds every model braid accepts stays within, and the checks that
// enforce them at the import boundary (ONNX, text format, zoo, the graph
// builder) before any shape inference, cost annotation or arithmetic runs on
// the model. A model outside them is refused with InvalidArgument naming the
// node, tensor or attribute, so nothing downstream (ONNX shape inference,
// the cost model, the simulator's integer ticks) ever sees a zero stride, a
// dimension of 2^62 or a name that is not UTF-8.
//
//   RETURN_IF_ERROR(CheckDims(dims, "graph input 'x'"));
//   RETURN_IF_ERROR(CheckOpAttrs("Conv", attrs, /*input_shapes=*/nullptr, "node 'conv1'"));
#ifndef BRAID_GRAPH_LIMITS_H_
#define BRAID_GRAPH_LIMITS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace braid::graph {

// Largest size of one dimension: 2^32 (any real tensor dim, vocabulary or
// sequence length is far below; 2^62 is the mark of a malformed model).
inline constexpr int64_t kMaxDim = int64_t{1} << 32;
// Largest element count of one tensor: 2^40 (4 TiB of f32, beyond any single
// device's memory), computed with overflow checks.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;
// Largest op, tensor or graph name in bytes.
inline constexpr size_t kMaxNameBytes = 4096;

// OK when every dim is in [0, kMaxDim] and the product is at most
// kMaxTensorElements; otherwise InvalidArgument "<what>: ...".
absl::Status CheckDims(const std::vector<int64_t>& dims, std::string_view what);

// Checks an op's attributes as ONNX defines them, before anything divides by
// or allocates from them: convolution and pooling strides, dilations, kernel
// sizes and groups positive, pads non-negative and at most kMaxDim, every
// integer attribute at most kMaxDim in magnitude. With `input_shapes` (the
// op's input shapes, in order) it also checks axes against the rank,
// Transpose perms, and Split sizes against the split dimension. The error is
// InvalidArgument "<label>: attribute '<name>' ...".
absl::Status CheckOpAttrs(std::string_view type, const Attrs& attrs,
                          const std::vector<std::vector<int64_t>>* input_shapes,
                          std::string_view label);
// The same for an op of kind `kind` (the type names the kind once).
absl::Status CheckOpAttrs(OpKind kind, const Attrs& attrs,
                          const std::vector<std::vector<int64_t>>* input_shapes,
                          std::string_view label);

// Whole-graph bounds: names valid UTF-8 (and at most kMaxNameBytes), every
// tensor within CheckDims, every forward op's attributes within CheckOpAttrs
// against its input shapes, and every cost annotation finite. Graph::Validate
// calls it.
absl::Status CheckGraphLimits(const Graph& g);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_LIMITS_H_
