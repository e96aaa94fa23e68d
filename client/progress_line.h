// A progress line that suits where it goes. On a terminal it is rewritten in
// place (`\r`), at most twice a second; piped into a log it becomes plain
// lines, at most one per `log_every_s` (5 s), so a long job leaves a
// readable log instead of thousands of carriage-return records. The final
// state is always written.
//
//   ProgressLine p(stderr);
//   for (...) p.Update(absl::StrFormat("measured %d/%d", done, total));
//   p.Finish(absl::StrFormat("measured %d/%d", total, total));
#ifndef BRAID_CLIENT_PROGRESS_LINE_H_
#define BRAID_CLIENT_PROGRESS_LINE_H_

#include <chrono>
#include <cstdio>
#include <string>

namespace braid::client {

class ProgressLine {
 public:
  explicit ProgressLine(FILE* out, double log_every_s = 5);
  // Also used by tests: the terminal decision made by the caller.
  ProgressLine(FILE* out, bool tty, double log_every_s);

  // Writes `text` when due (throttled); `force`: now.
  void Update(const std::string& text, bool force = false);
  // The last state, always written, and the line ended.
  void Finish(const std::string& text);

  bool tty() const { return tty_; }

 private:
  FILE* out_;
  bool tty_;
  double every_s_;
  bool written_ = false;
  size_t last_width_ = 0;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace braid::client

#endif  // BRAID_CLIENT_PROGRESS_LINE_H_
