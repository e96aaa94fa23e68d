#include "client/overlap_choice.h"

#include <string>

#include "gtest/gtest.h"

namespace braid::client {
namespace {

// Synthetic inputs (these tests check the plumbing, not a machine): GEMMs
// at 10 GFLOP/s, additions at 100 GB/s, transfers on the line `per_byte`,
// the undecomposed collective `coll_factor` times the whole GEMM.
OverlapMeasurements Synthetic(const OverlapTrainSpec& s, double per_byte, double coll_factor,
                              double rho) {
  OverlapMeasurements m;
  m.ranks = s.ranks;
  const int n = s.ranks;
  auto gemm = [](int64_t a, int64_t b, int64_t c) { return 2.0 * a * b * c / 1e10; };
  for (const OverlapPair& p : OverlapPairs(s)) {
    const bool ag = p.pattern == CollectivePattern::kAllGatherMatMul;
    const int64_t rows = p.m / n, half = rows / 2;
    const int64_t gk = ag ? p.k : p.k / n, gn = ag ? p.nout / n : p.nout;
    for (int64_t r : {p.m, rows, half}) m.gemm_s[{r, gk, gn}] = gemm(r, gk, gn);
    for (int64_t r : {rows, rows - half}) m.add_s[{r, p.nout}] = 12.0 * r * p.nout / 1e11;
    m.collective_s[{p.pattern, p.m, p.k, p.nout}] = coll_factor * gemm(p.m, gk, gn);
  }
  m.transfer_line = {per_byte, 1e-6};
  m.transfer_cpu_fraction = rho;
  return m;
}

OverlapTrainSpec Transformer() {
  return {.model = OverlapModel::kTransformer, .rows = 64, .d_model = 32, .d_ff = 64,
          .heads = 4, .seq = 8, .ranks = 2};
}

TEST(OverlapChoice, SearchFindsEveryPairOfTheTrainingGraph) {
  for (OverlapModel model : {OverlapModel::kMlp, OverlapModel::kTransformer}) {
    OverlapTrainSpec s = Transformer();
    s.model = model;
    absl::StatusOr<TrainingOverlapChoice> c =
        ChooseTrainingOverlaps(s, Synthetic(s, 1e-10, 1.0, 0.0));
    ASSERT_TRUE(c.ok()) << c.status();
    const std::vector<OverlapPair> pairs = OverlapPairs(s);
    ASSERT_EQ(c->choices.size(), pairs.size());
    ASSERT_EQ(c->methods.size(), pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      const search::OverlapChoice& ch = c->choices[i];
      EXPECT_EQ(ch.collective_op, pairs[i].name);
      EXPECT_EQ(ch.shape.m, pairs[i].m) << pairs[i].name;
      EXPECT_EQ(ch.shape.k, pairs[i].k) << pairs[i].name;
      EXPECT_EQ(ch.shape.nout, pairs[i].nout) << pairs[i].name;
      EXPECT_EQ(ch.phase == graph::Phase::kBackward, pairs[i].backward) << pairs[i].name;
      EXPECT_EQ(ch.candidates.size(), 4u) << pairs[i].name;
    }
  }
}

TEST(OverlapChoice, ChoiceFollowsTheMeasurements) {
  const OverlapTrainSpec s = Transformer();
  // A collective costing twice the GEMM and transfers as cheap as 1 us: every
  // pair decomposes.
  absl::StatusOr<TrainingOverlapChoice> c = ChooseTrainingOverlaps(s, Synthetic(s, 0, 2.0, 0.0));
  ASSERT_TRUE(c.ok()) << c.status();
  for (size_t i = 0; i < c->methods.size(); ++i) {
    EXPECT_NE(c->methods[i], DecomposeMethod::kNone) << c->choices[i].collective_op;
  }
  // A collective costing nothing and slow transfers: none everywhere.
  c = ChooseTrainingOverlaps(s, Synthetic(s, 1e-6, 0.0, 1.0));
  ASSERT_TRUE(c.ok()) << c.status();
  for (size_t i = 0; i < c->methods.size(); ++i) {
    EXPECT_EQ(c->methods[i], DecomposeMethod::kNone) << c->choices[i].collective_op;
  }
}

TEST(OverlapChoice, MissingMeasurementIsNamed) {
  const OverlapTrainSpec s = Transformer();
  OverlapMeasurements m = Synthetic(s, 1e-10, 1.0, 0.0);
  m.gemm_s.erase({32, 32, 48});  // the qkv chunk GEMM: 32 rows, k 32, 3 * 32 / 2 columns
  absl::StatusOr<TrainingOverlapChoice> c = ChooseTrainingOverlaps(s, m);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("MatMul 32x32x48"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace braid::client
