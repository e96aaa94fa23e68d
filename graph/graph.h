// braid's in-memory graph IR.
//
// A Graph is a dataflow graph of Ops over Tensors. It represents a forward
// model (as imported from ONNX or built by the zoo) and the training graph
// derived from it (forward + backward + gradient AllReduce + optimizer update).
// Every op carries its cost annotations (FLOPs, bytes read and written) so the
// cost model never has to re-derive them.
//
// Ids are dense indices: op i is ops()[i], tensor t is tensors()[t]. Graphs are
// append-only while they are built; passes that rewrite a graph build a new
// one.
//
//   Graph g("mlp");
//   TensorId x = g.AddTensor("x", {32, 1024}, DType::kF32, TensorRole::kInput);
//   TensorId w = g.AddTensor("w", {1024, 256}, DType::kF32, TensorRole::kParameter);
//   TensorId y = g.AddTensor("y", {32, 256}, DType::kF32, TensorRole::kActivation);
//   g.AddOp("mm", "MatMul", {x, w}, {y});
//   absl::Status s = g.Validate();
#ifndef BRAID_GRAPH_GRAPH_H_
#define BRAID_GRAPH_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/op_kind.h"

namespace braid::graph {

using OpId = int32_t;
using TensorId = int32_t;
inline constexpr int32_t kNoId = -1;

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

// Bytes per element.
int64_t DTypeSize(DType d);
std::string_view DTypeName(DType d);  // "f32", "f16", ...
absl::StatusOr<DType> ParseDType(std::string_view name);

// What a tensor is for in a training iteration. The training-graph builder and
// the search rely on it: parameters are never fused, gradients are what
// AllReduce buckets partition, optimizer state counts towards memory.
enum class TensorRole : uint8_t {
  kInput,           // a graph input fed per iteration (data, labels)
  kParameter,       // a trainable weight
  kConstant,        // a compile-time constant that is not trained
  kActivation,      // an intermediate forward or backward value
  kGradient,        // the gradient of one parameter
  kOptimizerState,  // momentum, Adam moments
};
std::string_view RoleName(TensorRole r);  // "input", "parameter", ...
absl::StatusOr<TensorRole> ParseRole(std::string_view name);

// Which part of a training iteration an op belongs to.
enum class Phase : uint8_t { kForward, kBackward, kCommunication, kUpdate };
std::string_view PhaseName(Phase p);  // "forward", "backward", "comm", "update"
absl::StatusOr<Phase> ParsePhase(std::string_view name);

// Op attribute values: the ONNX attribute kinds braid needs.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>>;
using Attrs = std::map<std::string, AttrValue, std::less<>>;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // static shape; every dim >= 0
  DType dtype = DType::kF32;
  TensorRole role = TensorRole::kActivation;
  OpId producer = kNoId;        // kNoId for inputs, parameters, constants
  std::vector<OpId> consumers;  // in the order the consuming ops were added
  // For role == kGradient: the parameter this is the gradient of.
  TensorId grad_of = kNoId;
  // For a constant whose value the model states (an ONNX Constant node or a
  // folded constant of at most kMaxKeptConstantElements elements): its
  // elements in row-major order, integers exactly; empty when unknown.
  // Structure-only fingerprints leave it out; the text format keeps it.
  std::vector<double> value;
  static constexpr int64_t kMaxKeptConstantElements = 1 << 16;

  int64_t NumElements() const;
  int64_t Bytes() const { return NumElements() * DTypeSize(dtype); }
};

struct Op {
  std::string name;
  // The op type. Forward ops use ONNX op names ("Conv", "MatMul", "Relu", ...);
  // backward, communication and update ops use braid names documented in
  // graph/ops.h ("ConvGradData", "AllReduce", "SgdMomentumUpdate", ...).
  std::string type;
  // The kind Graph::AddOp looked `type` up as (graph/op_kind.h): what code
  // compares and takes traits from. kOpaque for a type braid does not know,
  // which keeps its name in `type`. Set only with `type`, by AddOp; Validate()
  // fails when the two disagree.
  OpKind kind = OpKind::kOpaque;
  Attrs attrs;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Phase phase = Phase::kForward;
  // Cost annotations, per execution on one rank.
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  // Opaque ops are ops the importer did not know: kept with inferred shapes,
  // costed by bytes only, never fused.
  bool opaque = false;

