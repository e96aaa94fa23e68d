// Graph rewrites that keep a model's math and give its tensors the dims a
// sharding needs. The ONNX importer applies them to every imported graph.
//
// Two patterns of exported attention (PyTorch's nn.MultiheadAttention, as in
// nn.TransformerEncoder and torchvision's ViT) hide the dims a head split
// shards:
//
//  - Equal Slices of one tensor along one axis (the packed q, k, v projection
//    sliced in three) become one Split, so a column split of the projection
//    can hold each rank's share of every slice (graph::LoadSpec::segments).
//  - A Reshape that merges part of one dim into another
//    ([S, B, E] -> [S, B*heads, dh]) puts the head index inside a merged dim,
//    where a head split is not one contiguous piece. The rewrite keeps the two
//    factors as separate dims ([S, B, heads, dh]) through the ops that treat
//    the merged dim as a batch dim (elementwise ops, Transpose, batched
//    MatMul, Softmax on another axis, Dropout) up to the Reshapes that merge
//    them back. Any other reader gets the merged shape through a new Reshape.
//
// Element order is unchanged everywhere (every tensor keeps its row-major
// elements), so a Dropout mask keyed by element index drops the same
// elements, and losses and gradients are those of the original graph.
//
//   ASSIGN_OR_RETURN(graph::Graph g2, graph::CanonicalizeForSharding(g));
#ifndef BRAID_GRAPH_CANONICALIZE_H_
#define BRAID_GRAPH_CANONICALIZE_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph {

// Applies both rewrites (forward graphs only: a graph with backward ops is
// returned unchanged). Op and tensor names are kept; added Reshapes are named
// "<tensor>.merged" and "<tensor>.split". Costs are re-annotated.
absl::StatusOr<Graph> CanonicalizeForSharding(const Graph& g);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_CANONICALIZE_H_
