// Private to the training-graph builder (graph/training.cc and
// graph/training_rules.cc): the builder class and its shape helpers. Not part
// of braid::graph's interface; include graph/training.h instead.
//
//   internal::TrainingBuilder builder(forward, options);
//   absl::StatusOr<Graph> train = builder.Build();
#ifndef BRAID_GRAPH_INTERNAL_TRAINING_BUILDER_H_
#define BRAID_GRAPH_INTERNAL_TRAINING_BUILDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/training.h"

namespace braid::graph::internal {

bool IsFloat(DType d);
int64_t OnnxDTypeCode(DType d);  // TensorProto.DataType, for Cast's "to"
// Numpy broadcast of two shapes; InvalidArgument naming `what` on a mismatch.
absl::StatusOr<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b,
                                               std::string_view what);
// Shape of op(A) @ op(B) where op transposes the last two dims when asked.
absl::StatusOr<std::vector<int64_t>> TransMatMulShape(std::vector<int64_t> a,
                                                      std::vector<int64_t> b, bool ta, bool tb,
                                                      std::string_view what);
int64_t Product(const std::vector<int64_t>& v, size_t from, size_t to);
// Input slots that gradients flow through (before the float-dtype filter).
bool IsDifferentiableSlot(const Op& op, size_t slot);

// The result of a gradient computation: a tensor and whether the caller owns it
// (may rename it into a parameter gradient) or shares it with other uses.
struct Grad {
  TensorId id = kNoId;
  bool owned = false;
};

// Builds one training graph; single use. Build() runs the driver
// (graph/training.cc), which calls one rule per forward op type
// (graph/training_rules.cc).
class TrainingBuilder {
 public:
  TrainingBuilder(const Graph& forward, const TrainingOptions& options)
      : fwd_(forward), opts_(options), g_(forward.name()) {}

  absl::StatusOr<Graph> Build();

 private:
  using Rule = absl::Status (TrainingBuilder::*)(const Op&);

  void CopyForward();
  absl::StatusOr<TensorId> AttachLoss();
  absl::StatusOr<TensorId> AttachLossTo(TensorId out, const std::string& base);
  void Analyze(const std::vector<OpId>& order, TensorId loss);
  absl::Status ReserveNames();
  absl::Status BackwardOp(OpId id);
  void EmitUpdates();

  // Naming and emission.
  std::string UniqueName(std::set<std::string, std::less<>>& used, std::string base);
  TensorId NewTensor(const std::string& base, std::vector<int64_t> shape, DType dtype,
                     TensorRole role = TensorRole::kActivation);
  TensorId Like(const std::string& base, TensorId like);
  TensorId Emit1(const std::string& op_base, std::string type, std::vector<TensorId> inputs,
                 TensorId output, Attrs attrs = {});

  // Gradient bookkeeping.
  bool Needs(const Op& op, size_t slot) const;
  Grad OutGrad(const Op& op, size_t i) const;
  void Contribute(const Op& op, TensorId t, Grad g);
  void Finalize(const Op& op, TensorId p);
  absl::StatusOr<Grad> ToShape(const std::string& base, Grad g, TensorId target);
  absl::Status ContributeToShape(const Op& op, size_t slot, Grad g, const std::string& base);

  // Rules, one per op family.
  absl::Status PassThroughRule(const Op& op);
  absl::Status CollectiveRule(const Op& op);
  absl::Status SubRule(const Op& op);
  absl::Status MulRule(const Op& op);
  absl::Status DivRule(const Op& op);
  absl::Status BinaryGradOpRule(const Op& op);
  absl::Status UnaryGradRule(const Op& op);
  absl::Status NegRule(const Op& op);
  absl::Status CastRule(const Op& op);
  absl::Status DropoutRule(const Op& op);
  absl::Status MultiGradRule(const Op& op);
  absl::Status PoolRule(const Op& op);
  absl::Status ReduceRule(const Op& op);
  absl::Status ReshapeRule(const Op& op);
  absl::Status TransposeRule(const Op& op);
  absl::Status ExpandRule(const Op& op);
  absl::Status TileRule(const Op& op);
  absl::Status ConcatRule(const Op& op);
  absl::Status SplitRule(const Op& op);
  absl::Status SliceRule(const Op& op);
  absl::Status PadRule(const Op& op);
  absl::Status GatherRule(const Op& op);
  absl::Status TriluRule(const Op& op);
  absl::StatusOr<TensorId> EmitMatMul(const Op& op, const std::string& base, TensorId l, TensorId r,
                                      bool tl, bool tr, DType dtype);
  absl::Status MatMulRule(const Op& op);
  absl::Status ConvRule(const Op& op);
  absl::Status EinsumRule(const Op& op);
  absl::Status RecurrentRule(const Op& op);
  absl::Status LossRule(const Op& op);
  static const std::map<OpKind, Rule>& Rules();

  const Graph& fwd_;
  const TrainingOptions& opts_;
  Graph g_;
  std::set<std::string, std::less<>> tensor_names_;
  std::set<std::string, std::less<>> op_names_;
  std::vector<bool> needs_;     // per tensor: depends on a parameter
  std::vector<bool> has_grad_;  // per tensor: the loss gradient reaches it
  std::vector<Grad> grad_;      // per tensor: accumulated gradient so far
  std::vector<int> expected_;   // per parameter: contributions to wait for
  std::vector<int> received_;
  std::vector<TensorId> grad_order_;  // parameters in gradient-production order
  std::map<TensorId, TensorId> reduced_;
};

}  // namespace braid::graph::internal

#endif  // BRAID_GRAPH_INTERNAL_TRAINING_BUILDER_H_
