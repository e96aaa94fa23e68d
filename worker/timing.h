// Timing helpers of the profilers, the collective benchmark and the executor:
// the process's allocator steady state and a monotonic stopwatch. The
// summaries of repeated timings live in base/stats.h.
#ifndef BRAID_WORKER_TIMING_H_
#define BRAID_WORKER_TIMING_H_

#include <chrono>
#include <vector>

#include "base/stats.h"

namespace braid::worker {

// The summaries moved to base/stats.h (the server uses them too); the
// worker's callers keep their names.
using braid::MedianConfidenceInterval;
using braid::MedianInterval;
using braid::FormatInterval;
using braid::IntervalName;
using braid::Quantile;
using braid::Summarize;
using braid::TimingSummary;

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
