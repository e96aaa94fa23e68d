// GEMMs fused or overlapped with tensor-parallel communication on CUDA: the
// GPU counterpart of worker/collective_matmul.h (same patterns, same shard
// layout, see comm_gemm_reference.h), for a group of n GPUs (devices 0..n-1,
// one rank each) driven from ONE host thread that issues to every device.
//
// Two families:
//
//  1. Fused kernels after Flux (Chang et al. 2024, §3-4), one GEMM kernel per
//     rank, CUDA C compiled at run time by NVRTC (comm_gemm_source.cc; like
//     ew_kernel.h, compiling needs no GPU). The GEMM is a plain shared-memory
//     SIMT fp32 tile GEMM (tile_m x tile_n x 16 tiles, 256 threads, each
//     thread a (tile_m/16) x (tile_n/16) register block); NO tensor cores, no
//     TF32, no CUTLASS: the point is the fused communication, not peak FLOPs.
//     - GEMM+ReduceScatter (Flux Alg. 1, the "AlltoAll + local reduction"
//       split of §3.1): rank r computes its partial x_r @ w_r; the epilogue
//       writes each output tile straight into the receive buffer of the rank
//       owning those rows, through a peer pointer (cudaDeviceEnablePeerAccess),
//       in slot r of n; after every rank's GEMM (cross-device events) each
//       owner sums its n slots in rank order with a local kernel. Slots
//       rather than atomicAdd into the owner's output: the sum is
//       deterministic (the same order, so the same bits, on every run),
//       the output needs no zeroing before the GEMM, and peer fp32
//       atomics cost a round trip per element; Flux reports the fused
//       reduction gains little (§3.1). Tiles are visited in an order
//       swizzled by rank (§4.1): rank r starts with the rows owned by rank
//       (r+1) % n and does its own last, so the ranks write to different
//       peers at any moment.
//     - AllGather+GEMM (Flux Alg. 2-3, pull-based, §4.3): rank r's gathered
//       buffer is filled chunk by chunk by cudaMemcpyPeerAsync on a copy
//       stream (order r+1, r+2, ...: "a ring order starting after the local
//       rank"), each copy followed by cuStreamWriteValue32 of a 32-bit signal
//       in rank r's memory (the driver's write has a memory fence before it).
//       The local chunk is copied and signalled first, on the GEMM's own
//       stream. The GEMM kernel's prologue spins (volatile load, __nanosleep)
//       on the signal of the chunk its tile reads, then reads the chunk with
//       L1-bypassing loads; tiles are ordered local chunk first, then in
//       arrival order. Signals carry a run counter (epoch) instead of being
//       reset. A signal not seen within `signal_timeout_s` ends the tile
//       and the run answers DeadlineExceeded instead of hanging the GPU.
//       Communication tiles (signal chunks) are decoupled from GEMM tiles:
//       `chunks_per_rank` cuts each rank's m/n rows (Flux Fig. 10).
//
//  2. Looped collective matmul (Wang et al., ASPLOS'23, §3-4) with NCCL
//     (ncclCommInitAll; ncclSend/ncclRecv in one ncclGroup per step and
//     piece) on communication streams and the chunk GEMMs on cuBLASLt
//     (lt_gemm.h, fp32, no TF32) on a compute stream, ordered by events:
//     - kLooped: n ring steps; AllGather: the GEMM of the chunk held at step
//       s runs while it is forwarded to r+1 and the next one arrives from
//       r-1 (into the gathered buffer, so no buffer is reused); ReduceScatter:
//       at step s rank r computes the partial of block (r-s-1) mod n with
//       the accumulator received from r-1 added by the GEMM itself
//       (beta = 1) and sends it on; the last step writes the output.
//     - kUnrolled: each rank's rows cut in two halves, each with its own
//       communicator and stream, so two transfers are in flight and the
//       second half's transfer overlaps the first half's GEMM (the loop
//       unrolled by 2).
//     - kBidirectional: as unrolled, the second halves travel r -> r-1,
//       using both directions of every link.
//     The ops (GEMMs, exchanges, which event each waits for) come from
//     comm_gemm_reference.h's PlanLooped, which the GPU-less test also
//     executes on host vectors against the reference.
//
// NOT done: tensor cores / TF32 / bf16 in the fused GEMM, inter-node groups
// (one process, devices 0..n-1, n <= 8), push-based AllGather, fused
// (atomic) reduction, multiple processes (no IPC handles), the undecomposed
// baseline, autotuning of tile and chunk sizes. Runs are blocking: each
// Run* waits for every rank's streams before returning.
//
//   CommGemmShape s{.m = 1024, .k = 4096, .nout = 4096};
//   RETURN_IF_ERROR(CanImplementFusedCommGemm(CommPattern::kMatMulReduceScatter, s, 2, {}));
//   ASSIGN_OR_RETURN(std::unique_ptr<CommGemmGroup> g, CommGemmGroup::Create(2));  // devices 0, 1
//   const float* x[] = {x0, x1};  // device r's pointers, ShardShapesOf(...)
//   const float* w[] = {w0, w1};
//   float* out[] = {out0, out1};
//   RETURN_IF_ERROR(g->RunFused(CommPattern::kMatMulReduceScatter, s, {}, x, w, out));
//   RETURN_IF_ERROR(g->RunLooped(CommPattern::kMatMulReduceScatter, LoopedMethod::kBidirectional, s,
//                                x, w, out));
#ifndef BRAID_KERNELS_CUDA_COMM_GEMM_H_
#define BRAID_KERNELS_CUDA_COMM_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/comm_gemm_reference.h"
#include "kernels/cuda/cuda_status.h"

