// comm_gemm on any machine: NVRTC compiles of the fused kernels for sm_80
// and sm_90, the host references against a whole-matrix product split by
// hand, the fused tile orders and the looped schedules (simulated: every
// chunk reaches every rank once, every partial reaches its owner once),
// CanImplement's messages and the no-device statuses. Running the kernels is
// comm_gemm_gpu_test.cc's job.
#include "kernels/cuda/comm_gemm.h"

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/comm_gemm_reference.h"
#include "kernels/cuda/cuda_status.h"

namespace braid::kernels::cuda {
namespace {

using ::testing::HasSubstr;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// ---- NVRTC -------------------------------------------------------------------

TEST(CommGemmKernelsTest, CompilesForAmpereAndHopper) {
  // Each compile takes most of a second: the default tile on both
  // architectures, the extreme aspect ratios on one each.
  struct Case {
    int major, minor, tm, tn;
  };
  for (const Case& c : {Case{8, 0, 64, 64}, Case{9, 0, 64, 64}, Case{8, 0, 128, 32}, Case{9, 0, 32, 128}}) {
    const int major = c.major, minor = c.minor, tm = c.tm, tn = c.tn;
    {
      absl::StatusOr<std::shared_ptr<const CommGemmKernels>> k =
          CommGemmKernels::Compile(tm, tn, major, minor);
      ASSERT_TRUE(k.ok()) << k.status();
      EXPECT_EQ((*k)->target(), absl::StrCat("sm_", major * 10 + minor));
      EXPECT_FALSE((*k)->is_ptx());
      EXPECT_GT((*k)->image_size(), 1000u);
      EXPECT_EQ((*k)->tile_m(), tm);
      EXPECT_EQ((*k)->tile_n(), tn);
      // The three extern "C" entries are in the image's symbol table.
      for (const char* name : {kGemmReduceScatterKernel, kReduceSlotsKernel, kAllGatherGemmKernel}) {
        EXPECT_THAT((*k)->image(), HasSubstr(name)) << name;
      }
      // Cached: the same object the second time.
      absl::StatusOr<std::shared_ptr<const CommGemmKernels>> again =
          CommGemmKernels::Compile(tm, tn, major, minor);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(k->get(), again->get());
    }
  }
}

TEST(CommGemmKernelsTest, SourceHasTheThreeKernelsAndTileMacros) {
  const std::string& src = CommGemmSource();
  for (const char* name : {kGemmReduceScatterKernel, kReduceSlotsKernel, kAllGatherGemmKernel}) {
    EXPECT_THAT(src, HasSubstr(absl::StrCat(name, "("))) << name;
  }
  EXPECT_THAT(src, HasSubstr("BRAID_BM"));
  EXPECT_THAT(src, HasSubstr("__ldcg"));             // AG reads chunks around L1
  EXPECT_THAT(src, HasSubstr("volatile unsigned"));  // AG spins on its signal
}

TEST(CommGemmKernelsTest, RejectsBadTilesAndOldOrUnknownArchitectures) {
  absl::StatusOr<std::shared_ptr<const CommGemmKernels>> k = CommGemmKernels::Compile(48, 64, 9, 0);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(), HasSubstr("tile_m = 48"));
  k = CommGemmKernels::Compile(64, 16, 9, 0);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(), HasSubstr("tile_n = 16"));
  k = CommGemmKernels::Compile(64, 64, 3, 0);  // Kepler: no NVRTC targets it
  EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition);
  // An architecture NVRTC does not list: PTX of an older one.
  k = CommGemmKernels::Compile(64, 64, 9, 9);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE((*k)->is_ptx());
  EXPECT_THAT((*k)->target(), HasSubstr("compute_"));
  EXPECT_THAT((*k)->image(), HasSubstr(absl::StrCat(".entry ", kAllGatherGemmKernel)));
}

// ---- references --------------------------------------------------------------

