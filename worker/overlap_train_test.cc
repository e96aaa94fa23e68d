#include "worker/overlap_train.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace braid::worker {
namespace {

using M = DecomposeMethod;

OverlapTrainOptions Options() {
  OverlapTrainOptions o;
  o.rank_binary = BRAID_OVERLAP_RANK_BINARY;
  o.timeout_s = 120;
  return o;
}

// A per-pair list cycling through every method (so each pattern meets each).
std::vector<M> Mixed(const OverlapTrainSpec& s) {
  const M all[] = {M::kLooped, M::kBidirectional, M::kNone, M::kLoopedUnrolled, M::kLooped};
  std::vector<M> out;
  for (size_t i = 0; i < OverlapPairs(s).size(); ++i) out.push_back(all[i % 5]);
  return out;
}

double MaxRelDiff(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ref[i])));
  }
  return diff / scale;
}

// Every fixed method and a mixed per-pair list, trained interleaved on the
// same ranks, equal the single-process autograd training: loss per step and
// final weights.
void ExpectVariantsMatchReference(OverlapTrainSpec s) {
  s.variants = {{M::kNone}, {M::kLooped}, {M::kLoopedUnrolled}, {M::kBidirectional}, Mixed(s)};
  absl::StatusOr<OverlapTrainResult> got = RunOverlapTraining(s, Options());
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<OverlapVariantResult> ref = RunOverlapReference(s);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<OverlapParam> params = OverlapParams(s);
  ASSERT_EQ(ref->weights.size(), params.size());
  ASSERT_EQ(got->variants.size(), s.variants.size());
  for (size_t v = 0; v < s.variants.size(); ++v) {
    const OverlapVariantResult& r = got->variants[v];
    ASSERT_EQ(r.methods.size(), OverlapPairs(s).size());
    ASSERT_EQ(r.loss.size(), ref->loss.size());
    for (size_t i = 0; i < r.loss.size(); ++i) {
      EXPECT_NEAR(r.loss[i], ref->loss[i], 1e-4 * std::abs(ref->loss[i]))
          << "variant " << v << " step " << i;
      EXPECT_GT(r.pair_s[i], 0);
      EXPECT_LE(r.pair_s[i], r.step_s[i]);  // the pairs are part of the step
    }
    ASSERT_EQ(r.weights.size(), params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      ASSERT_EQ(r.weights[p].size(), ref->weights[p].size());
      EXPECT_LT(MaxRelDiff(r.weights[p], ref->weights[p]), 1e-4)
          << "variant " << v << " weight " << params[p].name;
    }
  }
  // The training moved the weights (the comparison above is not of the init).
  OverlapTrainSpec one = s;
  one.steps = 1;
  one.rounds = 1;
  one.lr = 1e-30;
  absl::StatusOr<OverlapVariantResult> init = RunOverlapReference(one);
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_GT(MaxRelDiff(init->weights[0], ref->weights[0]), 1e-3);
}

// 20 rows: 10 per rank on 2 ranks, 5 on 4 (halves of 2 and 3 rows).
TEST(OverlapTrain, MlpTwoRanksEveryMethodEqualsReference) {
  ExpectVariantsMatchReference({.model = OverlapModel::kMlp, .rows = 20, .d_model = 16,
                                .d_ff = 32, .ranks = 2, .steps = 2, .rounds = 2, .lr = 0.1,
                                .seed = 3});
}

TEST(OverlapTrain, MlpFourRanksEveryMethodEqualsReference) {
  ExpectVariantsMatchReference({.model = OverlapModel::kMlp, .rows = 20, .d_model = 16,
                                .d_ff = 32, .ranks = 4, .steps = 3, .lr = 0.1, .seed = 4});
}

// 3 sequences of 6 tokens: 9 rows per rank, so a rank's rows cross a
// sequence boundary (attention runs on the gathered rows).
TEST(OverlapTrain, TransformerTwoRanksEveryMethodEqualsReference) {
  ExpectVariantsMatchReference({.model = OverlapModel::kTransformer, .rows = 18, .d_model = 16,
                                .d_ff = 32, .heads = 4, .seq = 6, .ranks = 2, .steps = 3,
                                .lr = 0.1, .seed = 5});
}

// 4 sequences of 6 tokens over 4 ranks: one head per rank.
TEST(OverlapTrain, TransformerFourRanksEveryMethodEqualsReference) {
  ExpectVariantsMatchReference({.model = OverlapModel::kTransformer, .rows = 24, .d_model = 16,
                                .d_ff = 32, .heads = 4, .seq = 6, .ranks = 4, .steps = 2,
                                .lr = 0.1, .seed = 6});
}

TEST(OverlapTrain, PairsInExecutionOrder) {
  OverlapTrainSpec s{.model = OverlapModel::kTransformer, .rows = 32, .d_model = 16, .d_ff = 48,
                     .heads = 4, .seq = 8};
  const std::vector<OverlapPair> p = OverlapPairs(s);
  ASSERT_EQ(p.size(), 16u);
  EXPECT_EQ(p[0].name, "b0.qkv.ag");
  EXPECT_EQ(p[0].nout, 48);
  EXPECT_EQ(p[3].name, "b0.fc2.rs");
  EXPECT_EQ(p[3].k, 48);
  EXPECT_EQ(p[8].name, "b1.fc2.grad.ag");
  EXPECT_TRUE(p[8].backward);
  EXPECT_EQ(p[15].name, "b0.qkv.grad.rs");
  EXPECT_EQ(p[15].k, 48);
  s.model = OverlapModel::kMlp;
  EXPECT_EQ(OverlapPairs(s).size(), 8u);
}

// 2 rows on 2 ranks: one row per rank cannot be cut in two halves.
TEST(OverlapTrain, UnsplittableShapeNamesThePair) {
  OverlapTrainSpec s{.model = OverlapModel::kMlp, .rows = 2, .d_model = 8, .d_ff = 8, .ranks = 2};
  std::vector<M> ms(OverlapPairs(s).size(), M::kLooped);
  ms[3] = M::kBidirectional;  // b1.fc2.rs
  s.variants = {ms};
  EXPECT_TRUE(ValidateOverlapTrainSpec(s).ok() == false);
  absl::StatusOr<OverlapTrainResult> r = RunOverlapTraining(s, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("pair 'b1.fc2.rs'"), std::string::npos) << r.status();
  s.variants = {{M::kLooped}};
  EXPECT_TRUE(ValidateOverlapTrainSpec(s).ok()) << ValidateOverlapTrainSpec(s);
  s.variants = {{M::kLooped, M::kNone}};
  EXPECT_EQ(ValidateOverlapTrainSpec(s).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::worker
