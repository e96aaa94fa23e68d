#include "kernels/cuda/comm_gemm_reference.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::kernels::cuda {
namespace {

int Mod(int64_t a, int64_t n) { return static_cast<int>(((a % n) + n) % n); }

// Columns [c0, c0 + cols) of a row-major [rows, total_cols] matrix.
std::vector<float> Columns(const std::vector<float>& a, int64_t rows, int64_t total_cols, int64_t c0,
                           int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = a[i * total_cols + c0 + j];
  }
  return out;
}

// Rows [r0, r0 + rows) of a row-major matrix with `cols` columns.
std::vector<float> Rows(const std::vector<float>& a, int64_t cols, int64_t r0, int64_t rows) {
  return std::vector<float>(a.begin() + r0 * cols, a.begin() + (r0 + rows) * cols);
}

}  // namespace

std::string_view CommPatternName(CommPattern p) {
  return p == CommPattern::kAllGatherMatMul ? "allgather_matmul" : "matmul_reducescatter";
}

std::string_view LoopedMethodName(LoopedMethod m) {
  switch (m) {
    case LoopedMethod::kLooped:
      return "looped";
    case LoopedMethod::kUnrolled:
      return "unrolled";
    case LoopedMethod::kBidirectional:
      return "bidirectional";
  }
  return "unknown";
}

ShardShapes ShardShapesOf(CommPattern p, const CommGemmShape& s, int n) {
  if (p == CommPattern::kAllGatherMatMul) return {s.m / n, s.k, s.k, s.nout / n, s.m, s.nout / n};
  return {s.m, s.k / n, s.k / n, s.nout, s.m / n, s.nout};
}

std::vector<std::vector<float>> ShardX(CommPattern p, const CommGemmShape& s, int n,
                                       const std::vector<float>& x) {
  const ShardShapes sh = ShardShapesOf(p, s, n);
  std::vector<std::vector<float>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(p == CommPattern::kAllGatherMatMul ? Rows(x, s.k, r * sh.x_rows, sh.x_rows)
                                                     : Columns(x, s.m, s.k, r * sh.x_cols, sh.x_cols));
  }
  return out;
}

std::vector<std::vector<float>> ShardW(CommPattern p, const CommGemmShape& s, int n,
                                       const std::vector<float>& w) {
  const ShardShapes sh = ShardShapesOf(p, s, n);
  std::vector<std::vector<float>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(p == CommPattern::kAllGatherMatMul ? Columns(w, s.k, s.nout, r * sh.w_cols, sh.w_cols)
                                                     : Rows(w, s.nout, r * sh.w_rows, sh.w_rows));
  }
  return out;
}

std::vector<float> HostMatMul(const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                              int64_t inner, int64_t cols) {
  std::vector<double> acc(static_cast<size_t>(cols));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t q = 0; q < inner; ++q) {
      const double av = a[i * inner + q];
      const float* brow = b.data() + q * cols;
      for (int64_t j = 0; j < cols; ++j) acc[j] += av * brow[j];
    }
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(acc[j]);
  }
  return out;
}