// x [m, k] @ w [k, nout] written out plainly, then split by hand.
std::vector<std::vector<float>> ByHand(CommPattern p, const CommGemmShape& s, int n,
                                       const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<double> full(static_cast<size_t>(s.m * s.nout), 0.0);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.nout; ++j)
      for (int64_t q = 0; q < s.k; ++q) full[i * s.nout + j] += double{x[i * s.k + q]} * w[q * s.nout + j];
  std::vector<std::vector<float>> outs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (p == CommPattern::kAllGatherMatMul) {  // columns [r*nout/n, ...)
      const int64_t cols = s.nout / n;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < cols; ++j)
          outs[r].push_back(static_cast<float>(full[i * s.nout + r * cols + j]));
    } else {  // rows [r*m/n, ...)
      const int64_t rows = s.m / n;
      for (int64_t i = r * rows; i < (r + 1) * rows; ++i)
        for (int64_t j = 0; j < s.nout; ++j) outs[r].push_back(static_cast<float>(full[i * s.nout + j]));
    }
  }
  return outs;
}

TEST(CommGemmReferenceTest, EqualsTheWholeProductSplitByHand) {
  const CommGemmShape shapes[] = {{8, 8, 8}, {16, 12, 20}, {32, 24, 12}, {4, 4, 4}};
  uint32_t seed = 1;
  for (CommPattern p : {CommPattern::kAllGatherMatMul, CommPattern::kMatMulReduceScatter}) {
    for (const CommGemmShape& s : shapes) {
      for (int n : {2, 4}) {
        SCOPED_TRACE(absl::StrCat(std::string(CommPatternName(p)), " m=", s.m, " k=", s.k, " nout=", s.nout,
                                  " n=", n));
        const std::vector<float> x = Random(s.m * s.k, seed++);
        const std::vector<float> w = Random(s.k * s.nout, seed++);
        const std::vector<std::vector<float>> xs = ShardX(p, s, n, x), ws = ShardW(p, s, n, w);
        const ShardShapes sh = ShardShapesOf(p, s, n);
        ASSERT_EQ(xs.size(), static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(static_cast<int64_t>(xs[r].size()), sh.x_rows * sh.x_cols);
          ASSERT_EQ(static_cast<int64_t>(ws[r].size()), sh.w_rows * sh.w_cols);
        }
        absl::StatusOr<std::vector<std::vector<float>>> got = ReferenceCommGemm(p, s, n, xs, ws);
        ASSERT_TRUE(got.ok()) << got.status();
        const std::vector<std::vector<float>> want = ByHand(p, s, n, x, w);
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ((*got)[r].size(), want[r].size()) << "rank " << r;
          EXPECT_EQ(static_cast<int64_t>(want[r].size()), sh.out_rows * sh.out_cols);
          for (size_t i = 0; i < want[r].size(); ++i) {
            ASSERT_NEAR((*got)[r][i], want[r][i], 1e-5) << "rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(CommGemmReferenceTest, ShardLayoutMatchesCollectiveMatmul) {
  const CommGemmShape s{4, 6, 8};
  std::vector<float> x(24), w(48);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  // AllGather: x by rows, w by columns.
  auto xs = ShardX(CommPattern::kAllGatherMatMul, s, 2, x);
  auto ws = ShardW(CommPattern::kAllGatherMatMul, s, 2, w);
  EXPECT_EQ(xs[1][0], 12.0f);  // row 2
  EXPECT_EQ(ws[1][0], 4.0f);   // column 4 of row 0
  EXPECT_EQ(ws[1][4], 12.0f);  // column 4 of row 1
  // ReduceScatter: x by columns, w by rows.
  xs = ShardX(CommPattern::kMatMulReduceScatter, s, 2, x);
  ws = ShardW(CommPattern::kMatMulReduceScatter, s, 2, w);
  EXPECT_EQ(xs[1][0], 3.0f);   // column 3 of row 0
  EXPECT_EQ(xs[1][3], 9.0f);   // column 3 of row 1
  EXPECT_EQ(ws[1][0], 24.0f);  // row 3
}

TEST(CommGemmReferenceTest, RejectsWrongShards) {
  const CommGemmShape s{8, 8, 8};
  auto xs = ShardX(CommPattern::kAllGatherMatMul, s, 2, Random(64, 1));
  auto ws = ShardW(CommPattern::kAllGatherMatMul, s, 2, Random(64, 2));
  absl::StatusOr<std::vector<std::vector<float>>> r =
      ReferenceCommGemm(CommPattern::kAllGatherMatMul, s, 4, xs, ws);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  xs[1].pop_back();
  r = ReferenceCommGemm(CommPattern::kAllGatherMatMul, s, 2, xs, ws);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("x shard 1"));
  r = ReferenceCommGemm(CommPattern::kMatMulReduceScatter, {8, 7, 8}, 2, xs, ws);
  EXPECT_THAT(r.status().message(), HasSubstr("k = 7"));
}

// ---- fused tile orders -------------------------------------------------------

TEST(FusedTileOrderTest, EveryTileOnceDifferentPerRankSwizzled) {
  struct Case {
    CommPattern p;
    CommGemmShape s;
    int n, tm, tn, chunks;
  };
  const Case cases[] = {
      {CommPattern::kMatMulReduceScatter, {256, 64, 200}, 2, 64, 64, 1},
      {CommPattern::kMatMulReduceScatter, {512, 64, 128}, 4, 32, 128, 1},
      {CommPattern::kAllGatherMatMul, {256, 64, 256}, 2, 64, 64, 2},
      {CommPattern::kAllGatherMatMul, {512, 32, 96}, 4, 32, 32, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(std::string(CommPatternName(c.p)), " n=", c.n));
    ASSERT_TRUE(CanImplementFusedCommGemm(c.p, c.s, c.n, {c.tm, c.tn, c.chunks, 10}).ok());
    const FusedTileGeometry g = FusedGeometry(c.p, c.s, c.n, c.tm, c.tn, c.chunks);
    std::vector<std::vector<TileCoord>> orders;
    for (int r = 0; r < c.n; ++r) {
      std::vector<TileCoord> o = FusedTileOrder(c.p, g, r);
      ASSERT_EQ(static_cast<int64_t>(o.size()), g.tiles());
      std::set<std::pair<int, int>> seen;
      for (const TileCoord& t : o) {
        ASSERT_GE(t.row_block, 0);
        ASSERT_LT(t.row_block, g.row_blocks());
        ASSERT_GE(t.col_block, 0);
        ASSERT_LT(t.col_block, g.col_blocks());
        EXPECT_TRUE(seen.insert({t.row_block, t.col_block}).second) << "tile visited twice by rank " << r;
      }
      const int first_rank = c.p == CommPattern::kMatMulReduceScatter ? (r + 1) % c.n : r;
      EXPECT_EQ(TileOwner(g, o.front().row_block), first_rank);
      if (c.p == CommPattern::kMatMulReduceScatter) {
        EXPECT_EQ(TileOwner(g, o.back().row_block), r);  // own rows last
      } else {
        EXPECT_EQ(TileChunk(g, o.front().row_block), r * c.chunks);  // the local chunk first
        // Then the chunks in the copy order.
        std::vector<int> owners;
        for (const TileCoord& t : o) {
          const int ow = TileOwner(g, t.row_block);
          if (owners.empty() || owners.back() != ow) owners.push_back(ow);
        }
        EXPECT_EQ(owners, AllGatherCopyOrder(r, c.n));
      }
      orders.push_back(std::move(o));
    }
    // At every position the ranks work on rows of n different ranks (RS:
    // n different peers written at once).
    for (int64_t i = 0; i < g.tiles(); ++i) {
      std::set<int> owners;
      for (int r = 0; r < c.n; ++r) owners.insert(TileOwner(g, orders[r][i].row_block));
      ASSERT_EQ(static_cast<int>(owners.size()), c.n) << "position " << i;
    }
    EXPECT_FALSE(orders[0] == orders[1]);
  }
}

TEST(FusedTileOrderTest, ChunksAndCopyOrder) {
  const FusedTileGeometry g = FusedGeometry(CommPattern::kAllGatherMatMul, {512, 16, 64}, 2, 32, 64, 4);
  EXPECT_EQ(g.rows_per_rank, 256);
  EXPECT_EQ(g.chunk_rows(), 64);
  EXPECT_EQ(TileChunk(g, 0), 0);
  EXPECT_EQ(TileChunk(g, 1), 0);  // rows 32..63
  EXPECT_EQ(TileChunk(g, 2), 1);
  EXPECT_EQ(TileChunk(g, 9), 4);  // rows 288..319: rank 1's first chunk
  EXPECT_EQ(TileOwner(g, 9), 1);
  EXPECT_EQ(AllGatherCopyOrder(2, 4), (std::vector<int>{2, 3, 0, 1}));
}

// ---- looped schedules --------------------------------------------------------

constexpr LoopedMethod kMethods[] = {LoopedMethod::kLooped, LoopedMethod::kUnrolled,
                                     LoopedMethod::kBidirectional};

TEST(LoopedScheduleTest, Pieces) {
  std::vector<LoopedPiece> p = LoopedPieces(LoopedMethod::kLooped, 5);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].len, 5);
  p = LoopedPieces(LoopedMethod::kUnrolled, 5);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].off, 0);
  EXPECT_EQ(p[0].len, 2);
  EXPECT_EQ(p[1].off, 2);
  EXPECT_EQ(p[1].len, 3);
  EXPECT_EQ(p[1].dir, 1);
  p = LoopedPieces(LoopedMethod::kBidirectional, 4);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].dir, 1);
  EXPECT_EQ(p[1].dir, -1);
}