namespace braid::kernels::cuda {

// Most ranks a group holds (one node; the fused kernels take the peers'
// pointers by value).
inline constexpr int kMaxCommGemmRanks = 8;

struct FusedCommGemmParams {
  int tile_m = 64, tile_n = 64;  // each 32, 64 or 128
  int chunks_per_rank = 1;       // AllGather signal chunks per rank's m/n rows
  double signal_timeout_s = 10;  // AllGather: longest wait for one chunk
};

// Like CUTLASS's can_implement; no GPU needed. OK or InvalidArgument naming
// the offending value: n in [2, 8]; m, k, nout >= 1 and below 2^31; m a
// multiple of n; AllGather: nout a multiple of n, m/n a multiple of
// chunks_per_rank and m/n/chunks_per_rank of tile_m; ReduceScatter: k a
// multiple of n, m/n a multiple of tile_m. nout (and k) need not be
// multiples of the tile: the kernels guard partial tiles.
absl::Status CanImplementFusedCommGemm(CommPattern p, const CommGemmShape& s, int n,
                                       const FusedCommGemmParams& params);
// n >= 2 (at most 8); m a multiple of n; AllGather: nout, ReduceScatter: k
// a multiple of n; unrolled and bidirectional: m/n >= 2 (halves floor/ceil).
absl::Status CanImplementLoopedCommGemm(CommPattern p, LoopedMethod m, const CommGemmShape& s, int n);

// Kernel entry names in CommGemmSource().
inline constexpr char kGemmReduceScatterKernel[] = "braid_gemm_rs";
inline constexpr char kReduceSlotsKernel[] = "braid_reduce_slots";
inline constexpr char kAllGatherGemmKernel[] = "braid_gemm_ag";

// The CUDA C of the fused kernels; the tile sizes are -D options.
const std::string& CommGemmSource();

// The fused kernels compiled by NVRTC for one tile size and architecture
// (cubin for an architecture NVRTC targets, PTX of the newest one below it
// otherwise, as CudaEwKernel), cached for the life of the process and loaded
// lazily (cudaLibraryLoadData) on the first launch.
class CommGemmKernels {
 public:
  // InvalidArgument for tile sizes other than 32/64/128; FailedPrecondition
  // for an architecture older than NVRTC targets. No GPU needed.
  static absl::StatusOr<std::shared_ptr<const CommGemmKernels>> Compile(int tile_m, int tile_n, int sm_major,
                                                                        int sm_minor);
  ~CommGemmKernels();
  CommGemmKernels(const CommGemmKernels&) = delete;
  CommGemmKernels& operator=(const CommGemmKernels&) = delete;

