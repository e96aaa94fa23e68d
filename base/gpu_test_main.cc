// main() of every gpu-labelled test binary: ctest's verdict follows each test
// rather than the binary's first skip. Exit 1 when any test failed, 77 (the
// tests' SKIP_RETURN_CODE) only when every test that ran was skipped, 0
// otherwise. A binary where one test skips and another fails is a failure.
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc != 0 || u.failed_test_count() > 0 || u.ad_hoc_test_result().Failed()) return 1;
  if (u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return 77;
  return 0;
}
