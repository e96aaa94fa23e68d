// The overlap model: how long a tensor-parallel collective and its dependent
// GEMM take when they are decomposed to overlap, and Flux's overlap
// efficiency of each choice.
//
// Two patterns, n ranks in the tensor-parallel group (the shard layout of
// worker/collective_matmul.h and kernels/cuda/comm_gemm.h):
//  - AllGather->MatMul: rank r holds x_r [m/n, k]; out_r = AllGather(x) @ w_r.
//  - MatMul->ReduceScatter: rank r holds x_r [m, k/n]; out_r = rows r of the
//    sum over ranks of x_r @ w_r.
// Methods:
//  - kNone: the collective, then the GEMM (or the GEMM, then the collective).
//  - kLooped (Wang et al., ASPLOS'23 §3): n ring steps; a step's chunk GEMM
//    (m/n rows) runs while the next chunk travels r -> r+1.
//  - kUnrolled (§4, unroll by 2): each chunk in two halves, two transfers in
//    flight.
//  - kBidirectional (§4): the halves travel both ring directions.
//  - kFusedTiles (Flux, Chang et al. 2024, §3): the communication is issued
//    per output tile inside one GEMM kernel (AllGather: tiles wait on their
//    rows' signals; ReduceScatter: the epilogue writes each tile to its
//    owner). Only where the device's backend has those kernels (GPUs,
//    kernels/cuda); `tile_rows` is the communication tile.
//
// The model composes the times of the primitives a method is made of
// (OverlapParts), so that it charges exactly what Flux's Figures 4 and 14
// show hurting earlier decompositions at small m:
//  - per-chunk GEMM inefficiency: a chunk GEMM's time is its own (measured
//    or costed at the chunk's shape), not gemm_s / n;
//  - per-message latency: a chunk transfer's time is a message's (alpha +
//    bytes * beta from the comm model, or measured), paid once per step;
//  - the CPU a transfer takes: on CPU ranks the transport's copies run on the
//    cores the GEMMs use. A step that overlaps a GEMM of G seconds with a
//    transfer of P seconds whose CPU work is rho * P takes
//        Step(G, P) = max(G + stolen * rho * P, P),
//    stolen = 1 - min(1, spare_cores_per_rank / rho): the share of the
//    transfer's CPU work that no idle core absorbs (all of it on cpu-local,
//    2 ranks of 1 thread on 2 cores; none on GPUs, rho = 0).
// Per method, with G_c / G_h a chunk's / half chunk's GEMM, P_c / P_h a ring
// step's transfer of a chunk / half chunk, A_c / A_h an accumulator
// addition, Y_c / Y_h the copy of a finished block, C the undecomposed
// collective (ReduceScatter: its ring, additions included):
//   AllGather->MatMul      none    C + G
//                          looped  (n-1) Step(G_c, P_c) + G_c
//                          unrolled, bidirectional
//                                  (n-1) Half + 2 G_h
//   MatMul->ReduceScatter  none    G + C
//                          looped  G_c + (n-1) (Step(G_c, P_c) + A_c) + Y_c
//                          unrolled, bidirectional
//                                  2 G_h + (n-1) (Half + 2 A_h) + 2 Y_h
//   Half = max(2 G_h + stolen * rho * 2 P_h, G_h + P_h): the two halves'
//   transfers are issued one half-GEMM apart (the second half's transfer
//   hides behind the second GEMM and the next step's first), so a step
//   overlaps two half-GEMMs with two staggered half-chunk messages; each
//   message's latency is paid. On 2 ranks the two directions reach the same
//   peer, so bidirectional is unrolled; on more it uses both ring links,
//   which this model (one link's time per message) does not credit.
//   fused tiles (both)     max(T * G_t, C_T + G_t): T = m / tile_rows tile
//                          GEMMs of G_t each, and the tiles' transfers C_T
//                          (one message per tile) done before the last tile.
// Flux §2.3: effective communication time ECT = time - G (eq. 1) and
// efficiency E = 1 - ECT(method) / ECT(none) (eq. 2).
//
//   OverlapParts p = ...;  // measured (braid-collective-matmul-bench) or
//                          // OverlapPartsFromCostModel(cm, shape)
//   double t = PredictOverlapTime(OverlapPattern::kAllGatherMatMul,
//                                 OverlapMethod::kLooped, p);
//   double e = OverlapEfficiencyOf(t, PredictOverlapTime(..., kNone, p), p.gemm_s);
#ifndef BRAID_COSTMODEL_OVERLAP_MODEL_H_
#define BRAID_COSTMODEL_OVERLAP_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"