// Follows the AllGather schedule: a rank multiplies only chunks it holds
// (its own, or one a matching send delivered at the previous step), and
// every rank multiplies every chunk exactly once per piece.
TEST(LoopedScheduleTest, AllGatherDeliversEveryChunkToEveryRankOnce) {
  for (LoopedMethod m : kMethods) {
    for (int n : {2, 3, 4, 5, 8}) {
      SCOPED_TRACE(absl::StrCat(std::string(LoopedMethodName(m)), " n=", n));
      const std::vector<LoopedStep> sched = LoopedSchedule(CommPattern::kAllGatherMatMul, m, n);
      const int np = static_cast<int>(LoopedPieces(m, 2).size());
      ASSERT_EQ(static_cast<int>(sched.size()), n * n * np);
      std::map<std::tuple<int, int, int>, const LoopedStep*> at;  // (step, rank, piece)
      for (const LoopedStep& s : sched) at[{s.step, s.rank, s.piece}] = &s;
      // holds[(rank, piece)]: chunks received so far; held: the one in hand.
      std::map<std::pair<int, int>, std::set<int>> multiplied;
      std::map<std::pair<int, int>, int> in_hand;
      for (int r = 0; r < n; ++r)
        for (int p = 0; p < np; ++p) in_hand[{r, p}] = r;
      for (int step = 0; step < n; ++step) {
        std::map<std::pair<int, int>, int> next;
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < np; ++p) {
            const LoopedStep& s = *at.at({step, r, p});
            ASSERT_EQ(s.block, in_hand[std::make_pair(r, p)])
                << "step " << step << " rank " << r << " multiplies a chunk it lacks";
            EXPECT_TRUE(multiplied[std::make_pair(r, p)].insert(s.block).second) << "chunk multiplied twice";
            if (step == n - 1) {
              EXPECT_EQ(s.send_to, -1);
              continue;
            }
            ASSERT_GE(s.send_to, 0);
            const LoopedStep& peer = *at.at({step, s.send_to, p});
            EXPECT_EQ(peer.recv_from, r) << "send and receive do not pair up";
            EXPECT_EQ(next.count(std::make_pair(s.send_to, p)), 0u) << "two chunks sent to one rank";
            next[{s.send_to, p}] = s.block;
          }
        }
        if (step < n - 1) in_hand = next;
      }
      for (const auto& [key, chunks] : multiplied) EXPECT_EQ(static_cast<int>(chunks.size()), n);
    }
  }
}

