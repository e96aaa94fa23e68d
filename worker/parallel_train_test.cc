#include "worker/parallel_train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace braid::worker {
namespace {

using K = LayerParallel;

ParallelTrainSpec Mlp(std::vector<LayerParallel> layers, int data_degree, int model_degree) {
  ParallelTrainSpec s;
  s.widths = {32, 64, 64, 16};
  s.batch = 16;
  s.layers = std::move(layers);
  s.data_degree = data_degree;
  s.model_degree = model_degree;
  s.ranks = data_degree * model_degree;
  s.steps = 5;
  s.lr = 0.1;
  s.seed = 7;
  return s;
}

// Two pre-LayerNorm residual blocks, d_model 32, 4 heads, seq 8, batch 4.
ParallelTrainSpec Transformer(int data_degree, int model_degree, int64_t heads = 4) {
  ParallelTrainSpec s;
  s.batch = 4;
  s.data_degree = data_degree;
  s.model_degree = model_degree;
  s.ranks = data_degree * model_degree;
  s.steps = 5;
  s.lr = 0.1;
  s.seed = 11;
  s.transformer =
      TransformerShape{.d_model = 32, .heads = heads, .seq = 8, .d_ff = 64, .blocks = 2};
  return s;
}

// Largest |a - b| over a layer's weights and bias, relative to the largest |b|.
double RelDiff(const FullLayerWeights& a, const FullLayerWeights& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.weight.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.weight[i] - b.weight[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b.weight[i])));
  }
  for (size_t i = 0; i < b.bias.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.bias[i] - b.bias[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b.bias[i])));
  }
  return diff / scale;
}

void ExpectMatchesReference(const ParallelTrainSpec& spec, const std::string& name) {
  absl::StatusOr<ParallelTrainResult> ref = RunSingleProcessReference(spec);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ParallelTrainOptions o;
  o.rank_binary = BRAID_PARALLEL_RANK_BINARY;
  o.timeout_s = 60;
  absl::StatusOr<ParallelTrainResult> par = RunParallelTraining(spec, o);
  ASSERT_TRUE(par.ok()) << par.status();
  ASSERT_EQ(par->loss.size(), static_cast<size_t>(spec.steps));
  ASSERT_EQ(par->step_s.size(), static_cast<size_t>(spec.steps));
  ASSERT_EQ(par->weights.size(), ref->weights.size());
  double worst_loss = 0, worst_w = 0;
  for (int i = 0; i < spec.steps; ++i) {
    const double rel = std::fabs(par->loss[i] - ref->loss[i]) / std::fabs(ref->loss[i]);
    worst_loss = std::max(worst_loss, rel);
    EXPECT_LT(rel, 1e-5) << name << " step " << i << ": " << par->loss[i] << " vs " << ref->loss[i];
    std::printf("[%s] step %d loss %.7f (ref %.7f) step %.3f ms (ref %.3f ms)\n", name.c_str(), i,
                par->loss[i], ref->loss[i], 1e3 * par->step_s[i], 1e3 * ref->step_s[i]);
  }
  // The tolerance must be far below what training changes: the weights after
  // all steps differ from those after one step by much more than 1e-5.
  ParallelTrainSpec one = spec;
  one.steps = 1;
  absl::StatusOr<ParallelTrainResult> ref1 = RunSingleProcessReference(one);
  ASSERT_TRUE(ref1.ok()) << ref1.status();
  for (size_t l = 0; l < ref->weights.size(); ++l) {
    EXPECT_GT(RelDiff(ref1->weights[l], ref->weights[l]), 1e-3) << name << " layer " << l;
  }
  for (size_t l = 0; l < ref->weights.size(); ++l) {
    ASSERT_EQ(par->weights[l].out_features, ref->weights[l].out_features);
    ASSERT_EQ(par->weights[l].in_features, ref->weights[l].in_features);
    ASSERT_EQ(par->weights[l].weight.size(), ref->weights[l].weight.size());
    ASSERT_EQ(par->weights[l].bias.size(), ref->weights[l].bias.size());
    const double rel = RelDiff(par->weights[l], ref->weights[l]);
    worst_w = std::max(worst_w, rel);
    EXPECT_LT(rel, 1e-5) << name << " layer " << l;
  }
  std::printf("[%s] worst relative difference: loss %.2e, weights %.2e\n", name.c_str(), worst_loss,
              worst_w);
}

TEST(ParallelTrainTest, TwoRanksAllData) {
  ExpectMatchesReference(Mlp({{K::kData}, {K::kData}, {K::kData}}, 2, 1), "2 data");
}

TEST(ParallelTrainTest, TwoRanksColumnRowThenReplicated) {
  ExpectMatchesReference(Mlp({{K::kColumn}, {K::kRow}, {K::kData}}, 1, 2), "2 col-row-data");
}

