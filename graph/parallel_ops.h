// The six parallelization operators of the parallel computation graph
// (Unity §3.3), as shape functions over ParallelTensorShape
// (graph/parallel_shape.h). They come in three pairs, each the other's back
// propagation: Partition/Combine change a dimension's degree, Replicate/Reduce
// the replica degree, Pipeline/Batch a dimension's size (micro-batches; the
// degree is untouched). What each costs in communication is
// costmodel/parallel_comm.h's business.
//
//   ParallelTensorShape x = *ParseParallelShape("f32[64,1024]");
//   ParallelOp p = ParallelOp::Partition(/*dim=*/0, /*degree=*/4);
//   *ApplyParallelOp(p, x);                       // f32[64/4,1024]
//   BackwardOf(p);                                // Combine(0, 4)
//   ParallelOpString(ParallelOp::Replicate(2));   // "Replicate(2)"
//   *ParseParallelOp("Pipeline(0,8)");            // ParallelOp::Pipeline(0, 8)
#ifndef BRAID_GRAPH_PARALLEL_OPS_H_
#define BRAID_GRAPH_PARALLEL_OPS_H_

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/parallel_shape.h"

namespace braid::graph {

enum class ParallelOpKind : uint8_t { kPartition, kCombine, kReplicate, kReduce, kPipeline, kBatch };
std::string_view ParallelOpKindName(ParallelOpKind k);  // "Partition", ...
absl::StatusOr<ParallelOpKind> ParseParallelOpKind(std::string_view name);
// Whether ops of this kind act on a data dimension (all but Replicate/Reduce,
// which act on the replica dimension).
bool TakesDim(ParallelOpKind k);

// One parallel op. `dim` is the data dimension (kNoDim for Replicate and
// Reduce); `degree` >= 2 (a degree-1 parallel op is a no-op, which a search
// should not create, so it is rejected).
struct ParallelOp {
  static constexpr int kNoDim = -1;

  ParallelOpKind kind = ParallelOpKind::kPartition;
  int dim = kNoDim;
  int degree = 2;

  static ParallelOp Partition(int dim, int degree) { return {ParallelOpKind::kPartition, dim, degree}; }
  static ParallelOp Combine(int dim, int degree) { return {ParallelOpKind::kCombine, dim, degree}; }
  static ParallelOp Replicate(int degree) { return {ParallelOpKind::kReplicate, kNoDim, degree}; }
  static ParallelOp Reduce(int degree) { return {ParallelOpKind::kReduce, kNoDim, degree}; }
  static ParallelOp Pipeline(int dim, int degree) { return {ParallelOpKind::kPipeline, dim, degree}; }
  static ParallelOp Batch(int dim, int degree) { return {ParallelOpKind::kBatch, dim, degree}; }

  bool operator==(const ParallelOp&) const = default;
};

// "Partition(0,4)", "Replicate(2)"; ParseParallelOp reads it back (spaces
// allowed after commas) and fails with InvalidArgument on anything else.
std::string ParallelOpString(const ParallelOp& op);
absl::StatusOr<ParallelOp> ParseParallelOp(std::string_view text);

// The op its back propagation performs: Partition<->Combine,
// Replicate<->Reduce, Pipeline<->Batch, same dim and degree.
ParallelOp BackwardOf(const ParallelOp& op);

// The output shape of `op` applied to `in`:
//   Partition(dim, d)  dims[dim].degree *= d    (d * degree must divide size)
//   Combine(dim, d)    dims[dim].degree /= d    (d must divide degree)
//   Replicate(d)       replica_degree *= d
//   Reduce(d)          replica_degree /= d      (d must divide replica degree)
//   Pipeline(dim, d)   dims[dim].size /= d      (d * degree must divide size,
//                                                so the micro-batch still splits)
//   Batch(dim, d)      dims[dim].size *= d
// InvalidArgument, naming the op and the violated rule, for an invalid input
// shape, a degree < 2, a dim out of range (or given to Replicate/Reduce), a
// violated rule, or a result whose total degree or size overflows.
absl::StatusOr<ParallelTensorShape> ApplyParallelOp(const ParallelOp& op,
                                                    const ParallelTensorShape& in);
// Applies `ops` in order; the error also names the op's position.
absl::StatusOr<ParallelTensorShape> ApplyParallelOps(std::span<const ParallelOp> ops,
                                                     const ParallelTensorShape& in);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_PARALLEL_OPS_H_