  // Attribute accessors returning `def` when absent or of another kind.
  int64_t GetInt(std::string_view key, int64_t def) const;
  double GetFloat(std::string_view key, double def) const;
  std::string GetString(std::string_view key, std::string_view def) const;
  std::vector<int64_t> GetInts(std::string_view key) const;
};

class Graph {
 public:
  explicit Graph(std::string name = "") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  TensorId AddTensor(std::string name, std::vector<int64_t> shape, DType dtype,
                     TensorRole role);
  // Adds an op; sets producer/consumers of the named tensors. Ids must exist
  // (checked with a CHECK: passing a bad id is a programmer bug). An output
  // tensor that already has a producer is an error surfaced by Validate().
  OpId AddOp(std::string name, std::string type, std::vector<TensorId> inputs,
             std::vector<TensorId> outputs, Attrs attrs = {},
             Phase phase = Phase::kForward);

  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Op& op(OpId id) const { return ops_[id]; }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  Op& mutable_op(OpId id) { return ops_[id]; }
  Tensor& mutable_tensor(TensorId id) { return tensors_[id]; }
  int num_ops() const { return static_cast<int>(ops_.size()); }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }

  // Graph outputs (loss, logits, ...). Order is preserved.
  const std::vector<TensorId>& outputs() const { return outputs_; }
  void AddOutput(TensorId t) { outputs_.push_back(t); }

  // Looks a tensor up by name (linear scan builds an index lazily).
  absl::StatusOr<TensorId> FindTensor(std::string_view name) const;

  // Ops whose outputs `op` consumes, deduplicated, ascending.
  std::vector<OpId> Predecessors(OpId op) const;
  // Ops consuming any output of `op`, deduplicated, ascending.
  std::vector<OpId> Successors(OpId op) const;

  // A topological order of the ops (Kahn's algorithm, ties broken by id so the
  // order is deterministic). Fails with InvalidArgument naming an op on a cycle.
  absl::StatusOr<std::vector<OpId>> TopologicalOrder() const;

  // Checks: acyclic; each tensor produced at most once; inputs, parameters and
  // constants have no producer; activations and gradients have one; shapes are
  // non-negative; gradients name a parameter of the same shape; names unique;
  // every op's kind is its type's. The error names the offending op or tensor.
  absl::Status Validate() const;

  // Sum over params of NumElements(), and totals of the annotations.
  int64_t NumParameters() const;
  double TotalFlops(Phase phase) const;

 private:
  std::string name_;
  std::vector<Op> ops_;
  std::vector<Tensor> tensors_;
  std::vector<TensorId> outputs_;
  mutable std::map<std::string, TensorId, std::less<>> name_index_;
};

std::string ShapeString(const std::vector<int64_t>& shape);  // "[32,1024]"

// Whether tensor `t`, written by a member of a group of ops (a fused
// kernel), must leave the group: some reader is outside it (`in_group(op)`
// false), it is a graph output, or nobody reads it (it is kept as the op's
// result). The one definition the roofline, fused signatures, fusion
// backends and fused executors share.
template <typename InGroup>
bool LeavesGroup(const Graph& g, TensorId t, const InGroup& in_group) {
  const Tensor& tensor = g.tensor(t);
  if (tensor.consumers.empty()) return true;
  for (TensorId o : g.outputs()) {
    if (o == t) return true;
  }
  for (OpId c : tensor.consumers) {
    if (!in_group(c)) return true;
  }
  return false;
}

}  // namespace braid::graph

#endif  // BRAID_GRAPH_GRAPH_H_
