// Robust summaries of repeated timings: the median and the interquartile
// range (the spread the profile store records). Shared by the CPU profiler and
// the collective benchmark.
//
//   std::vector<double> t = {3e-3, 1e-3, 2e-3, 9e-3};
//   TimingSummary s = Summarize(t);  // s.median_s == 2.5e-3
#ifndef BRAID_WORKER_TIMING_H_
#define BRAID_WORKER_TIMING_H_

#include <chrono>
#include <vector>

namespace braid::worker {

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
// exists at 95%: the interval is the whole range.
struct MedianInterval {
  double median = 0, low = 0, high = 0;
};
MedianInterval MedianConfidenceInterval(std::vector<double> values, double level = 0.95);

// Keeps freed tensor memory in the process instead of returning it to the
// kernel: glibc serves large blocks with mmap and unmaps them on free (and
// trims the heap), so every iteration that allocates an activation page-faults
// it in again: 13% of a ResNet-18 CPU training step on the 2-core machine
// (BENCHMARKS.md). Training jobs avoid it with jemalloc/tcmalloc; the CPU
// executor ranks and the profilers set the same steady state with mallopt, so
// profiles and runs agree. Returns false when glibc refused a setting.
bool KeepFreedMemory();

// Seconds elapsed on the monotonic clock since `start`.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace braid::worker

#endif  // BRAID_WORKER_TIMING_H_