  const std::string& target() const { return target_; }  // "sm_90" / "compute_90"
  bool is_ptx() const { return is_ptx_; }
  size_t image_size() const { return image_.size(); }
  const std::string& image() const { return image_; }  // cubin, or PTX with its NUL
  int tile_m() const { return tile_m_; }
  int tile_n() const { return tile_n_; }

  // The three kernels, loaded on first use (needs a driver).
  struct Handles {
    cudaKernel_t gemm_rs = nullptr, reduce = nullptr, gemm_ag = nullptr;
  };
  absl::StatusOr<Handles> Load() const;

 private:
  CommGemmKernels() = default;
  std::string target_, image_;
  bool is_ptx_ = false;
  int tile_m_ = 0, tile_n_ = 0;
  mutable std::mutex mu_;
  mutable cudaLibrary_t library_ = nullptr;
  mutable Handles handles_;
};

// n GPU ranks (devices 0..n-1) with their streams, peer access, NCCL
// communicators (made on first looped run) and workspaces (grown on demand,
// kept between runs). Not thread-safe: one host thread drives all devices.
class CommGemmGroup {
 public:
  // FailedPrecondition "no CUDA device: ..." without a GPU, and
  // "comm gemm: N ranks need N CUDA devices (found M)" with too few;
  // InvalidArgument for n outside [2, 8].
  static absl::StatusOr<std::unique_ptr<CommGemmGroup>> Create(int n);
  ~CommGemmGroup();
  CommGemmGroup(const CommGemmGroup&) = delete;
  CommGemmGroup& operator=(const CommGemmGroup&) = delete;

  int ranks() const { return static_cast<int>(ranks_.size()); }

  // x[r], w[r], out[r]: device pointers on device r, row-major, of the
  // ShardShapesOf(p, s, n) sizes, x and w already written (synchronized).
  // Blocks until every out[r] is written. CanImplement's InvalidArgument;
  // FailedPrecondition for a fused ReduceScatter without peer access;
  // DeadlineExceeded when an AllGather signal never arrives.
  absl::Status RunFused(CommPattern p, const CommGemmShape& s, const FusedCommGemmParams& params,
                        absl::Span<const float* const> x, absl::Span<const float* const> w,
                        absl::Span<float* const> out);
  absl::Status RunLooped(CommPattern p, LoopedMethod m, const CommGemmShape& s,
                         absl::Span<const float* const> x, absl::Span<const float* const> w,
                         absl::Span<float* const> out);

 private:
  struct Rank;
  CommGemmGroup() = default;
  absl::Status CheckPointers(absl::Span<const float* const> x, absl::Span<const float* const> w,
                             absl::Span<float* const> out) const;
  absl::Status RunFusedReduceScatter(const CommGemmShape& s, const FusedCommGemmParams& params,
                                     absl::Span<const float* const> x, absl::Span<const float* const> w,
                                     absl::Span<float* const> out);
  absl::Status RunFusedAllGather(const CommGemmShape& s, const FusedCommGemmParams& params,
                                 absl::Span<const float* const> x, absl::Span<const float* const> w,
                                 absl::Span<float* const> out);
  // Executes PlanLooped's ops (comm_gemm_reference.h) on the devices.
  absl::Status RunLoopedPlan(const LoopedPlan& plan, absl::Span<const float* const> x,
                             absl::Span<const float* const> w, absl::Span<float* const> out);
  absl::Status EnsureNccl(int pieces);
  absl::Status SyncAll();

  std::vector<std::unique_ptr<Rank>> ranks_;
  bool all_peers_ = false;  // every pair has peer access enabled
  int peer_missing_a_ = -1, peer_missing_b_ = -1;
  uint32_t epoch_ = 0;  // AllGather signal value of the current run
};

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_COMM_GEMM_H_