absl::Status CheckShardable(const std::string& what, CommPattern p, const CommGemmShape& s, int n) {
  if (s.m < 1 || s.k < 1 || s.nout < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": m, k, nout must be >= 1, got ", s.m, ", ", s.k, ", ", s.nout));
  }
  if (s.m % n != 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": m = ", s.m, " is not a multiple of n = ", n));
  if (p == CommPattern::kAllGatherMatMul && s.nout % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": nout = ", s.nout, " is not a multiple of n = ", n));
  }
  if (p == CommPattern::kMatMulReduceScatter && s.k % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": k = ", s.k, " is not a multiple of n = ", n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<float>>> ReferenceCommGemm(
    CommPattern p, const CommGemmShape& s, int n, const std::vector<std::vector<float>>& x_shards,
    const std::vector<std::vector<float>>& w_shards) {
  const std::string what = absl::StrCat("comm gemm reference (", std::string(CommPatternName(p)), ")");
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": n = ", n, " ranks"));
  RETURN_IF_ERROR(CheckShardable(what, p, s, n));
  const ShardShapes sh = ShardShapesOf(p, s, n);
  if (x_shards.size() != static_cast<size_t>(n) || w_shards.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", x_shards.size(), " x shards and ",
                                                   w_shards.size(), " w shards for n = ", n));
  }
  for (int r = 0; r < n; ++r) {
    if (static_cast<int64_t>(x_shards[r].size()) != sh.x_rows * sh.x_cols) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": x shard ", r, " has ", x_shards[r].size(),
                                                     " floats, want ", sh.x_rows, "x", sh.x_cols));
    }
    if (static_cast<int64_t>(w_shards[r].size()) != sh.w_rows * sh.w_cols) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": w shard ", r, " has ", w_shards[r].size(),
                                                     " floats, want ", sh.w_rows, "x", sh.w_cols));
    }
  }
  std::vector<std::vector<float>> outs;
  if (p == CommPattern::kAllGatherMatMul) {
    std::vector<float> gathered;
    gathered.reserve(static_cast<size_t>(s.m * s.k));
    for (const std::vector<float>& xr : x_shards) gathered.insert(gathered.end(), xr.begin(), xr.end());
    for (int r = 0; r < n; ++r) outs.push_back(HostMatMul(gathered, w_shards[r], s.m, s.k, sh.w_cols));
    return outs;
  }
  // ReduceScatter: sum the partial products in double, then scatter rows.
  std::vector<double> sum(static_cast<size_t>(s.m * s.nout), 0.0);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t q = 0; q < sh.x_cols; ++q) {
        const double av = x_shards[r][i * sh.x_cols + q];
        const float* brow = w_shards[r].data() + q * s.nout;
        double* srow = sum.data() + i * s.nout;
        for (int64_t j = 0; j < s.nout; ++j) srow[j] += av * brow[j];
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    std::vector<float> o(static_cast<size_t>(sh.out_rows * s.nout));
    for (int64_t i = 0; i < sh.out_rows * s.nout; ++i)
      o[i] = static_cast<float>(sum[r * sh.out_rows * s.nout + i]);
    outs.push_back(std::move(o));
  }
  return outs;
}

FusedTileGeometry FusedGeometry(CommPattern p, const CommGemmShape& s, int n, int tile_m, int tile_n,
                                int chunks_per_rank) {
  FusedTileGeometry g;
  g.n = n;
  g.tile_m = tile_m;
  g.tile_n = tile_n;
  g.chunks_per_rank = p == CommPattern::kAllGatherMatMul ? chunks_per_rank : 1;
  g.gemm_m = s.m;
  g.rows_per_rank = s.m / n;
  if (p == CommPattern::kAllGatherMatMul) {
    g.gemm_n = s.nout / n;
    g.gemm_k = s.k;
  } else {
    g.gemm_n = s.nout;
    g.gemm_k = s.k / n;
  }
  return g;
}

int TileOwner(const FusedTileGeometry& g, int32_t row_block) {
  return static_cast<int>(row_block / g.row_blocks_per_rank());
}

int TileChunk(const FusedTileGeometry& g, int32_t row_block) {
  return static_cast<int>((int64_t{row_block} * g.tile_m) / g.chunk_rows());
}

std::vector<TileCoord> FusedTileOrder(CommPattern p, const FusedTileGeometry& g, int rank) {
  // Both patterns visit the ranks' row groups in a ring order; they differ
  // in where it starts: RS one past the rank (its own rows last), AG at the
  // rank itself (the local chunk is ready first).
  const int first = p == CommPattern::kMatMulReduceScatter ? rank + 1 : rank;
  std::vector<TileCoord> order;
  order.reserve(static_cast<size_t>(g.tiles()));
  const int64_t per_rank = g.row_blocks_per_rank();
  for (int i = 0; i < g.n; ++i) {
    const int owner = Mod(first + i, g.n);
    for (int64_t rb = 0; rb < per_rank; ++rb) {
      for (int64_t cb = 0; cb < g.col_blocks(); ++cb) {
        order.push_back({static_cast<int32_t>(owner * per_rank + rb), static_cast<int32_t>(cb)});
      }
    }
  }
  return order;
}

std::vector<int> AllGatherCopyOrder(int rank, int n) {
  std::vector<int> order;
  for (int i = 0; i < n; ++i) order.push_back(Mod(rank + i, n));
  return order;
}

