#include "base/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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
  double cdf = 0, cdf_at_l = -1;
  for (int k = 0; k < n / 2; ++k) {
    const double log_p = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) +
                         n * std::log(0.5);
    cdf += std::exp(log_p);
    if (cdf > tail) break;
    l = k;  // [x_(k+1), x_(n-k)] (1-based) covers with 1 - 2 P(B <= k)
    cdf_at_l = cdf;
  }
  m.low = values[l];
  m.high = values[n - 1 - l];
  m.level = level;
  m.count = n;
  m.at_level = cdf_at_l >= 0;
  // The whole range misses the median only when every value lies on one side.
  m.coverage = m.at_level ? 1 - 2 * cdf_at_l : std::max(0.0, 1 - 2 * std::pow(0.5, n));
  return m;
}

std::string IntervalName(const MedianInterval& m) {
  if (!m.at_level) return "range";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g%% CI", 100 * m.level);
  return buf;
}

std::string FormatInterval(const MedianInterval& m, double scale, int precision) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "[%.*f, %.*f]", precision, m.low * scale, precision,
                m.high * scale);
  std::string out = buf;
  if (!m.at_level) {
    std::snprintf(buf, sizeof(buf), " (range of %d, %.0f%% coverage)", m.count, 100 * m.coverage);
    out += buf;
  }
  return out;
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
