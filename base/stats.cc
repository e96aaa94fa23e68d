#include "base/stats.h"

#include <algorithm>
#include <cmath>

#include "glog/logging.h"

namespace braid {

double Quantile(const std::vector<double>& sorted, double q) {
  CHECK(!sorted.empty()) << "Quantile of an empty sample";
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

MedianInterval MedianConfidenceInterval(std::vector<double> values, double level) {
  MedianInterval m;
  if (values.empty()) return m;
  std::sort(values.begin(), values.end());
  const int n = static_cast<int>(values.size());
  m.median = Quantile(values, 0.5);
  const double tail = (1 - level) / 2;
  // cdf[k] = P(Bin(n, 1/2) <= k), summed in log space for large n.
  int l = 0;
  double cdf = 0;
  for (int k = 0; k < n / 2; ++k) {
    const double log_p = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) +
                         n * std::log(0.5);
    cdf += std::exp(log_p);
    if (cdf > tail) break;
    l = k;  // [x_(k+1), x_(n-k)] (1-based) covers with 1 - 2 P(B <= k)
  }
  m.low = values[l];
  m.high = values[n - 1 - l];
  return m;
}

TimingSummary Summarize(std::vector<double> seconds) {
  TimingSummary s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  s.median_s = Quantile(seconds, 0.5);
  s.iqr_s = Quantile(seconds, 0.75) - Quantile(seconds, 0.25);
  s.count = static_cast<int>(seconds.size());
  return s;
}

}  // namespace braid
