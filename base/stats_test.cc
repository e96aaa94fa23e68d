#include "base/stats.h"

#include <cmath>

#include "gtest/gtest.h"

namespace braid {
namespace {

TEST(StatsTest, MedianAndIqrInterpolateLikeNumpy) {
  // sorted: 1 2 3 9 -> median 2.5; q25 at pos 0.75 -> 1.75; q75 at 2.25 -> 4.5.
  TimingSummary s = Summarize({3, 1, 9, 2});
  EXPECT_DOUBLE_EQ(s.median_s, 2.5);
  EXPECT_DOUBLE_EQ(s.iqr_s, 4.5 - 1.75);
  EXPECT_EQ(s.count, 4);
  TimingSummary odd = Summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median_s, 3);
  EXPECT_DOUBLE_EQ(odd.iqr_s, 4 - 2);
  TimingSummary one = Summarize({7});
  EXPECT_DOUBLE_EQ(one.median_s, 7);
  EXPECT_DOUBLE_EQ(one.iqr_s, 0);
  EXPECT_EQ(Summarize({}).count, 0);
}

TEST(StatsTest, QuantileEnds) {
  std::vector<double> v = {1, 2, 4};
  EXPECT_DOUBLE_EQ(Quantile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Quantile(v, 1), 4);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.75), 3);
}

// n = 20 at 95%: the 6th and 15th order statistics (P(Bin(20, 1/2) <= 5) =
// 0.0207, <= 6: 0.0577).
TEST(StatsTest, MedianConfidenceIntervalFromOrderStatistics) {
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  MedianInterval m = MedianConfidenceInterval(v, 0.95);
  EXPECT_DOUBLE_EQ(m.median, 10.5);
  EXPECT_DOUBLE_EQ(m.low, 6);
  EXPECT_DOUBLE_EQ(m.high, 15);
  EXPECT_TRUE(m.at_level);
  EXPECT_GE(m.coverage, 0.95);
  EXPECT_EQ(IntervalName(m), "95% CI");
  EXPECT_EQ(FormatInterval(m, 1.0, 1), "[6.0, 15.0]");
  // Too few values for 95%: the whole range, and said so.
  m = MedianConfidenceInterval({3, 1, 2}, 0.95);
  EXPECT_DOUBLE_EQ(m.low, 1);
  EXPECT_DOUBLE_EQ(m.high, 3);
  EXPECT_FALSE(m.at_level);
  EXPECT_DOUBLE_EQ(m.coverage, 0.75);
  EXPECT_EQ(IntervalName(m), "range");
  EXPECT_EQ(FormatInterval(m, 1000.0, 0), "[1000, 3000] (range of 3, 75% coverage)");
}

// 5 values cover the median 93.75% of the time, 6 values 96.9%: the first
// n at which a 95% interval exists is 6.
TEST(StatsTest, NinetyFivePercentNeedsSixValues) {
  MedianInterval five = MedianConfidenceInterval({5, 4, 3, 2, 1});
  EXPECT_FALSE(five.at_level);
  EXPECT_DOUBLE_EQ(five.coverage, 0.9375);
  MedianInterval six = MedianConfidenceInterval({6, 5, 4, 3, 2, 1});
  EXPECT_TRUE(six.at_level);
  EXPECT_DOUBLE_EQ(six.coverage, 1 - 2 * std::pow(0.5, 6));
  EXPECT_DOUBLE_EQ(six.low, 1);
  EXPECT_DOUBLE_EQ(six.high, 6);
}

}  // namespace
}  // namespace braid