// Follows the ReduceScatter schedule with sets of contributing ranks: each
// accumulator adds the rank's own partial of the same block it received,
// and at the last step every rank holds its own block summed over all ranks.
TEST(LoopedScheduleTest, ReduceScatterSumsEveryPartialIntoItsOwnerOnce) {
  for (LoopedMethod m : kMethods) {
    for (int n : {2, 3, 4, 5, 8}) {
      SCOPED_TRACE(absl::StrCat(std::string(LoopedMethodName(m)), " n=", n));
      const std::vector<LoopedStep> sched = LoopedSchedule(CommPattern::kMatMulReduceScatter, m, n);
      const int np = static_cast<int>(LoopedPieces(m, 2).size());
      std::map<std::tuple<int, int, int>, const LoopedStep*> at;
      for (const LoopedStep& s : sched) at[{s.step, s.rank, s.piece}] = &s;
      struct Acc {
        int block = -1;
        std::set<int> from;
      };
      std::map<std::pair<int, int>, Acc> incoming;      // (rank, piece)
      std::set<std::tuple<int, int, int>> contributed;  // (rank, block, piece)
      for (int step = 0; step < n; ++step) {
        std::map<std::pair<int, int>, Acc> next;
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < np; ++p) {
            const LoopedStep& s = *at.at({step, r, p});
            Acc acc;
            if (step > 0) {
              acc = incoming.at({r, p});
              ASSERT_EQ(acc.block, s.block) << "adds a partial of another block";
            }
            acc.block = s.block;
            EXPECT_TRUE(acc.from.insert(r).second) << "rank " << r << " adds its partial twice";
            EXPECT_TRUE(contributed.insert(std::make_tuple(r, s.block, p)).second);
            if (step == n - 1) {
              EXPECT_EQ(s.block, r) << "the last step must finish the rank's own block";
              EXPECT_EQ(static_cast<int>(acc.from.size()), n);
              continue;
            }
            const LoopedStep& peer = *at.at({step, s.send_to, p});
            EXPECT_EQ(peer.recv_from, r);
            next[{s.send_to, p}] = acc;
          }
        }
        incoming = next;
      }
      EXPECT_EQ(static_cast<int>(contributed.size()), n * n * np);
    }
  }
}

