// Tests of the measured-feedback rules: per-iteration aggregation over
// ranks, the rollback verdict from the paired differences' median interval,
// and the cluster's calibration factor.
#include "server/plan_feedback.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::server {
namespace {

using ::testing::HasSubstr;

// The ranks' times folded as they report (store.h RunAggregate).
struct Row {
  Row(int r, std::vector<double> p, std::vector<double> b = {})
      : rank(r), plan(std::move(p)), baseline(std::move(b)) {}
  int rank;
  std::vector<double> plan;
  std::vector<double> baseline;
};

template <size_t N>
AggregatedTimes AggregateRanks(const Row (&rows)[N]) {
  RunAggregate run;
  run.world_size = static_cast<int>(N);
  for (const Row& r : rows) run.Add(r.plan, r.baseline);
  return Aggregated(run);
}

// `pairs` iterations: the plan at plan_ms, the baseline at base_ms, each with
// a deterministic +-noise_ms pattern.
AggregatedTimes Paired(int pairs, double plan_ms, double base_ms, double noise_ms) {
  std::vector<double> plan, base;
  for (int i = 0; i < pairs; ++i) {
    const double wiggle = noise_ms * ((i * 7) % 5 - 2) / 2.0;
    plan.push_back((plan_ms + wiggle) * 1e-3);
    base.push_back((base_ms - wiggle / 2) * 1e-3);
  }
  const Row rows[] = {Row(0, plan, base)};
  return AggregateRanks(rows);
}

TEST(PlanFeedbackTest, AnIterationTakesItsSlowestRank) {
  const Row rows[] = {Row(0, {1, 5, 2, 9}, {1, 1, 1, 1}), Row(1, {3, 4, 2}, {2, 0.5, 3})};
  AggregatedTimes a = AggregateRanks(rows);
  EXPECT_EQ(a.ranks_reported, 2);
  EXPECT_EQ(a.plan_s, (std::vector<double>{3, 5, 2}));  // iterations every rank reported
  EXPECT_EQ(a.baseline_s, (std::vector<double>{2, 1, 3}));
  EXPECT_DOUBLE_EQ(a.measured_s, 3);
  EXPECT_DOUBLE_EQ(a.baseline_median_s, 2);
  // A rank without baseline times: no baseline figure for the run.
  const Row partial[] = {Row(0, {1, 2}, {1, 1}), Row(1, {3, 1})};
  a = AggregateRanks(partial);
  EXPECT_EQ(a.plan_s, (std::vector<double>{3, 2}));
  EXPECT_TRUE(a.baseline_s.empty());
  EXPECT_EQ(a.baseline_median_s, 0);
}

TEST(PlanFeedbackTest, SlowerBeyondTheSpreadIsRolledBackWithTheFigures) {
  std::optional<RollbackVerdict> v = JudgeRollback(Paired(8, 12, 10, 0.4), 2, "braid.torch");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->pairs, 8);
  EXPECT_GT(v->difference.low, 0);
  EXPECT_NEAR(v->difference.median, 2e-3, 0.5e-3);
  EXPECT_THAT(v->reason, HasSubstr("measured 12.00 ms vs ddp 10.00 ms on 2 ranks: slower by "));
  EXPECT_THAT(v->reason, HasSubstr("(95% CI ["));
  EXPECT_THAT(v->reason, HasSubstr("]) (braid.torch)"));
  EXPECT_THAT(JudgeRollback(Paired(6, 12, 10, 0.4), 1, "")->reason, HasSubstr("on 1 rank:"));
}

TEST(PlanFeedbackTest, NoRollbackWhenTheIntervalHoldsZeroOrTooFewPairs) {
  // Faster, equal within noise, or slower on too few pairs (5 < 6: no 95%
  // interval exists even when every difference is positive).
  EXPECT_FALSE(JudgeRollback(Paired(8, 10, 12, 0.4), 2, "").has_value());
  EXPECT_FALSE(JudgeRollback(Paired(8, 10, 10, 2), 2, "").has_value());
  EXPECT_FALSE(JudgeRollback(Paired(5, 12, 10, 0.4), 2, "").has_value());
  // One pair against the plan in 8 puts 0 inside the interval.
  AggregatedTimes a = Paired(8, 12, 10, 0.4);
  a.plan_s[3] = a.baseline_s[3] - 1e-3;
  EXPECT_FALSE(JudgeRollback(a, 2, "").has_value());
  // No baseline: nothing to judge.
  const Row rows[] = {Row(0, std::vector<double>(8, 0.012))};
  EXPECT_FALSE(JudgeRollback(AggregateRanks(rows), 1, "").has_value());
}

TEST(PlanFeedbackTest, CalibrationIsTheMedianRatioOverPlausiblePlansNotRolledBack) {
  EXPECT_EQ(Calibration({}), 0);
  std::vector<MeasuredPlan> plans(3);
  plans[0].predicted_s = 1.0;
  plans[0].measured_s = 2.0;
  plans[1].predicted_s = 2.0;
  plans[1].measured_s = 1.0;
  plans[2].predicted_s = 1.0;
  plans[2].measured_s = 8.0;
  plans[2].rolled_back = true;
  EXPECT_DOUBLE_EQ(Calibration(plans), 1.0);  // the median of 2 and 0.5 in log space
  plans[1].measured_s = 0;                     // nothing measured: no sample
  EXPECT_DOUBLE_EQ(Calibration(plans), 2.0);
}

TEST(PlanFeedbackTest, OneOutlierCannotMoveTheCalibration) {
  std::vector<MeasuredPlan> plans(5);
  for (MeasuredPlan& p : plans) {
    p.predicted_s = 0.010;
    p.measured_s = 0.0108;
  }
  plans[4].measured_s = 0.09;  // 9x: plausible, but one of five
  EXPECT_NEAR(Calibration(plans), 1.08, 1e-9);
  plans[3].measured_s = 3600;  // 360000x: not a sample
  EXPECT_FALSE(PlausibleForCalibration(plans[3].measured_s, plans[3].predicted_s));
  EXPECT_FALSE(PlausibleForCalibration(5e-324, 0.01));
  EXPECT_TRUE(PlausibleForCalibration(0.0011, 0.01));
  EXPECT_NEAR(Calibration(plans), 1.08, 1e-9);
  plans[2].plausible = false;
  EXPECT_NEAR(Calibration(plans), 1.08, 1e-9);
}

}  // namespace
}  // namespace braid::server
