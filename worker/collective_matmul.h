// Decomposed collective matmuls on CPU Gloo ranks (Wang et al., "Overlap
// Communication with Dependent Computation via Decomposition", ASPLOS'23,
// §3-4): a tensor-parallel group of n ranks computes
//
//  - AllGather->MatMul (column-parallel Linear after a sequence-sharded
//    input): rank r holds x_r [m/n, k] and w_r [k, nout/n];
//    out_r = AllGather_rows(x) @ w_r, [m, nout/n].
//  - MatMul->ReduceScatter (row-parallel Linear): rank r holds x_r [m, k/n]
//    and w_r [k/n, nout]; out_r = rows [r*m/n, (r+1)*m/n) of sum_r x_r @ w_r.
//
// by one of four methods:
//
//  - kNone: the undecomposed baseline. AllGather: Gloo's allgather, then one
//    GEMM. ReduceScatter: one GEMM of the whole partial [m, nout], then a ring
//    reduce-scatter made of c10d send/recv (Gloo has no reduce_scatter; the
//    same ring as the looped method, so the baseline is fair).
//  - kLooped: n steps around the ring. AllGather: the GEMM of the chunk held
//    at step s writes its rows of out while that chunk is sent to rank r+1
//    and the next one received from rank r-1. ReduceScatter: at step s rank r
//    computes the partial block of rank (r-s-1) mod n, adds the accumulator
//    received from r-1 and passes it to r+1; after n-1 hops the block is
//    complete at its owner.
//  - kLoopedUnrolled: each rank's chunk is cut in two halves travelling the
//    same ring with their own tags, so two transfers are in flight: the
//    second half's receive overlaps the first half's GEMM (the paper's loop
//    unrolled by 2).
//  - kBidirectional: the first halves travel r -> r+1, the second halves
//    r -> r-1 (the paper's bidirectional variant), using both directions of
//    every link.
//
// Communication is issued as asynchronous c10d send/recv (the Gloo device
// thread moves the bytes) while this thread runs the GEMMs with one LibTorch
// intra-op thread; the step's works are waited on before the received data
// are used.
//
// RunCollectiveMatMul spawns n `braid-collective-matmul-rank` processes
// (c10d FileStore + ProcessGroupGloo on 127.0.0.1), which make the full x and
// w from `seed`, keep their shards, time every method (and the GEMM alone and
// the collective alone) `repetitions` times after `warmup` untimed runs,
// interleaved, and write times and their out_r; the driver checks each out_r
// against x @ w computed in this process and reports per repetition the
// slowest rank's time.
//
//   CollectiveMatMulSpec s{.pattern = CollectivePattern::kAllGatherMatMul,
//                          .methods = {DecomposeMethod::kNone, DecomposeMethod::kLooped},
//                          .m = 256, .k = 1024, .nout = 1024, .ranks = 2};
//   absl::StatusOr<CollectiveMatMulResult> r = RunCollectiveMatMul(s, {});
//   // r->methods[1].max_rel_diff < 1e-4; r->methods[1].seconds: per repetition
//   OverlapEfficiency e = ComputeOverlapEfficiency(*r, 1);
//
// Flux (Chang et al., 2024, §2.3) eq. 1-2: effective communication time
// ECT = overall time - non-split GEMM time; overlap efficiency
// E = 1 - ECT_overlap / ECT_non-overlap, the non-overlapping baseline being
// kNone (its efficiency is 0 by definition; negative: slower than it).
//
// This header does not include LibTorch.
#ifndef BRAID_WORKER_COLLECTIVE_MATMUL_H_
#define BRAID_WORKER_COLLECTIVE_MATMUL_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/overlap_model.h"

