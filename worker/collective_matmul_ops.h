// The decomposed collective matmuls of worker/collective_matmul.h as
// functions a rank program calls inside its own computation (the overlapped
// tensor-parallel training of worker/overlap_train.h runs every
// AllGather->MatMul and MatMul->ReduceScatter pair of its forward and
// backward through them, each pair with its own method). Same shard layouts,
// methods, ring schedules and tags as collective_matmul.cc's measurement
// (that file implements them); a call's sends and receives are all waited on
// before it returns, so consecutive calls on one group do not interleave.
//
//   at::Tensor xg;  // also wanted: the gathered input (for a weight gradient)
//   at::Tensor h = cmm::AllGatherMatMul(*pg, rank, n, x_r, w1_r,
//                                       DecomposeMethod::kLooped, &xg);
//   at::Tensor y_r = cmm::MatMulReduceScatter(*pg, rank, n, relu(h), w2_r,
//                                             DecomposeMethod::kBidirectional);
//
// This header includes LibTorch and c10d (collective_matmul.h does not).
#ifndef BRAID_WORKER_COLLECTIVE_MATMUL_OPS_H_
#define BRAID_WORKER_COLLECTIVE_MATMUL_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "worker/collective_matmul.h"

namespace braid::worker::cmm {

// The state one rank keeps for both patterns: its shards and the group.
// AllGather->MatMul: x [m/n, k], w [k, nout/n]. MatMul->ReduceScatter:
// x [m, k/n], w [k/n, nout].
struct RankState {
  c10d::ProcessGroupGloo* pg = nullptr;
  int rank = 0, n = 1;
  int64_t m = 0, k = 0, nout = 0;
  at::Tensor x, w;  // this rank's shards
};

// AllGather->MatMul decomposed (looped / unrolled / bidirectional): out
// [m, nout/n]. `gathered`, when not null, receives AllGather(x) [m, k]: the
// chunks are received straight into it (no extra copy).
at::Tensor AllGatherMatMulLooped(const RankState& s, DecomposeMethod method,
                                 at::Tensor* gathered = nullptr);

// Gloo's allgather of x's rows: [m, k].
at::Tensor AllGather(const RankState& s);

// The ring reduce-scatter of a [m, nout] sum whose per-rank partial rows
// [row, row + len) of piece p `partial(row, len, p)` makes (a GEMM: the
// decomposed MatMul->ReduceScatter; a view of a precomputed partial: the
// plain reduce-scatter, added in place). Returns rows [r*m/n, (r+1)*m/n).
at::Tensor RingReduceScatter(const RankState& s, DecomposeMethod method,
                             const std::function<at::Tensor(int64_t, int64_t, int64_t)>& partial);

// The pair by `method` (kNone: the collective, then one GEMM; or one GEMM,
// then the ring reduce-scatter). Shapes from the operands: AllGather->MatMul
// x [m/n, k] (made contiguous), w [k, nout/n] (any strides: a transposed
// view is fine); MatMul->ReduceScatter x [m, k/n], w [k/n, nout]. The caller
// checks CanDecompose.
at::Tensor AllGatherMatMul(c10d::ProcessGroupGloo& pg, int rank, int n, const at::Tensor& x,
                           const at::Tensor& w, DecomposeMethod method,
                           at::Tensor* gathered = nullptr);
at::Tensor MatMulReduceScatter(c10d::ProcessGroupGloo& pg, int rank, int n, const at::Tensor& x,
                               const at::Tensor& w, DecomposeMethod method);

}  // namespace braid::worker::cmm

#endif  // BRAID_WORKER_COLLECTIVE_MATMUL_OPS_H_
