// A gtest binary for gpu_skip_rule_test.sh, linked with the gpu tests' main
// (base/gpu_test_main.cc). Each suite is one situation; the script selects
// it with --gtest_filter.
#include "gtest/gtest.h"

namespace {

TEST(Mixed, Skips) { GTEST_SKIP() << "no device"; }
TEST(Mixed, Fails) { FAIL() << "a real failure next to a skip"; }

TEST(AllSkip, First) { GTEST_SKIP() << "no device"; }
TEST(AllSkip, Second) { GTEST_SKIP() << "needs 2 GPUs"; }

TEST(PassAndSkip, Passes) { SUCCEED(); }
TEST(PassAndSkip, Skips) { GTEST_SKIP() << "needs 2 GPUs"; }

}  // namespace
