// Plan validity (DisCo Alg. 1, "if H' is valid"): a plan may only fuse
// fusible forward/backward compute ops (never parameters or inputs, which are
// tensors; never communication, update, control-flow or opaque ops), each op
// has one home (the non-duplicated member of at most one group; declared
// duplicates are recomputed inside other groups), groups are connected,
// a group holds at most one library op (MatMul/Gemm/Conv and their
// gradients: a cuBLAS/cuDNN call, costmodel::IsLibraryOp) plus fusible
// non-library ops around it, as XLA's GPU fusion can realize,
// buckets partition the gradients exactly, every group is a kernel the
// device's fusion backend runs (costmodel/fusion_backend.h), and the contracted graph stays
// acyclic: fusing a and b of a->b, a->c->b without c would make the fused
// kernel both feed and wait for c.
//
//   absl::Status s = ValidatePlan(g, plan);
//   if (!s.ok()) LOG(WARNING) << s;  // names the offending group/op/bucket
#ifndef BRAID_SEARCH_VALIDITY_H_
#define BRAID_SEARCH_VALIDITY_H_

#include "absl/status/status.h"
#include "costmodel/fusion_backend.h"
#include "graph/graph.h"
#include "search/plan.h"

namespace braid::search {

// OK, or InvalidArgument naming the offending group, op, tensor or bucket.
// With a `backend` (CostModel::fusion_backend()), every group must also be a
// kernel that backend can run.
absl::Status ValidatePlan(const graph::Graph& g, const Plan& plan,
                          const costmodel::FusionBackend* backend = nullptr);

}  // namespace braid::search

#endif  // BRAID_SEARCH_VALIDITY_H_
