#include "base/digest.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace braid {
namespace {

// FIPS 180-2 and RFC 4231 test vectors.
TEST(DigestTest, Sha256KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, HmacSha256Rfc4231Case2) {
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(DigestTest, DigestsEqualIgnoresCaseAndRejectsAnyDifference) {
  EXPECT_TRUE(DigestsEqual("ab01", "AB01"));
  EXPECT_FALSE(DigestsEqual("ab01", "ab02"));
  EXPECT_FALSE(DigestsEqual("ab01", "ab0"));
  EXPECT_FALSE(DigestsEqual("", ""));
}

TEST(DigestTest, PlanSecretFromFileOrEnvironment) {
  unsetenv("BRAID_PLAN_SECRET_FILE");
  unsetenv("BRAID_PLAN_SECRET");
  absl::StatusOr<std::string> none = LoadPlanSecret("");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("BRAID_PLAN_SECRET"), std::string_view::npos);
  setenv("BRAID_PLAN_SECRET", "short", 1);
  EXPECT_EQ(LoadPlanSecret("").status().code(), absl::StatusCode::kFailedPrecondition);
  setenv("BRAID_PLAN_SECRET", "0123456789abcdef-env", 1);
  EXPECT_EQ(*LoadPlanSecret(""), "0123456789abcdef-env");
  const std::string path = testing::TempDir() + "/secret";
  std::ofstream(path) << "  0123456789abcdef-file\n";
  EXPECT_EQ(*LoadPlanSecret(path), "0123456789abcdef-file");  // the file wins, trimmed
  EXPECT_EQ(LoadPlanSecret(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  unsetenv("BRAID_PLAN_SECRET");
}

}  // namespace
}  // namespace braid
