// StopToken: why a search, or a baseline feeding it, should give up early --
// a caller-owned flag was raised (a job's cancel, the server's shutdown) or a
// deadline passed. Long loops poll it so that a stop takes effect within
// ~100 ms even on the largest graphs the service accepts; without it a job's
// baselines or a step with a huge `beta` ran to completion, holding a core
// and a search slot after `braid cancel` and SIGTERM.
//
// Polling is cheap (one relaxed load per flag and one steady_clock read), and
// the token is immutable once built, so any thread may poll a shared one.
//
//   std::atomic<bool> cancel{false};
//   StopToken stop;
//   stop.AddFlag(&cancel).SetDeadline(std::chrono::steady_clock::now() + 2s);
//   for (...) {
//     if (stop.StopRequested()) return partial;  // cancelled() or expired()
//   }
#ifndef BRAID_SEARCH_STOP_TOKEN_H_
#define BRAID_SEARCH_STOP_TOKEN_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "glog/logging.h"

namespace braid::search {

class StopToken {
 public:
  using Clock = std::chrono::steady_clock;
  // A search has at most a job cancel, a shutdown and one caller's flag.
  static constexpr int kMaxFlags = 4;

  // Never stops.
  StopToken() = default;

  // The token stops once `flag` is true. `flag` (null is ignored, as is a
  // flag already added) must outlive every copy of the token.
  StopToken& AddFlag(const std::atomic<bool>* flag) {
    if (flag == nullptr) return *this;
    for (int i = 0; i < num_flags_; ++i)
      if (flags_[i] == flag) return *this;
    CHECK_LT(num_flags_, kMaxFlags) << "StopToken: too many flags";
    flags_[num_flags_++] = flag;
    return *this;
  }
  // The token stops once `deadline` passes; of two deadlines the earlier wins.
  StopToken& SetDeadline(Clock::time_point deadline) {
    if (deadline < deadline_) deadline_ = deadline;
    return *this;
  }

  // `other`'s flags and deadline as well: a phase's own stop conditions
  // joined to its caller's.
  StopToken& Add(const StopToken& other) {
    for (int i = 0; i < other.num_flags_; ++i) AddFlag(other.flags_[i]);
    return SetDeadline(other.deadline_);
  }
  // Stops `seconds` from now (never for seconds >= kNoDeadlineS or NaN).
  static constexpr double kNoDeadlineS = 1e9;
  StopToken& SetBudget(double seconds) {
    if (!(seconds < kNoDeadlineS)) return *this;
    const std::chrono::duration<double> d(std::max(seconds, 0.0));
    return SetDeadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(d));
  }
  bool has_deadline() const { return deadline_ != Clock::time_point::max(); }
  // Seconds until the deadline (0 once past); kNoDeadlineS without one.
  double RemainingSeconds() const {
    if (!has_deadline()) return kNoDeadlineS;
    return std::max(0.0, std::chrono::duration<double>(deadline_ - Clock::now()).count());
  }

  // The same flags without the deadline: for work a valid result cannot do
  // without, which only a cancel may interrupt.
  StopToken FlagsOnly() const {
    StopToken t = *this;
    t.deadline_ = Clock::time_point::max();
    return t;
  }

  bool cancelled() const {
    for (int i = 0; i < num_flags_; ++i) {
      if (flags_[i]->load(std::memory_order_relaxed)) return true;
    }
    return false;
  }
  bool expired() const {
    return deadline_ != Clock::time_point::max() && Clock::now() >= deadline_;
  }
  bool StopRequested() const { return cancelled() || expired(); }

  // Cancelled, DeadlineExceeded, or OK when no stop is requested.
  // IsStop(status) recognizes them.
  absl::Status ToStatus(std::string_view what) const {
    if (cancelled()) return absl::CancelledError(std::string(what) + ": cancelled");
    if (expired()) {
      return absl::DeadlineExceededError(std::string(what) + ": time budget exhausted");
    }
    return absl::OkStatus();
  }

  // Whether `s` is the status of a stop (ToStatus) rather than a failure.
  static bool IsStop(const absl::Status& s) {
    return s.code() == absl::StatusCode::kCancelled ||
           s.code() == absl::StatusCode::kDeadlineExceeded;
  }

 private:
  std::array<const std::atomic<bool>*, kMaxFlags> flags_{};
  int num_flags_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
};

}  // namespace braid::search

#endif  // BRAID_SEARCH_STOP_TOKEN_H_
