// GraphBuilder: builds forward graphs layer by layer with shape inference.
//
// The model zoo (graph/zoo.h) and tests build their graphs with it instead of
// spelling out every tensor shape. Ops get ONNX op types and ONNX attribute
// names (Conv: kernel_shape, strides, pads as begins-then-ends, dilations,
// group; Gemm: transA, transB; Softmax/Concat/Gather: axis; LSTM: hidden_size,
// direction), so zoo graphs look like imported ONNX graphs to every later pass.
// Because the IR stores no tensor values, ops whose ONNX form takes a shape as a
// constant input tensor (Reshape, Expand) carry it as the attribute "shape"
// instead, and ReduceSum carries "axes" as an attribute (as before opset 13).
//
// Names are generated and unique: an op is named <scope>.<base><n> with a
// per-(scope, base) counter ("layer1.0.conv1"), its parameters <op>.weight,
// <op>.bias, ... The builder keeps the first error (like XLA's XlaBuilder):
// after a shape error every later call returns kNoId and Build() returns the
// error, so model code need not check each call.
//
//   GraphBuilder b("tiny_cnn");
//   TensorId x = b.Input("image", {8, 3, 32, 32});
//   TensorId y = b.Relu(b.BatchNorm(b.Conv(x, 16, /*kernel=*/3, /*stride=*/1,
//                                          /*pad=*/1, /*group=*/1, /*bias=*/false)));
//   y = b.Linear(b.Flatten(b.GlobalAveragePool(y)), 10);
//   b.MarkOutput(y);
//   absl::StatusOr<Graph> g = std::move(b).Build();  // costs annotated, validated
#ifndef BRAID_GRAPH_BUILDER_H_
#define BRAID_GRAPH_BUILDER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph {

// An N-d convolution (N = kernel_shape.size()) in ONNX terms.
struct ConvSpec {
  int64_t out_channels = 0;
  std::vector<int64_t> kernel_shape;  // spatial kernel, e.g. {3, 3} or {1, 7}
  std::vector<int64_t> strides;       // empty: all 1
  std::vector<int64_t> pads;          // begins then ends (2N values); empty: all 0
  std::vector<int64_t> dilations;     // empty: all 1
  int64_t group = 1;
  bool bias = true;  // torchvision convs followed by BatchNorm have none
};

