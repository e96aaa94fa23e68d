// Robust summaries of repeated timings: the median, the interquartile range
// and a distribution-free confidence interval of the median. Used wherever
// braid compares measured times: the profilers and the executor (worker/),
// `braid run` (client/) and the server's rollback of plans measured slower
// than their baseline (server/).
//
//   std::vector<double> t = {3e-3, 1e-3, 2e-3, 9e-3};
//   TimingSummary s = Summarize(t);  // s.median_s == 2.5e-3
//   MedianInterval ci = MedianConfidenceInterval(paired_differences);
//   if (ci.low > 0) { /* slower beyond the measured spread */ }
#ifndef BRAID_BASE_STATS_H_
#define BRAID_BASE_STATS_H_

#include <string>
#include <vector>

namespace braid {

struct TimingSummary {
  double median_s = 0;
  double iqr_s = 0;  // 75th minus 25th percentile
  int count = 0;
};

// Quantile q in [0, 1] with linear interpolation between order statistics
// (numpy's default). `sorted` must be sorted ascending and non-empty.
double Quantile(const std::vector<double>& sorted, double q);

// Median and IQR; all zero for an empty input.
TimingSummary Summarize(std::vector<double> seconds);

// The median of a sample and a distribution-free confidence interval for it
// from order statistics: [x_(l), x_(n-1-l)] with the largest l such that
// P(Bin(n, 1/2) <= l - 1) <= (1 - level) / 2, so the interval holds the true
// median with probability >= level. With fewer than 6 values no such l
// exists at 95%: low and high are then the whole range, `at_level` is false
// and `coverage` says what the range does cover (1 - 2^(1-n)); printers say
// "range", not "95% CI" (IntervalName).
struct MedianInterval {
  double median = 0, low = 0, high = 0;
  double level = 0.95;     // asked for
  double coverage = 0;     // what [low, high] covers
  bool at_level = false;   // coverage >= level
  int count = 0;
};
MedianInterval MedianConfidenceInterval(std::vector<double> values, double level = 0.95);

// "95% CI" when the interval reaches its level, "range" otherwise.
std::string IntervalName(const MedianInterval& m);
// "[low, high]" scaled and printed with `precision` decimals, followed by
// " (range of n)" when the interval is only the range of n values.
std::string FormatInterval(const MedianInterval& m, double scale = 1.0, int precision = 3);

}  // namespace braid

#endif  // BRAID_BASE_STATS_H_