std::vector<LoopedPiece> LoopedPieces(LoopedMethod m, int64_t rows_per_rank) {
  if (m == LoopedMethod::kLooped) return {{0, rows_per_rank, 1}};
  const int64_t h = rows_per_rank / 2;
  return {{0, h, 1}, {h, rows_per_rank - h, m == LoopedMethod::kBidirectional ? -1 : 1}};
}

int LoopedAllGatherChunk(int rank, int n, int step, int dir) {
  return Mod(int64_t{rank} - int64_t{dir} * step, n);
}

int LoopedReduceScatterBlock(int rank, int n, int step, int dir) {
  return Mod(int64_t{rank} - int64_t{dir} * (step + 1), n);
}

std::vector<LoopedStep> LoopedSchedule(CommPattern p, LoopedMethod m, int n) {
  // Piece directions only: the schedule does not depend on the row counts.
  const std::vector<LoopedPiece> pieces = LoopedPieces(m, 2);
  std::vector<LoopedStep> out;
  for (int step = 0; step < n; ++step) {
    for (int r = 0; r < n; ++r) {
      for (size_t pi = 0; pi < pieces.size(); ++pi) {
        const int dir = pieces[pi].dir;
        LoopedStep st;
        st.step = step;
        st.rank = r;
        st.piece = static_cast<int>(pi);
        st.block = p == CommPattern::kAllGatherMatMul ? LoopedAllGatherChunk(r, n, step, dir)
                                                      : LoopedReduceScatterBlock(r, n, step, dir);
        if (step < n - 1) {
          st.send_to = Mod(r + dir, n);
          st.recv_from = Mod(r - dir, n);
        }
        out.push_back(st);
      }
    }
  }
  return out;
}

LoopedPlan PlanLooped(CommPattern p, LoopedMethod m, const CommGemmShape& s, int n) {
  const int64_t rows = s.m / n;
  const std::vector<LoopedPiece> pieces = LoopedPieces(m, rows);
  LoopedPlan plan;
  plan.pieces = static_cast<int>(pieces.size());
  // last_exchange[piece]: index of the piece's latest exchange op.
  std::vector<int> last_exchange(pieces.size(), -1);
  if (p == CommPattern::kAllGatherMatMul) {
    const int64_t cols = s.nout / n;
    plan.gathered_floats = s.m * s.k;
    // Where rank r keeps piece `pc` of chunk c: its own x, or the gathered
    // buffer at the chunk's rows (received pieces are never overwritten).
    auto rows_of = [&](int r, int c, const LoopedPiece& pc) {
      return c == r ? BufferRef{LoopedBuffer::kX, pc.off * s.k}
                    : BufferRef{LoopedBuffer::kGathered, (c * rows + pc.off) * s.k};
    };
    for (int step = 0; step < n; ++step) {
      for (size_t pi = 0; pi < pieces.size(); ++pi) {
        const LoopedPiece& pc = pieces[pi];
        // The GEMM of the piece in hand needs the previous step's receive;
        // this step's exchange (forward it, receive the next) is issued
        // first and overlaps it.
        const int wait = last_exchange[pi];
        if (step < n - 1) {
          LoopedOp ex;
          ex.kind = LoopedOp::Kind::kExchange;
          ex.step = step;
          ex.piece = static_cast<int>(pi);
          ex.dir = pc.dir;
          ex.count = pc.len * s.k;
          for (int r = 0; r < n; ++r) {
            ex.send.push_back(rows_of(r, LoopedAllGatherChunk(r, n, step, pc.dir), pc));
            ex.recv.push_back(rows_of(r, LoopedAllGatherChunk(r, n, step + 1, pc.dir), pc));
          }
          last_exchange[pi] = static_cast<int>(plan.ops.size());
          plan.ops.push_back(std::move(ex));
        }
        for (int r = 0; r < n; ++r) {
          const int c = LoopedAllGatherChunk(r, n, step, pc.dir);
          LoopedOp g;
          g.step = step;
          g.piece = static_cast<int>(pi);
          g.dir = pc.dir;
          g.rank = r;
          g.a = rows_of(r, c, pc);
          g.d = {LoopedBuffer::kOut, (c * rows + pc.off) * cols};
          g.rows = pc.len;
          g.inner = s.k;
          g.cols = cols;
          g.wait_exchange = wait;
          plan.ops.push_back(g);
        }
      }
    }
    return plan;
  }
  const int64_t kl = s.k / n, slab = rows * s.nout;
  plan.acc_floats = n * slab;
  plan.incoming_floats = n * slab;
  for (int step = 0; step < n; ++step) {
    const bool last = step == n - 1;
    for (size_t pi = 0; pi < pieces.size(); ++pi) {
      const LoopedPiece& pc = pieces[pi];
      // The partial of this step's block plus the accumulator received at
      // the previous step (beta = 1), then sent on; the last step writes
      // the output. One accumulator and one receive slab per step, so no
      // buffer is rewritten while a transfer may read it.
      for (int r = 0; r < n; ++r) {
        const int block = LoopedReduceScatterBlock(r, n, step, pc.dir);
        LoopedOp g;
        g.step = step;
        g.piece = static_cast<int>(pi);
        g.dir = pc.dir;
        g.rank = r;
        g.a = {LoopedBuffer::kX, (block * rows + pc.off) * kl};
        g.d = last ? BufferRef{LoopedBuffer::kOut, pc.off * s.nout}
                   : BufferRef{LoopedBuffer::kAcc, step * slab + pc.off * s.nout};
        if (step > 0) {
          g.c = {LoopedBuffer::kIncoming, (step - 1) * slab + pc.off * s.nout};
          g.beta = 1.0f;
          g.wait_exchange = last_exchange[pi];
        }
        g.rows = pc.len;
        g.inner = kl;
        g.cols = s.nout;
        g.feeds_exchange = !last;
        plan.ops.push_back(g);
      }
      if (last) continue;
      LoopedOp ex;
      ex.kind = LoopedOp::Kind::kExchange;
      ex.step = step;
      ex.piece = static_cast<int>(pi);
      ex.dir = pc.dir;
      ex.count = pc.len * s.nout;
      for (int r = 0; r < n; ++r) {
        ex.send.push_back({LoopedBuffer::kAcc, step * slab + pc.off * s.nout});
        ex.recv.push_back({LoopedBuffer::kIncoming, step * slab + pc.off * s.nout});
      }
      last_exchange[pi] = static_cast<int>(plan.ops.size());
      plan.ops.push_back(std::move(ex));
    }
  }
  return plan;
}

