#include "costmodel/parallel_comm.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::costmodel {
namespace {

using graph::ParallelOp;
using graph::ParallelOpKind;
using graph::ParallelTensorShape;

// The result of matching ops at one position: a collective (or none) and how
// many ops it consumed.
struct Match {
  std::optional<Collective> collective;
  int64_t bytes = 0;
  int num_ops = 1;
};

// `a` alone, or `a` fused with `b` (may be null), on a piece of `piece` bytes.
Match MatchAt(const ParallelOp& a, const ParallelOp* b, int64_t piece) {
  const int d = a.degree;
  if (b != nullptr && b->degree == d) {
    if (a.kind == ParallelOpKind::kReduce && b->kind == ParallelOpKind::kReplicate) {
      return {Collective::kAllReduce, piece, 2};
    }
    if (a.kind == ParallelOpKind::kReduce && b->kind == ParallelOpKind::kPartition) {
      return {Collective::kReduceScatter, piece, 2};
    }
    if (a.kind == ParallelOpKind::kCombine && b->kind == ParallelOpKind::kReplicate) {
      return {Collective::kAllGather, piece * d, 2};
    }
    if (a.kind == ParallelOpKind::kCombine && b->kind == ParallelOpKind::kPartition) {
      if (a.dim == b->dim) return {std::nullopt, 0, 2};
      return {Collective::kAllToAll, piece, 2};
    }
    if (a.kind == ParallelOpKind::kPartition && b->kind == ParallelOpKind::kCombine &&
        a.dim == b->dim) {
      return {std::nullopt, 0, 2};
    }
  }
  switch (a.kind) {
    case ParallelOpKind::kCombine: return {Collective::kAllGather, piece * d, 1};
    case ParallelOpKind::kReduce: return {Collective::kAllReduce, piece, 1};
    case ParallelOpKind::kReplicate: return {Collective::kBroadcast, piece, 1};
    case ParallelOpKind::kPartition:
    case ParallelOpKind::kPipeline:
    case ParallelOpKind::kBatch: return {std::nullopt, 0, 1};
  }
  return {std::nullopt, 0, 1};
}

}  // namespace

std::string CollectiveStepString(const CollectiveStep& s) {
  const std::string_view name = CollectiveName(s.collective);
  return absl::StrCat(absl::string_view(name.data(), name.size()), "(", s.bytes, " B x ",
                      s.group_size, " ranks x ", s.num_groups, " groups; ops ", s.first_op, "-",
                      s.first_op + s.num_ops - 1, ")");
}

absl::StatusOr<std::vector<CollectiveStep>> ParallelOpsComm(
    std::span<const ParallelOp> ops, const ParallelTensorShape& in) {
  // Validates the whole sequence first, so the matching below only sees
  // shapes the ops accept.
  RETURN_IF_ERROR(graph::ApplyParallelOps(ops, in));
  std::vector<CollectiveStep> steps;
  ParallelTensorShape shape = in;
  for (size_t i = 0; i < ops.size();) {
    ASSIGN_OR_RETURN(const int64_t piece, graph::PieceBytes(shape));
    ASSIGN_OR_RETURN(const int tasks, graph::TotalDegree(shape));
    const ParallelOp* next = i + 1 < ops.size() ? &ops[i + 1] : nullptr;
    const Match m = MatchAt(ops[i], next, piece);
    if (m.collective) {
      const int d = ops[i].degree;
      // Broadcast: every input task roots one group; otherwise d input tasks
      // form a group.
      const int groups = *m.collective == Collective::kBroadcast ? tasks : tasks / d;
      steps.push_back({*m.collective, m.bytes, d, groups, static_cast<int>(i), m.num_ops});
    }
    for (int k = 0; k < m.num_ops; ++k) {
      ASSIGN_OR_RETURN(shape, graph::ApplyParallelOp(ops[i + k], shape));
    }
    i += m.num_ops;
  }
  return steps;
}

double CollectiveStepsTime(const CommModel& model, std::span<const CollectiveStep> steps) {
  double t = 0;
  for (const CollectiveStep& s : steps) t += model.Time(s.collective, s.bytes, s.group_size);
  return t;
}

absl::StatusOr<double> ParallelOpsCommTime(const CommModel& model,
                                           std::span<const ParallelOp> ops,
                                           const ParallelTensorShape& in) {
  ASSIGN_OR_RETURN(std::vector<CollectiveStep> steps, ParallelOpsComm(ops, in));
  return CollectiveStepsTime(model, steps);
}

}  // namespace braid::costmodel
