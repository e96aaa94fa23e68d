// Parallel tensor shapes of the parallel computation graph (Unity §3.1).
//
// A tensor of the PCG has, per data dimension, a size and a degree (how many
// equal pieces that dimension is split into), plus a replica degree (how many
// copies of every piece exist). The tensor thus lives on TotalDegree() tasks,
// each holding one piece of PieceShape(). The six parallel ops
// (graph/parallel_ops.h) are the only way a degree changes.
//
//   ParallelTensorShape s = {.dims = {{64, 2}, {1024, 4}}, .replica_degree = 2,
//                            .dtype = DType::kF32};
//   ParallelShapeString(s);                      // "f32[64/2,1024/4]x2"
//   *TotalDegree(s);                             // 16 tasks
//   *PieceShape(s);                              // {32, 256}
//   *PieceBytes(s);                              // 32*256*4
//   *ParseParallelShape("f32[64/2,1024/4]x2") == s;
//
// Text form: "<dtype>[<size>[/<degree>],...]" followed by "x<replica>" when
// the replica degree is not 1; a degree of 1 is not printed (the parser also
// accepts "/1" and "x1"). A scalar is "f32[]".
#ifndef BRAID_GRAPH_PARALLEL_SHAPE_H_
#define BRAID_GRAPH_PARALLEL_SHAPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph {

// One data dimension: its logical size and into how many equal pieces it is
// split. Valid when size >= 0, degree >= 1 and degree divides size.
struct ParallelDim {
  int64_t size = 0;
  int degree = 1;

  bool operator==(const ParallelDim&) const = default;
};

struct ParallelTensorShape {
  std::vector<ParallelDim> dims;
  // Copies of every piece (Unity's replica dimension), >= 1.
  int replica_degree = 1;
  DType dtype = DType::kF32;

  bool operator==(const ParallelTensorShape&) const = default;
  int num_dims() const { return static_cast<int>(dims.size()); }
};

// Every dim of `shape` with degree 1, replica degree 1: an unparallelized tensor.
ParallelTensorShape UnpartitionedShape(const std::vector<int64_t>& shape, DType dtype);

// OK, or InvalidArgument naming the first violated rule: sizes >= 0, degrees
// and replica degree >= 1, degree divides size, TotalDegree fits in an int
// (a task count is a rank count).
absl::Status ValidateParallelShape(const ParallelTensorShape& s);

// Product of the dim degrees times the replica degree: the number of tasks
// (devices) the tensor lives on. InvalidArgument for an invalid shape.
absl::StatusOr<int> TotalDegree(const ParallelTensorShape& s);

// The logical shape (sizes only) and the shape of one piece (size/degree).
std::vector<int64_t> LogicalShape(const ParallelTensorShape& s);
absl::StatusOr<std::vector<int64_t>> PieceShape(const ParallelTensorShape& s);

// Bytes of one piece (what each task holds) and of the whole logical tensor
// (one replica). InvalidArgument for an invalid shape or when the count
// overflows int64.
absl::StatusOr<int64_t> PieceBytes(const ParallelTensorShape& s);
absl::StatusOr<int64_t> LogicalBytes(const ParallelTensorShape& s);

// "f32[64/2,1024/4]x2" (see the top of this file).
std::string ParallelShapeString(const ParallelTensorShape& s);
// Parses the text form; the result is validated. InvalidArgument naming the
// offending text.
absl::StatusOr<ParallelTensorShape> ParseParallelShape(std::string_view text);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_PARALLEL_SHAPE_H_
