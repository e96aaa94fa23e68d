#include "client/progress_line.h"

#include <unistd.h>

namespace braid::client {

ProgressLine::ProgressLine(FILE* out, double log_every_s)
    : ProgressLine(out, isatty(fileno(out)) == 1, log_every_s) {}

ProgressLine::ProgressLine(FILE* out, bool tty, double log_every_s)
    : out_(out), tty_(tty), every_s_(tty ? 0.5 : log_every_s) {}

void ProgressLine::Update(const std::string& text, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && written_ && std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  written_ = true;
  if (tty_) {
    // Pad over a longer previous line.
    const std::string pad = text.size() < last_width_ ? std::string(last_width_ - text.size(), ' ') : "";
    std::fprintf(out_, "\r%s%s", text.c_str(), pad.c_str());
    last_width_ = text.size();
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void ProgressLine::Finish(const std::string& text) {
  Update(text, /*force=*/true);
  if (tty_) std::fprintf(out_, "\n");
  std::fflush(out_);
  written_ = false;
  last_width_ = 0;
}

}  // namespace braid::client
