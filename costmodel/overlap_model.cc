#include "costmodel/overlap_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/comm_model.h"
#include "graph/builder.h"

namespace braid::costmodel {
namespace {

constexpr OverlapMethod kMethods[] = {OverlapMethod::kNone, OverlapMethod::kLooped,
                                      OverlapMethod::kUnrolled, OverlapMethod::kBidirectional,
                                      OverlapMethod::kFusedTiles};

// Time of the op of `kind` in the small graph `b` builds.
absl::StatusOr<OpTime> OneOpTime(CostModel& cm, graph::GraphBuilder&& b, graph::OpKind kind) {
  ASSIGN_OR_RETURN(graph::Graph g, std::move(b).Build());
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.num_ops()); ++id) {
    if (g.op(id).kind == kind) return cm.ComputeTime(g, id);
  }
  return absl::InternalError("overlap model: the costing graph has no op of the expected kind");
}

// x [rows, k] @ w [k, nout].
absl::StatusOr<OpTime> GemmTime(CostModel& cm, int64_t rows, int64_t k, int64_t nout,
                                graph::DType dt) {
  graph::GraphBuilder b("overlap_gemm");
  graph::TensorId x = b.Input("x", {rows, k}, dt);
  graph::TensorId w = b.Input("w", {k, nout}, dt);
  b.MarkOutput(b.MatMul(x, w));
  return OneOpTime(cm, std::move(b), graph::OpKind::kMatMul);
}

absl::StatusOr<OpTime> AddTime(CostModel& cm, int64_t rows, int64_t cols, graph::DType dt) {
  graph::GraphBuilder b("overlap_add");
  graph::TensorId x = b.Input("x", {rows, cols}, dt);
  graph::TensorId y = b.Input("y", {rows, cols}, dt);
  b.MarkOutput(b.Add(x, y));
  return OneOpTime(cm, std::move(b), graph::OpKind::kAdd);
}

// The worse of two sources (a part is only as measured as its least part).
TimeSource Worse(TimeSource a, TimeSource b) {
  auto rank = [](TimeSource s) {
    switch (s) {
      case TimeSource::kMeasured: return 0;
      case TimeSource::kGnn: return 1;
      case TimeSource::kCorrectedRoofline: return 2;
      case TimeSource::kPrior: return 3;
    }
    return 3;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace

std::string_view OverlapPatternName(OverlapPattern p) {
  return p == OverlapPattern::kAllGatherMatMul ? "allgather_matmul" : "matmul_reducescatter";
}

std::string_view OverlapMethodName(OverlapMethod m) {
  switch (m) {
    case OverlapMethod::kNone: return "none";
    case OverlapMethod::kLooped: return "looped";
    case OverlapMethod::kUnrolled: return "unrolled";
    case OverlapMethod::kBidirectional: return "bidirectional";
    case OverlapMethod::kFusedTiles: return "fused_tiles";
  }
  return "unknown";
}

absl::StatusOr<OverlapPattern> ParseOverlapPattern(std::string_view name) {
  for (OverlapPattern p : {OverlapPattern::kAllGatherMatMul, OverlapPattern::kMatMulReduceScatter}) {
    if (OverlapPatternName(p) == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("overlap: unknown pattern '", std::string(name),
                                                 "' (allgather_matmul, matmul_reducescatter)"));
}

absl::StatusOr<OverlapMethod> ParseOverlapMethod(std::string_view name) {
  for (OverlapMethod m : kMethods) {
    if (OverlapMethodName(m) == name) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("overlap: unknown method '", std::string(name),
                   "' (none, looped, unrolled, bidirectional, fused_tiles)"));
}

absl::Status CanOverlap(const OverlapShape& s, OverlapMethod method, int64_t tile_rows) {
  const std::string what = absl::StrCat("overlap ", std::string(OverlapPatternName(s.pattern)), "/",
                                        std::string(OverlapMethodName(method)), ": ");
  if (s.ranks < 1) return absl::InvalidArgumentError(absl::StrCat(what, "ranks=", s.ranks, " < 1"));
  if (s.m < 1 || s.k < 1 || s.nout < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "dims must be >= 1: m=", s.m, " k=", s.k, " nout=", s.nout));
  }
  if (s.m % s.ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "m=", s.m, " is not a multiple of ranks=", s.ranks));
  }
  if (s.pattern == OverlapPattern::kAllGatherMatMul && s.nout % s.ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "nout=", s.nout, " is not a multiple of ranks=", s.ranks));
  }
  if (s.pattern == OverlapPattern::kMatMulReduceScatter && s.k % s.ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "k=", s.k, " is not a multiple of ranks=", s.ranks));
  }
  if ((method == OverlapMethod::kUnrolled || method == OverlapMethod::kBidirectional) &&
      s.m / s.ranks < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "m=", s.m, " gives ", s.m / s.ranks, " row(s) per rank; two halves need m/ranks >= 2"));
  }
  if (method == OverlapMethod::kFusedTiles) {
    if (tile_rows < 1 || (s.m / s.ranks) % tile_rows != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, "tile_rows=", tile_rows,
                                                     " must be >= 1 and divide m/ranks=",
                                                     s.m / s.ranks));
    }
  }
  return absl::OkStatus();
}