TEST(LoopedScheduleTest, BidirectionalUsesBothDirections) {
  const std::vector<LoopedStep> sched =
      LoopedSchedule(CommPattern::kAllGatherMatMul, LoopedMethod::kBidirectional, 4);
  bool up = false, down = false;
  for (const LoopedStep& s : sched) {
    if (s.send_to < 0) continue;
    if (s.piece == 0) up = up || s.send_to == (s.rank + 1) % 4;
    if (s.piece == 1) down = down || s.send_to == (s.rank + 3) % 4;
    EXPECT_EQ(s.send_to, s.piece == 0 ? (s.rank + 1) % 4 : (s.rank + 3) % 4);
  }
  EXPECT_TRUE(up);
  EXPECT_TRUE(down);
}

// The plans RunLooped executes, run on host vectors: every method and
// pattern gives the reference's outputs, reads only delivered data, and
// stays inside its buffers (RunLoopedPlanOnHost checks both).
TEST(LoopedPlanTest, HostExecutionEqualsTheReference) {
  uint32_t seed = 50;
  for (CommPattern p : {CommPattern::kAllGatherMatMul, CommPattern::kMatMulReduceScatter}) {
    for (int n : {2, 3, 4}) {
      for (const CommGemmShape& s :
           {CommGemmShape{5 * n, 3 * n, 4 * n}, CommGemmShape{8 * n, 7 * n, 3 * n}}) {
        const std::vector<float> x = Random(s.m * s.k, seed++), w = Random(s.k * s.nout, seed++);
        const auto xs = ShardX(p, s, n, x), ws = ShardW(p, s, n, w);
        absl::StatusOr<std::vector<std::vector<float>>> want = ReferenceCommGemm(p, s, n, xs, ws);
        ASSERT_TRUE(want.ok()) << want.status();
        for (LoopedMethod m : kMethods) {
          SCOPED_TRACE(absl::StrCat(std::string(LoopedMethodName(m)), " ", std::string(CommPatternName(p)),
                                    " n=", n, " m=", s.m, " k=", s.k, " nout=", s.nout));
          ASSERT_TRUE(CanImplementLoopedCommGemm(p, m, s, n).ok());
          const LoopedPlan plan = PlanLooped(p, m, s, n);
          absl::StatusOr<std::vector<std::vector<float>>> got = RunLoopedPlanOnHost(plan, p, s, n, xs, ws);
          ASSERT_TRUE(got.ok()) << got.status();
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ((*got)[r].size(), (*want)[r].size());
            for (size_t i = 0; i < (*want)[r].size(); ++i) {
              ASSERT_NEAR((*got)[r][i], (*want)[r][i], 1e-5) << "rank " << r << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST(LoopedPlanTest, OverlapStructure) {
  const CommGemmShape s{40, 12, 16};
  for (CommPattern p : {CommPattern::kAllGatherMatMul, CommPattern::kMatMulReduceScatter}) {
    for (LoopedMethod m : kMethods) {
      SCOPED_TRACE(absl::StrCat(std::string(LoopedMethodName(m)), " ", std::string(CommPatternName(p))));
      const LoopedPlan plan = PlanLooped(p, m, s, 4);
      EXPECT_EQ(plan.pieces, m == LoopedMethod::kLooped ? 1 : 2);
      int exchanges = 0, gemms = 0;
      for (size_t i = 0; i < plan.ops.size(); ++i) {
        const LoopedOp& op = plan.ops[i];
        if (op.kind == LoopedOp::Kind::kExchange) {
          ++exchanges;
          continue;
        }
        ++gemms;
        if (op.step == 0) {
          EXPECT_EQ(op.wait_exchange, -1);
          continue;
        }
        // A GEMM waits for the previous step's exchange of its own piece,
        // never this step's: that one overlaps it.
        ASSERT_GE(op.wait_exchange, 0);
        ASSERT_LT(static_cast<size_t>(op.wait_exchange), i);
        const LoopedOp& ex = plan.ops[op.wait_exchange];
        EXPECT_EQ(ex.kind, LoopedOp::Kind::kExchange);
        EXPECT_EQ(ex.piece, op.piece);
        EXPECT_EQ(ex.step, op.step - 1);
        // ReduceScatter adds what that exchange received (beta = 1).
        if (p == CommPattern::kMatMulReduceScatter) {
          EXPECT_EQ(op.beta, 1.0f);
          EXPECT_EQ(op.c.buffer, LoopedBuffer::kIncoming);
          EXPECT_EQ(op.c.offset, ex.recv[op.rank].offset);
        }
      }
      EXPECT_EQ(exchanges, 3 * plan.pieces);  // n - 1 steps per piece
      EXPECT_EQ(gemms, 4 * 4 * plan.pieces);  // n steps x n ranks per piece
    }
  }
}

TEST(LoopedPlanTest, HostExecutionCatchesABrokenPlan) {
  const CommGemmShape s{8, 4, 6};
  const auto xs = ShardX(CommPattern::kAllGatherMatMul, s, 2, Random(32, 1));
  const auto ws = ShardW(CommPattern::kAllGatherMatMul, s, 2, Random(24, 2));
  LoopedPlan plan = PlanLooped(CommPattern::kAllGatherMatMul, LoopedMethod::kLooped, s, 2);
  ASSERT_EQ(plan.ops[0].kind, LoopedOp::Kind::kExchange);
  // Received into the wrong rows: the next GEMM reads rows nobody wrote.
  plan.ops[0].recv[0].offset = 0;
  absl::StatusOr<std::vector<std::vector<float>>> r =
      RunLoopedPlanOnHost(plan, CommPattern::kAllGatherMatMul, s, 2, xs, ws);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("before any exchange wrote it"));
  // Outside the gathered buffer.
  plan = PlanLooped(CommPattern::kAllGatherMatMul, LoopedMethod::kLooped, s, 2);
  plan.ops[0].recv[1].offset = plan.gathered_floats - 1;
  r = RunLoopedPlanOnHost(plan, CommPattern::kAllGatherMatMul, s, 2, xs, ws);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("outside buffer"));
}

// ---- CanImplement --------------------------------------------------------------

void ExpectRejected(const absl::Status& st, const std::string& text) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(text));
}

TEST(CanImplementTest, FusedNamesTheOffendingDimension) {
  const auto AG = CommPattern::kAllGatherMatMul, RS = CommPattern::kMatMulReduceScatter;
  const FusedCommGemmParams def;
  EXPECT_TRUE(CanImplementFusedCommGemm(AG, {256, 96, 192}, 2, def).ok());
  EXPECT_TRUE(CanImplementFusedCommGemm(RS, {256, 200, 136}, 2, def).ok());  // partial k and nout tiles
  ExpectRejected(CanImplementFusedCommGemm(RS, {200, 64, 64}, 2, def),
                 "m / n = 100 is not a multiple of tile_m = 64");
  ExpectRejected(CanImplementFusedCommGemm(RS, {256, 63, 64}, 2, def), "k = 63 is not a multiple of n = 2");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 63}, 2, def),
                 "nout = 63 is not a multiple of n = 2");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 66}, 3, def), "m = 256 is not a multiple of n = 3");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 1, def), "n = 1");
  ExpectRejected(CanImplementFusedCommGemm(AG, {1024, 64, 64}, 16, def), "n = 16");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 0, 64}, 2, def), "k = 0 must be >= 1");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {48, 64, 1, 10}), "tile_m = 48");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {64, 100, 1, 10}), "tile_n = 100");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {64, 64, 3, 10}),
                 "m / n = 128 is not a multiple of chunks_per_rank = 3");
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {64, 64, 4, 10}),
                 "m / n / chunks_per_rank = 32 is not a multiple of tile_m = 64");
  EXPECT_TRUE(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {32, 64, 4, 10}).ok());
  ExpectRejected(CanImplementFusedCommGemm(AG, {256, 64, 64}, 2, {64, 64, 1, 0}), "signal_timeout_s");
}