// A windowed pooling (MaxPool / AveragePool), floor mode as in torchvision.
struct PoolSpec {
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;  // empty: all 1
  std::vector<int64_t> pads;     // begins then ends; empty: all 0
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string model_name, DType dtype = DType::kF32);
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  // Prefixes the names of everything created while it lives with `prefix.`;
  // scopes nest ("encoder" then "layer3" gives "encoder.layer3.").
  class Scope {
   public:
    Scope(GraphBuilder* b, std::string_view prefix);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GraphBuilder* b_;
  };
  [[nodiscard]] Scope NameScope(std::string_view prefix) { return Scope(this, prefix); }

  // Sources. Names are taken as given (scope-prefixed); reusing one is an error.
  TensorId Input(std::string_view name, std::vector<int64_t> shape);
  TensorId Input(std::string_view name, std::vector<int64_t> shape, DType dtype);
  TensorId Param(std::string_view name, std::vector<int64_t> shape);     // kParameter
  TensorId Constant(std::string_view name, std::vector<int64_t> shape);  // kConstant
  TensorId Constant(std::string_view name, std::vector<int64_t> shape, DType dtype);
  // A constant with its elements (row-major). The value is kept when the tensor
  // has at most Tensor::kMaxKeptConstantElements elements; a larger one keeps
  // only its shape, and a runtime draws a stand-in for it.
  TensorId Constant(std::string_view name, std::vector<int64_t> shape, DType dtype,
                    std::vector<double> value);

  // Convolutions and pooling over [N, C, spatial...] tensors.
  TensorId Conv(TensorId x, const ConvSpec& spec);
  // Square kernel, same stride and pad on every spatial side.
  TensorId Conv(TensorId x, int64_t out_channels, int64_t kernel, int64_t stride = 1,
                int64_t pad = 0, int64_t group = 1, bool bias = true);
  // BatchNormalization: scale and bias are parameters, the running mean and
  // variance kConstant tensors (they are not trained by gradients).
  TensorId BatchNorm(TensorId x, double epsilon = 1e-5);
  TensorId MaxPool(TensorId x, const PoolSpec& spec);
  TensorId MaxPool(TensorId x, int64_t kernel, int64_t stride, int64_t pad = 0);
  TensorId AveragePool(TensorId x, const PoolSpec& spec);
  TensorId AveragePool(TensorId x, int64_t kernel, int64_t stride, int64_t pad = 0);
  TensorId GlobalAveragePool(TensorId x);  // [N, C, ...] -> [N, C, 1, ...]

  // Pointwise ops. Binary ops broadcast numpy-style (ONNX multidirectional).
  TensorId Relu(TensorId x);
  TensorId Gelu(TensorId x);
  TensorId Sigmoid(TensorId x);
  TensorId Tanh(TensorId x);
  // Training-mode Dropout (training_mode=1): one output, its mask drawn again
  // in backward.
  TensorId Dropout(TensorId x, double ratio);
  TensorId Add(TensorId a, TensorId b);
  TensorId Sub(TensorId a, TensorId b);
  TensorId Mul(TensorId a, TensorId b);
  TensorId Div(TensorId a, TensorId b);
  // Mul by a scalar kConstant holding `factor` (attention's 1/sqrt(d_head)).
  TensorId Scale(TensorId x, double factor);

  // Matrix products. MatMul follows numpy matmul (1-D promotion, broadcast
  // batch dims); Gemm takes 2-D A, B and an optional C (kNoId) broadcast to
  // [M, N].
  TensorId MatMul(TensorId a, TensorId b);
  TensorId Gemm(TensorId a, TensorId b, TensorId c, bool trans_a = false, bool trans_b = false);
  // nn.Linear as PyTorch exports it: Gemm(x, W[out,in], b, transB=1) for a
  // 2-D x, MatMul(x, W[in,out]) + Add(b) otherwise.
  TensorId Linear(TensorId x, int64_t out_features, bool bias = true);

  // Data movement.
  TensorId Flatten(TensorId x, int64_t axis = 1);
  // One dim may be -1 (inferred); 0 copies the input dim (ONNX semantics).
  TensorId Reshape(TensorId x, std::vector<int64_t> shape);
  TensorId Transpose(TensorId x, std::vector<int64_t> perm);
  TensorId Concat(const std::vector<TensorId>& xs, int64_t axis);
  TensorId Expand(TensorId x, std::vector<int64_t> shape);  // bidirectional broadcast
  TensorId ReduceSum(TensorId x, std::vector<int64_t> axes, bool keepdims);
  TensorId ReduceMean(TensorId x, std::vector<int64_t> axes, bool keepdims);

  // Normalisation and softmax.
  TensorId Softmax(TensorId x, int64_t axis = -1);
  // LayerNormalization over the last dim; scale and bias are parameters.
  TensorId LayerNorm(TensorId x, double epsilon = 1e-5);

  // Gather(data, indices, axis); indices must be i64 or i32.
  TensorId Gather(TensorId data, TensorId indices, int64_t axis = 0);
  // Embedding lookup: a parameter table [vocab, dim] gathered by `indices`.
  // The table is returned through `table` when non-null (for weight tying).
  TensorId Embedding(TensorId indices, int64_t vocab, int64_t dim, TensorId* table = nullptr);
  // A single-direction ONNX LSTM over x [seq, batch, in] with W [1,4H,in],
  // R [1,4H,H], B [1,8H] (PyTorch's b_ih and b_hh); returns Y [seq,1,batch,H].
  TensorId LSTM(TensorId x, int64_t hidden_size);

  // Generic op with explicitly given output shapes (for op types the builder
  // has no shape rule for). Returns the output ids.
  std::vector<TensorId> Custom(std::string_view base, std::string_view type,
                               std::vector<TensorId> inputs,
                               std::vector<std::vector<int64_t>> output_shapes, Attrs attrs = {});

  // Inspection.
  const std::vector<int64_t>& Shape(TensorId t) const;
  const Graph& graph() const { return g_; }
  const absl::Status& status() const { return status_; }

  void MarkOutput(TensorId t);

  // Annotates costs (graph/ops.h AnnotateCosts), validates, and returns the
  // graph; the first recorded error instead, if any. Needs at least one output.
  absl::StatusOr<Graph> Build() &&;

 private:
  // "<scope>.<base><n>" with a fresh n for that prefix.
  std::string NewOpName(std::string_view base);
  // Scope-prefixed `name`; records an error when it was used already.
  std::string ClaimName(std::string_view name);
  TensorId AddSource(std::string_view name, std::vector<int64_t> shape, DType dtype,
                     TensorRole role);
  TensorId NewParam(const std::string& op_name, std::string_view suffix, std::vector<int64_t> shape,
                    TensorRole role = TensorRole::kParameter);
  // Adds an op with one activation output named after the op.
  TensorId Emit(const std::string& op_name, std::string_view type, std::vector<TensorId> inputs,
                std::vector<int64_t> out_shape, Attrs attrs = {}, DType out_dtype = DType::kF32);
  // False (and kNoId to return) when an earlier error is pending or an id is
  // bad; a bad id with no pending error is a programmer bug (CHECK).
  bool Ok(std::initializer_list<TensorId> ids) const;
  TensorId Fail(absl::Status s);
  TensorId Unary(std::string_view base, std::string_view type, TensorId x, Attrs attrs = {});
  TensorId Binary(std::string_view base, std::string_view type, TensorId a, TensorId b);
  TensorId Pool(std::string_view base, OpKind kind, TensorId x, const PoolSpec& spec);
  TensorId Reduce(std::string_view base, std::string_view type, TensorId x,
                  std::vector<int64_t> axes, bool keepdims);

  Graph g_;
  DType dtype_;
  absl::Status status_;
  std::vector<std::string> scopes_;
  std::map<std::string, int, std::less<>> counters_;
  std::set<std::string, std::less<>> used_names_;
};

// Shape rules the builder uses, exposed for the ONNX importer and tests.
// Each returns InvalidArgument naming `what` (an op name) on a mismatch.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b,
                                                     std::string_view what);
absl::StatusOr<std::vector<int64_t>> MatMulShape(const std::vector<int64_t>& a,
                                                 const std::vector<int64_t>& b,
                                                 std::string_view what);
// Output shape of a Conv (weight_out_channels = spec.out_channels) or, with
// `out_channels` < 0, of a pooling that keeps the channel count.
absl::StatusOr<std::vector<int64_t>> WindowedShape(
    const std::vector<int64_t>& x, int64_t out_channels, const std::vector<int64_t>& kernel,
    const std::vector<int64_t>& strides, const std::vector<int64_t>& pads,
    const std::vector<int64_t>& dilations, std::string_view what);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_BUILDER_H_