namespace braid::costmodel {

enum class OverlapPattern : uint8_t { kAllGatherMatMul, kMatMulReduceScatter };
enum class OverlapMethod : uint8_t { kNone, kLooped, kUnrolled, kBidirectional, kFusedTiles };

std::string_view OverlapPatternName(OverlapPattern p);  // "allgather_matmul", "matmul_reducescatter"
std::string_view OverlapMethodName(OverlapMethod m);    // "none", "looped", "unrolled", "bidirectional", "fused_tiles"
absl::StatusOr<OverlapPattern> ParseOverlapPattern(std::string_view name);
absl::StatusOr<OverlapMethod> ParseOverlapMethod(std::string_view name);

// One pair's GEMM: out = x @ w with the pattern's shard layout over `ranks`.
struct OverlapShape {
  OverlapPattern pattern = OverlapPattern::kAllGatherMatMul;
  int64_t m = 0, k = 0, nout = 0;
  int ranks = 2;
  graph::DType dtype = graph::DType::kF32;
};

// What a method needs of `shape` (divisibility by ranks, two halves per
// rank for unrolled/bidirectional, tile_rows dividing m / ranks for fused
// tiles). InvalidArgument naming the dimension otherwise.
absl::Status CanOverlap(const OverlapShape& shape, OverlapMethod method, int64_t tile_rows = 0);

// Primitive times on one rank, in seconds (see the file comment's letters).
struct OverlapParts {
  int ranks = 2;
  double gemm_s = 0;           // G: the whole non-split GEMM
  double chunk_gemm_s = 0;     // G_c: m / n rows
  double half_gemm_s = 0;      // G_h: half of that
  double collective_s = 0;     // C: the undecomposed collective
  double chunk_transfer_s = 0; // P_c
  double half_transfer_s = 0;  // P_h (the larger, ceil half)
  double chunk_add_s = 0, half_add_s = 0;    // A_c, A_h (ReduceScatter)
  double chunk_copy_s = 0, half_copy_s = 0;  // Y_c, Y_h (ReduceScatter)
  // rho: CPU seconds a transfer costs the rank per second of transfer
  // (process CPU time over wall time while only the transfer runs).
  double transfer_cpu_fraction = 0;
  double spare_cores_per_rank = 0;
  // Fused tiles: tile_rows rows per tile, tiles = m / tile_rows; a tile's
  // GEMM and all tiles' transfers (one message each).
  int64_t tile_rows = 0;
  int64_t tiles = 0;
  double tile_gemm_s = 0;
  double tiles_transfer_s = 0;
  // Where the GEMM and communication times came from.
  TimeSource gemm_source = TimeSource::kPrior;
  TimeSource comm_source = TimeSource::kPrior;
};

// One overlapped step (see the file comment).
double OverlapStep(double gemm_s, double transfer_s, const OverlapParts& p);

// The method's time for the pair (the file comment's formulas).
double PredictOverlapTime(OverlapPattern pattern, OverlapMethod method, const OverlapParts& p);

// Flux eq. 1-2: 1 - (t - gemm) / (t_none - gemm); NaN when t_none <= gemm.
double OverlapEfficiencyOf(double t, double t_none, double gemm_s);

// Parts from braid's cost model for `shape` on `cluster`: GEMMs and additions
// through cm.ComputeTime of MatMul / Add graphs at the chunk shapes (so
// measured profiles are used where the store has them), transfers through
// cm.CollectiveTime(kSendRecv, bytes, 2), the collective through
// cm.CollectiveTime(kAllGather | kReduceScatter, ...). rho: the cluster's
// processor-sharing prior (ComputeSlowdownDuringComm - 1, clamped to [0, 1];
// 0 on GPUs) unless `transfer_cpu_fraction` >= 0 gives a measured one.
// `tile_rows` > 0 fills the fused-tile parts.
// `comm`, when given, is the comm model behind cm's CollectiveTime: the parts'
// comm_source is then kMeasured where it has a fit for SendRecv on 2 ranks.
class CommModel;
struct OverlapCostOptions {
  double transfer_cpu_fraction = -1;
  int64_t tile_rows = 0;
  const CommModel* comm = nullptr;
};
absl::StatusOr<OverlapParts> OverlapPartsFromCostModel(CostModel& cm, const ClusterSpec& cluster,
                                                       const OverlapShape& shape,
                                                       const OverlapCostOptions& options = {});

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_OVERLAP_MODEL_H_