TEST(ParallelTrainTest, TwoRanksColumnColumnRowGathersBetweenColumns) {
  ExpectMatchesReference(Mlp({{K::kColumn}, {K::kColumn}, {K::kRow}}, 1, 2), "2 col-col-row");
}

TEST(ParallelTrainTest, FourRanksHybridTwoByTwo) {
  ExpectMatchesReference(Mlp({{K::kColumn}, {K::kRow}, {K::kData}}, 2, 2), "4 hybrid 2x2");
}

TEST(ParallelTrainTest, FourRanksAllColumnRow) {
  // The last column layer's output is gathered before the loss.
  ExpectMatchesReference(Mlp({{K::kColumn}, {K::kRow}, {K::kColumn}}, 1, 4), "4 col-row-col");
}

TEST(ParallelTrainTest, RejectsRowWithoutColumn) {
  absl::Status s = ValidateParallelTrainSpec(Mlp({{K::kData}, {K::kRow}, {K::kData}}, 1, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 (row)"), std::string::npos) << s;
  // Rejected before any rank is spawned.
  absl::StatusOr<ParallelTrainResult> r =
      RunParallelTraining(Mlp({{K::kRow}, {K::kColumn}, {K::kRow}}, 2, 1), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layer 0 (row)"), std::string::npos) << r.status();
}

TEST(ParallelTrainTest, RejectsIndivisibleSizes) {
  ParallelTrainSpec s = Mlp({{K::kColumn}, {K::kRow}, {K::kData}}, 1, 3);
  absl::Status st = ValidateParallelTrainSpec(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer 0 (column)"), std::string::npos) << st;
  s = Mlp({{K::kData}, {K::kData}, {K::kData}}, 3, 1);  // batch 16 over 3
  EXPECT_EQ(ValidateParallelTrainSpec(s).code(), absl::StatusCode::kInvalidArgument);
  s = Mlp({{K::kData}, {K::kData}, {K::kData}}, 2, 1);
  s.ranks = 3;
  EXPECT_EQ(ValidateParallelTrainSpec(s).code(), absl::StatusCode::kInvalidArgument);
  s = Mlp({{K::kData}, {K::kData}}, 2, 1);  // 4 widths for 2 layers
  EXPECT_EQ(ValidateParallelTrainSpec(s).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParallelTrainTest, TwoRanksTransformerHeadParallel) {
  // Two heads per rank; Q/K/V/W1 column, O/W2 row, LayerNorms replicated:
  // 16 parameter pairs compared.
  ExpectMatchesReference(Transformer(1, 2), "2 transformer model 2");
}

TEST(ParallelTrainTest, FourRanksTransformerHybridTwoByTwo) {
  ExpectMatchesReference(Transformer(2, 2), "4 transformer data 2 x model 2");
}

TEST(ParallelTrainTest, FourRanksTransformerOneHeadPerRank) {
  ExpectMatchesReference(Transformer(1, 4), "4 transformer model 4");
}

TEST(ParallelTrainTest, TransformerWeightsListEveryParameterInOrder) {
  // Per block ln1 [32, 1] (gain as weight, bias as bias), q, k, v, o [32, 32],
  // ln2 [32, 1], w1 [64, 32], w2 [32, 64].
  absl::StatusOr<ParallelTrainResult> ref = RunSingleProcessReference(Transformer(1, 1));
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->weights.size(), 16u);
  const int64_t out[] = {32, 32, 32, 32, 32, 32, 64, 32}, in[] = {1, 32, 32, 32, 32, 1, 32, 64};
  for (size_t l = 0; l < 16; ++l) {
    EXPECT_EQ(ref->weights[l].out_features, out[l % 8]) << l;
    EXPECT_EQ(ref->weights[l].in_features, in[l % 8]) << l;
    EXPECT_EQ(ref->weights[l].weight.size(), static_cast<size_t>(out[l % 8] * in[l % 8])) << l;
    EXPECT_EQ(ref->weights[l].bias.size(), static_cast<size_t>(out[l % 8])) << l;
  }
}

TEST(ParallelTrainTest, RejectsTransformerHeadsNotDivisible) {
  ParallelTrainSpec s = Transformer(1, 3);  // 4 heads over model_degree 3
  absl::Status st = ValidateParallelTrainSpec(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("heads 4 do not divide over model_degree 3"), std::string::npos)
      << st;
  // Rejected before any rank is spawned (no rank binary is even looked for).
  absl::StatusOr<ParallelTrainResult> r = RunParallelTraining(s, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("heads 4"), std::string::npos) << r.status();
  // d_model must split into whole heads, and the MLP fields must be empty.
  s = Transformer(1, 1, /*heads=*/5);
  EXPECT_NE(ValidateParallelTrainSpec(s).message().find("d_model 32 does not divide over heads 5"),
            std::string::npos);
  s = Transformer(1, 2);
  s.widths = {32, 32};
  EXPECT_EQ(ValidateParallelTrainSpec(s).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::worker
