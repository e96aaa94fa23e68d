// A compact text format for braid graphs that round-trips exactly. Test
// fixtures are written in it, and `braid graph export --format text` prints it.
//
//   graph "mlp"
//   tensor x f32[32,1024] input
//   tensor w f32[1024,256] parameter
//   tensor y f32[32,256] activation
//   tensor w.grad f32[1024,256] gradient of=w
//   op mm MatMul (x, w) -> (y) {transB=0}
//   op mm.grad MatMul (x, y) -> (w.grad) {transA=1} phase=backward flops=1.6e7
//   output y
//
// Tensors are declared before the ops that use them (gradients may name their
// parameter anywhere in the file); a constant with a known value ends with
// value=f[...] (row-major elements). Ops keep their listed order, so ids survive
// a round trip. Optional op fields: phase= (default forward), flops=, read=,
// written= (default 0), and the word `opaque`. Attribute values: integers,
// floats (always written with a '.' or exponent), "strings", [int lists] and
// f[float lists]. Names that are not plain tokens are written in quotes.
// Lines starting with '#' are comments.
#ifndef BRAID_GRAPH_TEXT_FORMAT_H_
#define BRAID_GRAPH_TEXT_FORMAT_H_

#include <string>
#include <string_view>

#include "graph/graph.h"

namespace braid::graph {

std::string ToText(const Graph& g);

// Errors are InvalidArgument "line N: ...". The result is Validate()d.
absl::StatusOr<Graph> ParseText(std::string_view text);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_TEXT_FORMAT_H_