// The share of a transfer's time the GEMM loses to its CPU work: rho, less
// what spare cores absorb.
double StolenShare(const OverlapParts& p) {
  const double rho = std::clamp(p.transfer_cpu_fraction, 0.0, 1.0);
  if (rho <= 0) return 0;
  const double stolen = 1.0 - std::min(1.0, std::max(0.0, p.spare_cores_per_rank) / rho);
  return stolen * rho;
}

double OverlapStep(double gemm_s, double transfer_s, const OverlapParts& p) {
  return std::max(gemm_s + StolenShare(p) * transfer_s, transfer_s);
}

double PredictOverlapTime(OverlapPattern pattern, OverlapMethod method, const OverlapParts& p) {
  const double steps = std::max(0, p.ranks - 1);
  const bool ag = pattern == OverlapPattern::kAllGatherMatMul;
  switch (method) {
    case OverlapMethod::kNone:
      return p.collective_s + p.gemm_s;
    case OverlapMethod::kLooped:
      if (ag) return steps * OverlapStep(p.chunk_gemm_s, p.chunk_transfer_s, p) + p.chunk_gemm_s;
      return p.chunk_gemm_s +
             steps * (OverlapStep(p.chunk_gemm_s, p.chunk_transfer_s, p) + p.chunk_add_s) +
             p.chunk_copy_s;
    case OverlapMethod::kUnrolled:
    case OverlapMethod::kBidirectional: {
      const double g2 = 2 * p.half_gemm_s;
      const double half = std::max(g2 + StolenShare(p) * 2 * p.half_transfer_s,
                                   p.half_gemm_s + p.half_transfer_s);
      if (ag) return steps * half + g2;
      return g2 + steps * (half + 2 * p.half_add_s) + 2 * p.half_copy_s;
    }
    case OverlapMethod::kFusedTiles: {
      const double tiles = static_cast<double>(std::max<int64_t>(1, p.tiles));
      return std::max(tiles * p.tile_gemm_s, p.tiles_transfer_s + p.tile_gemm_s);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double OverlapEfficiencyOf(double t, double t_none, double gemm_s) {
  const double base = t_none - gemm_s;
  if (!(base > 0)) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - (t - gemm_s) / base;
}

absl::StatusOr<OverlapParts> OverlapPartsFromCostModel(CostModel& cm, const ClusterSpec& cluster,
                                                       const OverlapShape& s,
                                                       const OverlapCostOptions& options) {
  RETURN_IF_ERROR(CanOverlap(s, OverlapMethod::kLooped));
  const int n = s.ranks;
  const int64_t rows = s.m / n;
  const int64_t half = rows / 2;
  const int64_t esize = graph::DTypeSize(s.dtype);
  const bool ag = s.pattern == OverlapPattern::kAllGatherMatMul;
  // The per-rank GEMM: AllGather [m, k] @ [k, nout/n]; ReduceScatter [m, k/n] @ [k/n, nout].
  const int64_t gk = ag ? s.k : s.k / n;
  const int64_t gn = ag ? s.nout / n : s.nout;
  // What moves per ring step: AllGather an x chunk [rows, k]; ReduceScatter
  // an accumulator block [rows, nout].
  const int64_t cols = ag ? s.k : s.nout;
  OverlapParts p;
  p.ranks = n;
  ASSIGN_OR_RETURN(OpTime whole, GemmTime(cm, s.m, gk, gn, s.dtype));
  ASSIGN_OR_RETURN(OpTime chunk, GemmTime(cm, rows, gk, gn, s.dtype));
  p.gemm_s = whole.seconds;
  p.chunk_gemm_s = chunk.seconds;
  p.gemm_source = Worse(whole.source, chunk.source);
  if (half >= 1) {
    ASSIGN_OR_RETURN(OpTime h, GemmTime(cm, half, gk, gn, s.dtype));
    // Both halves (floor and ceil): the ceil half costed as the floor one.
    p.half_gemm_s = h.seconds;
    p.gemm_source = Worse(p.gemm_source, h.source);
  }
  const int64_t chunk_bytes = rows * cols * esize;
  const int64_t half_bytes = (rows - half) * cols * esize;
  p.chunk_transfer_s = cm.CollectiveTime(Collective::kSendRecv, chunk_bytes, 2);
  p.half_transfer_s = cm.CollectiveTime(Collective::kSendRecv, half_bytes, 2);
  if (ag) {
    p.collective_s = cm.CollectiveTime(Collective::kAllGather, s.m * s.k * esize, n);
  } else {
    p.collective_s = cm.CollectiveTime(Collective::kReduceScatter, s.m * s.nout * esize, n);
    ASSIGN_OR_RETURN(OpTime add_c, AddTime(cm, rows, s.nout, s.dtype));
    p.chunk_add_s = add_c.seconds;
    // A copy moves 2/3 of an addition's bytes (read one, write one against
    // read two, write one): both are memory-bound streams.
    p.chunk_copy_s = add_c.seconds * 2.0 / 3.0;
    if (half >= 1) {
      ASSIGN_OR_RETURN(OpTime add_h, AddTime(cm, rows - half, s.nout, s.dtype));
      p.half_add_s = add_h.seconds;
      p.half_copy_s = add_h.seconds * 2.0 / 3.0;
    }
  }
  if (options.transfer_cpu_fraction >= 0) {
    p.transfer_cpu_fraction = std::min(1.0, options.transfer_cpu_fraction);
  } else {
    p.transfer_cpu_fraction = std::clamp(cm.ComputeSlowdownDuringComm() - 1.0, 0.0, 1.0);
  }
  if (cluster.IsCpu()) {
    const double ranks_per_node = std::min(cluster.num_ranks, cluster.devices_per_node);
    p.spare_cores_per_rank = std::max(
        0.0, cluster.cpu.cores_per_node / std::max(1.0, ranks_per_node) - cluster.cpu.threads_per_rank);
  } else {
    p.transfer_cpu_fraction = 0;  // copy engines / NVLink: the SMs keep computing
  }
  p.comm_source = options.comm != nullptr && options.comm->Fitted(Collective::kSendRecv, 2)
                      ? TimeSource::kMeasured
                      : TimeSource::kPrior;
  if (options.tile_rows > 0) {
    RETURN_IF_ERROR(CanOverlap(s, OverlapMethod::kFusedTiles, options.tile_rows));
    p.tile_rows = options.tile_rows;
    p.tiles = s.m / options.tile_rows;
    ASSIGN_OR_RETURN(OpTime t, GemmTime(cm, options.tile_rows, gk, gn, s.dtype));
    p.tile_gemm_s = t.seconds;
    p.gemm_source = Worse(p.gemm_source, t.source);
    // The tiles from the other n - 1 ranks, one message each.
    const int64_t remote_tiles = p.tiles - p.tiles / n;
    p.tiles_transfer_s =
        static_cast<double>(remote_tiles) *
        cm.CollectiveTime(Collective::kSendRecv, options.tile_rows * cols * esize, 2);
  }
  return p;
}

}  // namespace braid::costmodel
