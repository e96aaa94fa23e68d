// Compile-time evaluation of small ONNX subgraphs for the ONNX importer.
//
// Exporters such as torch.onnx emit shape arithmetic (Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape) and constant masks that are fully known at
// import time. The importer evaluates those nodes on ConstValues instead of
// turning them into braid ops. Values are held as int64 (integral and bool
// element types) or double (floating types); element types use the ONNX
// TensorProto::DataType numbering so no ONNX header is needed here.
//
//   ConstValue shape = ConstValue::Ints({4}, {2, 3, 4, 5});
//   ConstValue axis = ConstValue::Scalar(kOnnxInt64, 1);
//   absl::StatusOr<std::optional<ConstValue>> d =
//       FoldOp("Gather", {}, 13, {&shape, &axis}, kDefaultMaxFoldElements);
//   // d->value().ints == {3}, d->value().dims == {}
#ifndef BRAID_GRAPH_ONNX_FOLD_H_
#define BRAID_GRAPH_ONNX_FOLD_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph {

// ONNX TensorProto::DataType values used by the folder.
inline constexpr int32_t kOnnxFloat = 1;
inline constexpr int32_t kOnnxUint8 = 2;
inline constexpr int32_t kOnnxInt8 = 3;
inline constexpr int32_t kOnnxUint16 = 4;
inline constexpr int32_t kOnnxInt16 = 5;
inline constexpr int32_t kOnnxInt32 = 6;
inline constexpr int32_t kOnnxInt64 = 7;
inline constexpr int32_t kOnnxBool = 9;
inline constexpr int32_t kOnnxFloat16 = 10;
inline constexpr int32_t kOnnxDouble = 11;
inline constexpr int32_t kOnnxUint32 = 12;
inline constexpr int32_t kOnnxUint64 = 13;
inline constexpr int32_t kOnnxBFloat16 = 16;

// Results larger than this are not folded: they stay ops of the graph.
inline constexpr int64_t kDefaultMaxFoldElements = int64_t{1} << 16;

bool IsOnnxFloatType(int32_t elem_type);
// True for the element types a ConstValue can hold (ints, bools, floats).
bool IsOnnxFoldableType(int32_t elem_type);

// A tensor value known at import time.
struct ConstValue {
  int32_t elem_type = kOnnxInt64;
  std::vector<int64_t> dims;
  std::vector<int64_t> ints;   // when !IsFloat()
  std::vector<double> floats;  // when IsFloat()

  static ConstValue Ints(std::vector<int64_t> dims, std::vector<int64_t> values,
                         int32_t elem_type = kOnnxInt64);
  static ConstValue Floats(std::vector<int64_t> dims, std::vector<double> values,
                           int32_t elem_type = kOnnxFloat);
  static ConstValue Scalar(int32_t elem_type, double value);

  bool IsFloat() const { return IsOnnxFloatType(elem_type); }
  int64_t NumElements() const;
  double AsDouble(int64_t i) const { return IsFloat() ? floats[i] : static_cast<double>(ints[i]); }
  int64_t AsInt(int64_t i) const {
    return IsFloat() ? static_cast<int64_t>(floats[i]) : ints[i];
  }
  // All elements as int64 (floats truncated).
  std::vector<int64_t> ToInts() const;
};

// Op types FoldOp can evaluate (Shape, Size, Constant and ConstantOfShape are
// handled by the importer, which has their shapes and tensor attributes).
bool IsFoldableOpType(std::string_view type);

// Evaluates one single-output node of the default ONNX domain whose inputs are
// all known. `inputs` has one entry per node input; nullptr marks an omitted
// optional input. Returns std::nullopt when the node cannot be folded (type not
// foldable, unsupported element type, result over `max_elements`), and
// InvalidArgument when the inputs contradict the op (bad axis, bad shape).
absl::StatusOr<std::optional<ConstValue>> FoldOp(std::string_view type, const Attrs& attrs,
                                                 int opset,
                                                 const std::vector<const ConstValue*>& inputs,
                                                 int64_t max_elements);

// A tensor of `dims` filled with `value`'s single element (ConstantOfShape).
absl::StatusOr<std::optional<ConstValue>> FillConst(const std::vector<int64_t>& dims,
                                                    const ConstValue& value,
                                                    int64_t max_elements);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ONNX_FOLD_H_
