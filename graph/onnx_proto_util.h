// Conversions between ONNX protos and braid values, for the ONNX importer.
//
// Internal to braid_graph: it includes ONNX headers, which only the graph
// library (linking onnx and onnx_proto privately) can see.
//
//   std::optional<ConstValue> v = DecodeTensor(initializer);  // int64/float data
//   Attrs attrs = ConvertAttrs(node);  // ints, floats, strings and their lists
#ifndef BRAID_GRAPH_ONNX_PROTO_UTIL_H_
#define BRAID_GRAPH_ONNX_PROTO_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/onnx_fold.h"
#include "onnx/onnx_pb.h"

namespace braid::graph {

// "FLOAT", "INT64", ... or "#N" for a number outside the enum.
std::string ElemTypeName(int32_t elem_type);

// braid's dtype for an ONNX element type (uint32/uint64 map to i32/i64);
// InvalidArgument naming `tensor` for strings, complex numbers, int16, ...
absl::StatusOr<DType> ToDType(int32_t elem_type, const std::string& tensor);

// The data of an ONNX tensor (raw_data or typed fields, fp16/bf16 widened);
// std::nullopt for external data, strings, or a payload that does not match
// the dims.
std::optional<ConstValue> DecodeTensor(const onnx::TensorProto& t);

// The ONNX encoding of a ConstValue (fp16/bf16 values are written as float).
onnx::TensorProto EncodeTensor(const ConstValue& v);

// True, with the element type and dims, when `type` is a tensor type whose
// every dim is a known value.
bool StaticTensorType(const onnx::TypeProto& type, int32_t* elem_type,
                      std::vector<int64_t>* dims);

// Attribute-like constant inputs: the attribute name a known constant in input
// `slot` of an op of `type` becomes (Reshape's "shape", Slice's "starts", ...),
// or nullptr when that input stays a tensor edge.
const char* AttrNameForInput(const std::string& type, int slot);

// A rank-0 constant becomes a scalar attribute, others an int or float list.
AttrValue ConstToAttr(const ConstValue& v);

// Copies INT, FLOAT, STRING, INTS and FLOATS attributes, and single-element
// TENSOR attributes as scalars; graphs and other kinds are not modelled.
Attrs ConvertAttrs(const onnx::NodeProto& node);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ONNX_PROTO_UTIL_H_
