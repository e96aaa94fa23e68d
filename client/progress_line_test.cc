#include "client/progress_line.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace braid::client {
namespace {

std::string Contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(ProgressLineTest, LogGetsPlainThrottledLinesAndTheFinalState) {
  FILE* f = std::tmpfile();
  ProgressLine p(f, /*tty=*/false, /*log_every_s=*/3600);
  for (int i = 0; i < 350; ++i) p.Update("step " + std::to_string(i));
  p.Finish("done 350");
  EXPECT_EQ(Contents(f), "step 0\ndone 350\n");  // no carriage returns
  std::fclose(f);
}

TEST(ProgressLineTest, TerminalRewritesInPlaceAndPadsShorterText) {
  FILE* f = std::tmpfile();
  ProgressLine p(f, /*tty=*/true, 5);
  p.Update("longer text");
  p.Update("dropped: within half a second");
  p.Finish("short");
  EXPECT_EQ(Contents(f), "\rlonger text\rshort      \n");
  std::fclose(f);
}

}  // namespace
}  // namespace braid::client