namespace braid::worker {

enum class CollectivePattern { kAllGatherMatMul, kMatMulReduceScatter };
enum class DecomposeMethod { kNone, kLooped, kLoopedUnrolled, kBidirectional };

std::string_view CollectivePatternName(CollectivePattern p);  // "allgather_matmul", ...
std::string_view DecomposeMethodName(DecomposeMethod m);      // "none", "looped", ...
absl::StatusOr<CollectivePattern> ParseCollectivePattern(std::string_view name);
absl::StatusOr<DecomposeMethod> ParseDecomposeMethod(std::string_view name);

// The shapes a method supports on `ranks` ranks (like CUTLASS's
// can_implement): m, k, nout >= 1 and ranks >= 1; AllGather: m and nout
// multiples of ranks; ReduceScatter: m and k multiples of ranks. The unrolled
// and bidirectional methods cut each rank's m / ranks rows in two halves
// (floor and ceil: m need not be a multiple of 2 * ranks) and need
// m / ranks >= 2. InvalidArgument naming the offending dim otherwise.
absl::Status CanDecompose(CollectivePattern pattern, DecomposeMethod method, int64_t m, int64_t k,
                          int64_t nout, int ranks);

struct CollectiveMatMulSpec {
  CollectivePattern pattern = CollectivePattern::kAllGatherMatMul;
  std::vector<DecomposeMethod> methods = {DecomposeMethod::kNone};
  int64_t m = 64, k = 64, nout = 64;
  int ranks = 2;
  int repetitions = 5;
  int warmup = 1;
  uint64_t seed = 1;
  // Also time, interleaved with the methods, the primitives the overlap
  // model composes (MeasuredOverlapParts): chunk and half-chunk GEMMs, a ring
  // step's transfer of a chunk (and the process CPU time it takes) and of a
  // half chunk, the accumulator's addition and copy.
  bool parts = false;
  // Pin rank r (and the Gloo threads it starts) to core r mod cores, as a
  // launcher binding ranks to cores does: the scheduler then cannot put
  // both ranks' GEMMs on one core for a while, which otherwise makes the
  // times bimodal on a 2-core host.
  bool pin_cores = false;
};

struct CollectiveMatMulOptions {
  // The rank program; empty: $BRAID_COLLECTIVE_MATMUL_RANK, else
  // braid-collective-matmul-rank next to this executable or in ../bin.
  std::string rank_binary;
  double timeout_s = 300;
};

struct MethodMeasurement {
  DecomposeMethod method = DecomposeMethod::kNone;
  std::vector<double> seconds;  // per repetition, slowest rank
  double max_rel_diff = 0;      // max |out - ref| / max |ref| over all ranks
};

struct CollectiveMatMulResult {
  std::vector<MethodMeasurement> methods;  // in spec.methods' order
  std::vector<double> gemm_s;  // the rank's whole GEMM alone (non-split), per repetition
  std::vector<double> comm_s;  // the collective alone (allgather / ring reduce-scatter)
  // spec.parts: per primitive ("gemm_chunk", "xfer_chunk", "xfer_cpu_fraction",
  // ...), per repetition, the slowest rank's value.
  std::map<std::string, std::vector<double>> parts;
};

// The overlap model's inputs (costmodel/overlap_model.h) from a result run
// with spec.parts: medians over the repetitions. `spare_cores_per_rank`:
// cores beyond the ranks' compute threads (0 when the ranks fill the host).
// FailedPrecondition when the result has no parts.
absl::StatusOr<costmodel::OverlapParts> MeasuredOverlapParts(const CollectiveMatMulSpec& spec,
                                                             const CollectiveMatMulResult& r,
                                                             double spare_cores_per_rank);

// Validates (CanDecompose for every method), runs the ranks and checks every
// method's out_r against the single-process reference: Internal naming the
// method and rank when max |diff| / max |ref| >= 1e-4.
absl::StatusOr<CollectiveMatMulResult> RunCollectiveMatMul(const CollectiveMatMulSpec& spec,
                                                           const CollectiveMatMulOptions& options);

// Medians of a result's times and Flux's eq. 1-2 for method i.
struct OverlapEfficiency {
  double overall_s = 0, gemm_s = 0, comm_s = 0;
  double effective_comm_s = 0;  // overall - gemm (eq. 1)
  double baseline_effective_comm_s = 0;  // kNone's overall - gemm
  double efficiency = 0;  // 1 - effective / baseline effective (eq. 2); NaN without kNone
};
OverlapEfficiency ComputeOverlapEfficiency(const CollectiveMatMulResult& r, size_t i);

// One rank (braid-collective-matmul-rank): writes `output_path` (times) and
// `output_path`.<method>.bin (its out_r, float32, row-major).
struct CollectiveMatMulRankConfig {
  std::string store_path, output_path;
  int rank = 0, world = 1;
  CollectiveMatMulSpec spec;  // spec.ranks == world
};
absl::Status RunCollectiveMatMulRank(const CollectiveMatMulRankConfig& config);

}  // namespace braid::worker

#endif  // BRAID_WORKER_COLLECTIVE_MATMUL_H_
