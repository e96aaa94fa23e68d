#include "worker/collective_matmul.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace braid::worker {
namespace {

using P = CollectivePattern;
using M = DecomposeMethod;

const std::vector<M> kMethods = {M::kNone, M::kLooped, M::kLoopedUnrolled, M::kBidirectional};

CollectiveMatMulOptions Options() {
  CollectiveMatMulOptions o;
  o.rank_binary = BRAID_COLLECTIVE_MATMUL_RANK_BINARY;
  o.timeout_s = 120;
  return o;
}

// Every method of `pattern` on `ranks` ranks equals the single-process x @ w
// (RunCollectiveMatMul checks max|diff|/max|ref| < 1e-4 and fails otherwise).
void ExpectAllMethodsMatch(P pattern, int ranks, int64_t m, int64_t k, int64_t nout) {
  CollectiveMatMulSpec s{.pattern = pattern, .methods = kMethods, .m = m, .k = k, .nout = nout,
                         .ranks = ranks, .repetitions = 1, .warmup = 0, .seed = 5};
  absl::StatusOr<CollectiveMatMulResult> r = RunCollectiveMatMul(s, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->methods.size(), kMethods.size());
  for (size_t i = 0; i < kMethods.size(); ++i) {
    EXPECT_EQ(r->methods[i].method, kMethods[i]);
    EXPECT_LT(r->methods[i].max_rel_diff, 1e-4) << DecomposeMethodName(kMethods[i]);
    ASSERT_EQ(r->methods[i].seconds.size(), 1u);
    EXPECT_GT(r->methods[i].seconds[0], 0);
  }
  ASSERT_EQ(r->gemm_s.size(), 1u);
  ASSERT_EQ(r->comm_s.size(), 1u);
  // The baseline's overlap efficiency is 0 by Flux's definition.
  EXPECT_NEAR(ComputeOverlapEfficiency(*r, 0).efficiency, 0.0, 1e-12);
}

// 16 rows: a multiple of 2 * ranks for 2 and 4 ranks.
TEST(CollectiveMatMul, AllGatherMatMulTwoRanks) {
  ExpectAllMethodsMatch(P::kAllGatherMatMul, 2, 16, 32, 24);
}
TEST(CollectiveMatMul, AllGatherMatMulFourRanks) {
  ExpectAllMethodsMatch(P::kAllGatherMatMul, 4, 16, 32, 24);
}
TEST(CollectiveMatMul, MatMulReduceScatterTwoRanks) {
  ExpectAllMethodsMatch(P::kMatMulReduceScatter, 2, 16, 32, 24);
}
TEST(CollectiveMatMul, MatMulReduceScatterFourRanks) {
  ExpectAllMethodsMatch(P::kMatMulReduceScatter, 4, 16, 32, 24);
}

// m = 6 (2 ranks) and 12 (4 ranks): 3 rows per rank, not a multiple of
// 2 * ranks; the two halves are 1 and 2 rows.
TEST(CollectiveMatMul, OddRowsPerRankTwoRanks) {
  ExpectAllMethodsMatch(P::kAllGatherMatMul, 2, 6, 20, 8);
  ExpectAllMethodsMatch(P::kMatMulReduceScatter, 2, 6, 20, 8);
}
TEST(CollectiveMatMul, OddRowsPerRankFourRanks) {
  ExpectAllMethodsMatch(P::kAllGatherMatMul, 4, 12, 20, 8);
  ExpectAllMethodsMatch(P::kMatMulReduceScatter, 4, 12, 20, 8);
}

TEST(CollectiveMatMul, CanDecomposeNamesTheDim) {
  EXPECT_TRUE(CanDecompose(P::kAllGatherMatMul, M::kBidirectional, 12, 20, 8, 4).ok());
  absl::Status s = CanDecompose(P::kAllGatherMatMul, M::kLooped, 10, 20, 8, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("m=10"), std::string::npos) << s;
  s = CanDecompose(P::kAllGatherMatMul, M::kNone, 8, 20, 6, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("nout=6"), std::string::npos) << s;
  s = CanDecompose(P::kMatMulReduceScatter, M::kLooped, 8, 10, 8, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("k=10"), std::string::npos) << s;
  // One row per rank cannot be halved; the looped method takes it.
  EXPECT_TRUE(CanDecompose(P::kMatMulReduceScatter, M::kLooped, 4, 8, 8, 4).ok());
  s = CanDecompose(P::kMatMulReduceScatter, M::kLoopedUnrolled, 4, 8, 8, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("m=4"), std::string::npos) << s;
  // The driver rejects before spawning anything.
  CollectiveMatMulSpec spec{.pattern = P::kAllGatherMatMul, .methods = {M::kLooped}, .m = 10,
                            .k = 20, .nout = 8, .ranks = 4};
  EXPECT_EQ(RunCollectiveMatMul(spec, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveMatMul, MethodNamesRoundTrip) {
  for (M m : kMethods) {
    absl::StatusOr<M> back = ParseDecomposeMethod(DecomposeMethodName(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_FALSE(ParseDecomposeMethod("ring").ok());
  EXPECT_FALSE(ParseCollectivePattern("allreduce").ok());
}

}  // namespace
}  // namespace braid::worker