absl::StatusOr<std::vector<std::vector<float>>> RunLoopedPlanOnHost(
    const LoopedPlan& plan, CommPattern p, const CommGemmShape& s, int n,
    const std::vector<std::vector<float>>& x_shards, const std::vector<std::vector<float>>& w_shards) {
  const ShardShapes sh = ShardShapesOf(p, s, n);
  if (x_shards.size() != static_cast<size_t>(n) || w_shards.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("looped plan on host: ", x_shards.size(), " x and ",
                                                   w_shards.size(), " w shards for n = ", n));
  }
  struct RankBufs {
    std::vector<float> x, out, gathered, acc, incoming;
    // Ranges written so far in the received buffers, by float (a GEMM must
    // not read what no exchange delivered).
    std::vector<bool> gathered_set, incoming_set;
  };
  std::vector<RankBufs> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (static_cast<int64_t>(x_shards[r].size()) != sh.x_rows * sh.x_cols ||
        static_cast<int64_t>(w_shards[r].size()) != sh.w_rows * sh.w_cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("looped plan on host: shard ", r, " has the wrong size"));
    }
    RankBufs& b = ranks[r];
    b.x = x_shards[r];
    b.out.assign(static_cast<size_t>(sh.out_rows * sh.out_cols), std::nanf(""));
    b.gathered.assign(static_cast<size_t>(plan.gathered_floats), 0.0f);
    b.acc.assign(static_cast<size_t>(plan.acc_floats), 0.0f);
    b.incoming.assign(static_cast<size_t>(plan.incoming_floats), 0.0f);
    b.gathered_set.assign(b.gathered.size(), false);
    b.incoming_set.assign(b.incoming.size(), false);
  }
  // The [offset, offset + count) range of a buffer, checked.
  auto range = [&](int r, const BufferRef& ref, int64_t count, size_t op) -> absl::StatusOr<float*> {
    std::vector<float>* v = nullptr;
    switch (ref.buffer) {
      case LoopedBuffer::kX:
        v = &ranks[r].x;
        break;
      case LoopedBuffer::kOut:
        v = &ranks[r].out;
        break;
      case LoopedBuffer::kGathered:
        v = &ranks[r].gathered;
        break;
      case LoopedBuffer::kAcc:
        v = &ranks[r].acc;
        break;
      case LoopedBuffer::kIncoming:
        v = &ranks[r].incoming;
        break;
    }
    if (ref.offset < 0 || count < 0 || ref.offset + count > static_cast<int64_t>(v->size())) {
      return absl::InternalError(absl::StrCat("looped plan op ", op, ": rank ", r, " range [", ref.offset,
                                              ", ", ref.offset + count, ") outside buffer ",
                                              static_cast<int>(ref.buffer), " of ", v->size(), " floats"));
    }
    return v->data() + ref.offset;
  };
  auto check_set = [&](int r, const BufferRef& ref, int64_t count, size_t op) -> absl::Status {
    const std::vector<bool>* set = ref.buffer == LoopedBuffer::kGathered   ? &ranks[r].gathered_set
                                   : ref.buffer == LoopedBuffer::kIncoming ? &ranks[r].incoming_set
                                                                           : nullptr;
    if (set == nullptr) return absl::OkStatus();
    for (int64_t i = ref.offset; i < ref.offset + count; ++i) {
      if (!(*set)[static_cast<size_t>(i)]) {
        return absl::InternalError(absl::StrCat("looped plan op ", op, ": rank ", r, " reads float ", i,
                                                " of buffer ", static_cast<int>(ref.buffer),
                                                " before any exchange wrote it"));
      }
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const LoopedOp& op = plan.ops[i];
    if (op.kind == LoopedOp::Kind::kExchange) {
      if (op.send.size() != static_cast<size_t>(n) || op.recv.size() != static_cast<size_t>(n)) {
        return absl::InternalError(absl::StrCat("looped plan op ", i, ": exchange without n endpoints"));
      }
      std::vector<std::vector<float>> sent(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        ASSIGN_OR_RETURN(float* src, range(r, op.send[r], op.count, i));
        RETURN_IF_ERROR(check_set(r, op.send[r], op.count, i));
        sent[r].assign(src, src + op.count);
      }
      for (int r = 0; r < n; ++r) {
        const int from = Mod(r - op.dir, n);
        ASSIGN_OR_RETURN(float* dst, range(r, op.recv[r], op.count, i));
        std::copy(sent[from].begin(), sent[from].end(), dst);
        std::vector<bool>* set = op.recv[r].buffer == LoopedBuffer::kGathered   ? &ranks[r].gathered_set
                                 : op.recv[r].buffer == LoopedBuffer::kIncoming ? &ranks[r].incoming_set
                                                                                : nullptr;
        if (set != nullptr) std::fill_n(set->begin() + op.recv[r].offset, op.count, true);
      }
      continue;
    }
    const int r = op.rank;
    if (op.inner != sh.w_rows || op.cols != sh.w_cols) {
      return absl::InternalError(absl::StrCat("looped plan op ", i, ": GEMM ", op.inner, "x", op.cols,
                                              " does not match w shard ", sh.w_rows, "x", sh.w_cols));
    }
    ASSIGN_OR_RETURN(float* a, range(r, op.a, op.rows * op.inner, i));
    RETURN_IF_ERROR(check_set(r, op.a, op.rows * op.inner, i));
    std::vector<float> av(a, a + op.rows * op.inner);
    std::vector<float> prod = HostMatMul(av, w_shards[r], op.rows, op.inner, op.cols);
    if (op.beta != 0.0f) {
      ASSIGN_OR_RETURN(float* c, range(r, op.c, op.rows * op.cols, i));
      RETURN_IF_ERROR(check_set(r, op.c, op.rows * op.cols, i));
      for (size_t q = 0; q < prod.size(); ++q) prod[q] += op.beta * c[q];
    }
    ASSIGN_OR_RETURN(float* d, range(r, op.d, op.rows * op.cols, i));
    std::copy(prod.begin(), prod.end(), d);
  }
  std::vector<std::vector<float>> outs;
  for (RankBufs& b : ranks) outs.push_back(std::move(b.out));
  return outs;
}

}  // namespace braid::kernels::cuda
