// Host side of braid's CUDA GEMM+communication kernels (comm_gemm.h): the
// shard layout, plain C++ references for each rank's output, and the pure
// functions that decide the kernels' schedules. comm_gemm.cc launches
// exactly what these functions return (the fused kernels read their tile
// order from a device table FusedTileOrder fills; the looped methods iterate
// LoopedPieces, LoopedAllGatherChunk and LoopedReduceScatterBlock), so the
// tests check the schedules here, on any machine, and the GPU test checks
// that following them gives the right sums.
//
// Layout (the same as worker/collective_matmul.h), n ranks, fp32 row-major:
//  - AllGather->MatMul: rank r holds x_r [m/n, k] (rows [r*m/n, (r+1)*m/n)
//    of x) and w_r [k, nout/n] (columns [r*nout/n, ...) of w);
//    out_r = AllGather_rows(x) @ w_r, [m, nout/n].
//  - MatMul->ReduceScatter: rank r holds x_r [m, k/n] (columns of x) and
//    w_r [k/n, nout] (rows of w); out_r = rows [r*m/n, (r+1)*m/n) of
//    sum_r x_r @ w_r, [m/n, nout].
//
//   CommGemmShape s{.m = 256, .k = 512, .nout = 128};
//   auto xs = ShardX(CommPattern::kAllGatherMatMul, s, 2, x);   // 2 shards
//   auto ws = ShardW(CommPattern::kAllGatherMatMul, s, 2, w);
//   ASSIGN_OR_RETURN(auto outs, ReferenceCommGemm(CommPattern::kAllGatherMatMul, s, 2, xs, ws));
//   // outs[r] == out_r, computed from the shards as the collective defines it
#ifndef BRAID_KERNELS_CUDA_COMM_GEMM_REFERENCE_H_
#define BRAID_KERNELS_CUDA_COMM_GEMM_REFERENCE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::kernels::cuda {

enum class CommPattern { kAllGatherMatMul, kMatMulReduceScatter };
// The looped collective matmul methods of Wang et al. (ASPLOS'23, §3-4).
enum class LoopedMethod { kLooped, kUnrolled, kBidirectional };

std::string_view CommPatternName(CommPattern p);    // "allgather_matmul", "matmul_reducescatter"
std::string_view LoopedMethodName(LoopedMethod m);  // "looped", "unrolled", "bidirectional"

struct CommGemmShape {
  int64_t m = 0, k = 0, nout = 0;  // the whole (unsharded) x [m, k] @ w [k, nout]
};

// Shapes of rank r's shards and output (the same for every rank).
struct ShardShapes {
  int64_t x_rows = 0, x_cols = 0, w_rows = 0, w_cols = 0, out_rows = 0, out_cols = 0;
};
ShardShapes ShardShapesOf(CommPattern p, const CommGemmShape& s, int n);

// The shard layout's requirements: m, k, nout >= 1; m a multiple of n; and
// nout (AllGather) or k (ReduceScatter) a multiple of n. InvalidArgument
// "<what>: <dim> = v is not a multiple of n = n" otherwise.
absl::Status CheckShardable(const std::string& what, CommPattern p, const CommGemmShape& s, int n);

// The n shards of the full x [m, k] / w [k, nout] (row-major) in the layout
// above. The shape must divide as CanImplement* checks.
std::vector<std::vector<float>> ShardX(CommPattern p, const CommGemmShape& s, int n,
                                       const std::vector<float>& x);
std::vector<std::vector<float>> ShardW(CommPattern p, const CommGemmShape& s, int n,
                                       const std::vector<float>& w);

// Row-major a [rows, inner] @ b [inner, cols], accumulated in double.
std::vector<float> HostMatMul(const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                              int64_t inner, int64_t cols);

// Every rank's out_r from the shards alone, by the collective's definition:
// AllGather: the gathered x times w_r; ReduceScatter: rank r's rows of the
// sum of all partial products (summed in double, rank order). InvalidArgument
// for wrong shard counts or sizes or a shape that does not divide by n.
absl::StatusOr<std::vector<std::vector<float>>> ReferenceCommGemm(
    CommPattern p, const CommGemmShape& s, int n, const std::vector<std::vector<float>>& x_shards,
    const std::vector<std::vector<float>>& w_shards);

// ---- fused (Flux) kernel schedule ------------------------------------------

// One output tile of a rank's GEMM: row block and column block indices.
struct TileCoord {
  int32_t row_block = 0, col_block = 0;
  bool operator==(const TileCoord& o) const { return row_block == o.row_block && col_block == o.col_block; }
};

// The geometry of rank r's fused GEMM: its output is [gemm_m, gemm_n] in
// tile_m x tile_n tiles (the last column block may be partial); every
// `rows_per_rank` rows belong to one rank (RS: the owner the epilogue writes
// to; AG: the rank whose x chunk those rows are), split into
// `chunks_per_rank` signal chunks (AG only).
struct FusedTileGeometry {
  int n = 1;
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  int64_t rows_per_rank = 0;
  int tile_m = 64, tile_n = 64;
  int chunks_per_rank = 1;
  int64_t row_blocks() const { return gemm_m / tile_m; }
  int64_t col_blocks() const { return (gemm_n + tile_n - 1) / tile_n; }
  int64_t row_blocks_per_rank() const { return rows_per_rank / tile_m; }
  int64_t tiles() const { return row_blocks() * col_blocks(); }
  int64_t chunk_rows() const { return rows_per_rank / chunks_per_rank; }
};
FusedTileGeometry FusedGeometry(CommPattern p, const CommGemmShape& s, int n, int tile_m, int tile_n,
                                int chunks_per_rank);

