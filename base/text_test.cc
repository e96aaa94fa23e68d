// Tests of UTF-8 validation and the terminal escaping of names.
#include "base/text.h"

#include "gtest/gtest.h"

namespace braid::base {
namespace {

TEST(TextTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("conv1"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("ab\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
}

TEST(TextTest, EscapeForDisplayNeutralizesControlCharacters) {
  EXPECT_EQ(EscapeForDisplay("resnet50 \xc3\xa9"), "resnet50 \xc3\xa9");
  EXPECT_EQ(EscapeForDisplay("a\nb"), "a\\x0ab");
  EXPECT_EQ(EscapeForDisplay("\x1b[2J\x1b[Hjob-0 done"), "\\x1b[2J\\x1b[Hjob-0 done");
  EXPECT_EQ(EscapeForDisplay("bad\xff"), "bad\\xff");
  EXPECT_EQ(EscapeForDisplay("\xc2\x9b"), "\\u009b");  // C1 CSI
  EXPECT_EQ(EscapeForDisplay("a\\x0a"), "a\\\\x0a");   // an escape cannot be forged
}

}  // namespace
}  // namespace braid::base
