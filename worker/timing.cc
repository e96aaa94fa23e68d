#include "worker/timing.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>

#include "glog/logging.h"

namespace braid::worker {

bool KeepFreedMemory() {
  // 32 MiB: the largest mmap threshold glibc accepts on 64-bit; blocks below
  // it come from the heap and are reused. The heap is never trimmed.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
}

double Quantile(const std::vector<double>& sorted, double q) {
  CHECK(!sorted.empty()) << "Quantile of an empty sample";
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
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

}  // namespace braid::worker