// The rank whose rows a row block holds (RS: the tile's owner).
int TileOwner(const FusedTileGeometry& g, int32_t row_block);
// The AllGather signal chunk a row block reads (rank * chunks_per_rank + sub-chunk).
int TileChunk(const FusedTileGeometry& g, int32_t row_block);

// The order in which rank `rank`'s thread blocks visit the tiles (block b
// computes tile order[b]); every tile exactly once.
//  - RS (Flux §4.1): owners in the order rank+1, rank+2, ..., rank (its own
//    rows last), so at any moment the n ranks write to n different peers
//    instead of all to rank 0 first.
//  - AG (Flux §3.2, §4.3): chunks in the order they arrive: the local chunk
//    (its flag set first), then rank+1, rank+2, ... (the copy order).
std::vector<TileCoord> FusedTileOrder(CommPattern p, const FusedTileGeometry& g, int rank);

// The order in which rank `rank` pulls the peers' x chunks for the fused
// AllGather: its own first, then rank+1, rank+2, ... (Flux §4.3, "a ring
// order starting after the local rank").
std::vector<int> AllGatherCopyOrder(int rank, int n);

// ---- looped collective matmul schedule (ASPLOS'23) -------------------------

// A rank's m/n rows cut into the pieces a method moves separately: one
// (looped), or two halves (floor, ceil) travelling the ring in direction
// `dir` (+1: sent to rank r+1, received from r-1; -1: the other way). The
// unrolled method sends both halves the same way; bidirectional sends the
// second half the other way.
struct LoopedPiece {
  int64_t off = 0, len = 0;
  int dir = 1;
};
std::vector<LoopedPiece> LoopedPieces(LoopedMethod m, int64_t rows_per_rank);

// AllGather: the chunk (source rank) whose piece rank `rank` holds, multiplies
// and forwards at step s (0..n-1) when the piece travels in direction dir.
int LoopedAllGatherChunk(int rank, int n, int step, int dir);
// ReduceScatter: the row block whose partial rank `rank` computes at step s,
// adds to the accumulator received from rank - dir and passes to rank + dir;
// at the last step it is the rank's own block.
int LoopedReduceScatterBlock(int rank, int n, int step, int dir);

// One rank's work on one piece at one step of a looped method.
struct LoopedStep {
  int step = 0, rank = 0, piece = 0;
  int block = 0;     // AG: chunk multiplied; RS: row block computed and accumulated
  int send_to = -1;  // -1: nothing sent (the last step)
  int recv_from = -1;
};
// The whole schedule, step-major then rank then piece, made of the
// functions above (the ones comm_gemm.cc calls), for the tests to follow.
// n >= 1.
std::vector<LoopedStep> LoopedSchedule(CommPattern p, LoopedMethod m, int n);

// The looped methods as a list of operations on each rank's buffers: what
// CommGemmGroup::RunLooped executes (GEMMs on cuBLASLt, exchanges as one
// ncclGroup of ncclSend/ncclRecv, ordered by events as each op says) and
// RunLoopedPlanOnHost executes in order on host vectors, so the buffer
// offsets are tested without a GPU.
enum class LoopedBuffer : uint8_t {
  kX,         // the rank's x shard
  kOut,       // the rank's output
  kGathered,  // AllGather: [m, k], the chunks received
  kAcc,       // ReduceScatter: [n steps][m/n, nout], the accumulators sent
  kIncoming,  // ReduceScatter: [n steps][m/n, nout], the accumulators received
};
struct BufferRef {
  LoopedBuffer buffer = LoopedBuffer::kX;
  int64_t offset = 0;  // floats
};
struct LoopedOp {
  enum class Kind : uint8_t { kGemm, kExchange };
  Kind kind = Kind::kGemm;
  int step = 0, piece = 0;
  // kGemm, on rank `rank`'s compute stream: d [rows, cols] = a [rows, inner]
  // @ w_r (+ c when beta = 1). Waits for the receives of op `wait_exchange`
  // (an index into ops; -1: none); `feeds_exchange`: the piece's next
  // exchange sends d, so it waits for this GEMM.
  int rank = 0;
  BufferRef a, c, d;
  int64_t rows = 0, inner = 0, cols = 0;
  float beta = 0.0f;
  int wait_exchange = -1;
  bool feeds_exchange = false;
  // kExchange, on the piece's communicator and stream: every rank r sends
  // `count` floats at send[r] to r + dir and receives them from r - dir
  // into recv[r].
  int dir = 1;
  int64_t count = 0;
  std::vector<BufferRef> send, recv;
};
struct LoopedPlan {
  std::vector<LoopedOp> ops;
  int pieces = 1;
  // Per-rank workspace sizes in floats.
  int64_t gathered_floats = 0, acc_floats = 0, incoming_floats = 0;
};
// The shape must pass CanImplementLoopedCommGemm's divisibility rules.
LoopedPlan PlanLooped(CommPattern p, LoopedMethod m, const CommGemmShape& s, int n);

// Executes `plan` on host shards (ops in order, GEMMs in double): every
// rank's output. Internal when an op reaches outside a buffer or a GEMM
// reads a received range no exchange has written; InvalidArgument for
// shards of the wrong count or size.
absl::StatusOr<std::vector<std::vector<float>>> RunLoopedPlanOnHost(
    const LoopedPlan& plan, CommPattern p, const CommGemmShape& s, int n,
    const std::vector<std::vector<float>>& x_shards, const std::vector<std::vector<float>>& w_shards);

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_COMM_GEMM_REFERENCE_H_
