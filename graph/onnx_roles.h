// Decides which graph inputs and initializers of an imported ONNX model are
// trainable parameters, constants or per-iteration inputs.
//
// torch.onnx.export(export_params=False) turns every weight into a graph input,
// and export_params=True turns them into initializers next to non-trainable
// buffers, so names and storage say little. Roles are inferred from use:
//  - the weight operand of Conv/ConvTranspose/Gemm/MatMul, the W/R/B of
//    LSTM/GRU/RNN, the scale and bias of BatchNorm/LayerNorm/InstanceNorm/
//    GroupNorm, PRelu's slope and an embedding table read by Gather with
//    integer indices are parameters;
//  - BatchNormalization's running mean and variance are constants;
//  - the data operand of those ops (and Gather indices) is an input;
//  - a float source with none of these uses (a decomposed LayerNorm's scale, a
//    ViT class token or position embedding) is a parameter when it, or a
//    reshaped/expanded copy of it, is combined by Add/Sub/Mul/Div/Concat/Where
//    with a value computed from the model's data inputs. Otherwise initializers
//    are constants and graph inputs are inputs.
//
//   RoleEvidence ev;
//   ev.AddSource(w, /*initializer=*/false);
//   ev.RecordUse(w, "Conv", 1, /*indices_are_integer=*/false);
//   ev.AssignRoles(g);  // g.tensor(w).role == TensorRole::kParameter
#ifndef BRAID_GRAPH_ONNX_ROLES_H_
#define BRAID_GRAPH_ONNX_ROLES_H_

#include <map>
#include <set>
#include <string_view>

#include "graph/graph.h"

namespace braid::graph {

// What one use of a source says about it.
enum class SourceUse : uint8_t { kNone, kWeight, kConstant, kData };

// The use of input `slot` of an ONNX op of kind `kind`. `indices_are_integer`
// matters for Gather only: whether the op's indices have an integer type.
SourceUse UseOfInput(OpKind kind, int slot, bool indices_are_integer);

class RoleEvidence {
 public:
  // Registers a tensor that has no producer: a graph input or an initializer.
  void AddSource(TensorId t, bool initializer);
  // Records that input `slot` (ONNX numbering) of an op of `type` reads `t`.
  // Uses of any tensor count: a source's evidence includes the uses of the
  // copies transparent ops (Transpose, Reshape, Cast, ...) make of it.
  void RecordUse(TensorId t, std::string_view type, int slot, bool indices_are_integer);
  // Sets the role of every registered source of `g`.
  void AssignRoles(Graph& g) const;

 private:
  struct Source {
    bool initializer = false;
    bool weight = false;
    bool constant = false;
    bool data = false;
  };
  std::map<TensorId, Source> sources_;
  std::map<TensorId, std::set<SourceUse>> uses_;
};

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ONNX_ROLES_H_