TEST(CanImplementTest, LoopedNamesTheOffendingDimension) {
  const auto AG = CommPattern::kAllGatherMatMul, RS = CommPattern::kMatMulReduceScatter;
  EXPECT_TRUE(
      CanImplementLoopedCommGemm(AG, LoopedMethod::kLooped, {2, 3, 4}, 2).ok());  // no tile constraint
  EXPECT_TRUE(CanImplementLoopedCommGemm(RS, LoopedMethod::kBidirectional, {12, 6, 5}, 3).ok());
  ExpectRejected(CanImplementLoopedCommGemm(AG, LoopedMethod::kUnrolled, {2, 3, 4}, 2),
                 "m / n = 1 rows per rank cannot be cut in two halves");
  ExpectRejected(CanImplementLoopedCommGemm(RS, LoopedMethod::kBidirectional, {4, 4, 4}, 4), "m / n = 1");
  ExpectRejected(CanImplementLoopedCommGemm(RS, LoopedMethod::kLooped, {4, 5, 4}, 2), "k = 5");
  ExpectRejected(CanImplementLoopedCommGemm(AG, LoopedMethod::kLooped, {4, 5, 5}, 2), "nout = 5");
  ExpectRejected(CanImplementLoopedCommGemm(AG, LoopedMethod::kLooped, {0, 5, 4}, 2), "m = 0");
  EXPECT_THAT(std::string(CanImplementLoopedCommGemm(AG, LoopedMethod::kUnrolled, {2, 3, 4}, 2).message()),
              HasSubstr("unrolled allgather_matmul"));
}

// ---- without GPUs --------------------------------------------------------------

TEST(CommGemmGroupTest, CreateAnswersFailedPreconditionWithoutTwoDevices) {
  absl::StatusOr<std::unique_ptr<CommGemmGroup>> g = CommGemmGroup::Create(1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<int> count = CudaDeviceCount();
  g = CommGemmGroup::Create(2);
  if (!count.ok()) {
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("no CUDA device"));
  } else if (*count < 2) {
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("2 ranks need 2 CUDA devices (found 1)"));
  } else {
    EXPECT_TRUE(g.ok()) << g.status();
  }
  if (!count.ok() || *count < 8) {
    g = CommGemmGroup::Create(8);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(CommGemmGroupTest, LoadingTheKernelsNeedsADevice) {
  if (CudaDeviceCount().ok()) GTEST_SKIP() << "a device is present";
  absl::StatusOr<std::shared_ptr<const CommGemmKernels>> k = CommGemmKernels::Compile(64, 64, 9, 0);
  ASSERT_TRUE(k.ok()) << k.status();
  absl::StatusOr<CommGemmKernels::Handles> h = (*k)->Load();
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition) << h.status();
}

}  // namespace
}  // namespace braid::kernels::cuda
