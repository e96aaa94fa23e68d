#include "base/bounded_json.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::base {
namespace {

using ::testing::HasSubstr;

std::string Nested(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += "{\"plan\":";
  s += "1";
  for (int i = 0; i < levels; ++i) s += "}";
  return s;
}

TEST(BoundedJsonTest, ParsesValidJson) {
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(R"({"a": [1, {"b": "c"}], "d": null})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][1]["b"], "c");
  EXPECT_TRUE((*j)["d"].is_null());
}

TEST(BoundedJsonTest, DepthAtTheLimitParses) {
  EXPECT_TRUE(ParseBoundedJson(Nested(64)).ok());
  EXPECT_TRUE(ParseBoundedJson(Nested(5), {.max_depth = 5}).ok());
}

TEST(BoundedJsonTest, DeepNestingIsRefusedNamingTheDepth) {
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(Nested(100000));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("more than 64 levels deep"));
  // The 65th '{' opens at byte 64 * 8.
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("at byte 512"));
  absl::Status s = CheckJsonBounds(Nested(6), {.max_depth = 5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than 5 levels"));
  // Arrays count as well as objects.
  EXPECT_FALSE(CheckJsonBounds(std::string(65, '[') + std::string(65, ']')).ok());
  EXPECT_TRUE(CheckJsonBounds(std::string(64, '[') + std::string(64, ']')).ok());
}

TEST(BoundedJsonTest, BracketsInsideStringsAreNotCounted) {
  const std::string brackets(1000, '[');
  absl::StatusOr<nlohmann::json> j =
      ParseBoundedJson(R"({"s": ")" + brackets + R"(", "t": "a\"[{"})", {.max_depth = 1});
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["s"], brackets);
  EXPECT_EQ((*j)["t"], "a\"[{");
  // An escaped backslash ends before the quote: the string closes there.
  EXPECT_FALSE(CheckJsonBounds(R"(["\\", [[]]])", {.max_depth = 2}).ok());
}

TEST(BoundedJsonTest, SizeIsRefused) {
  const std::string text = R"({"a": "0123456789"})";
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(text, {.max_bytes = 10});
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("limit of 10 bytes"));
  EXPECT_TRUE(ParseBoundedJson(text, {.max_bytes = text.size()}).ok());
}

TEST(BoundedJsonTest, InvalidJsonIsInvalidArgumentWithEscapedMessage) {
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson("{\"a\": \x1b[31m}");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("not valid JSON"));
  EXPECT_EQ(std::string(j.status().message()).find('\x1b'), std::string::npos);
  EXPECT_FALSE(ParseBoundedJson("").ok());
  EXPECT_FALSE(ParseBoundedJson("]]]]").ok());
}

TEST(BoundedJsonTest, OrDiscardedIsDiscardedOutOfBoundsOrInvalid) {
  EXPECT_EQ(ParseBoundedJsonOrDiscarded(R"({"a": 1})")["a"], 1);
  EXPECT_TRUE(ParseBoundedJsonOrDiscarded(Nested(100000)).is_discarded());
  EXPECT_TRUE(ParseBoundedJsonOrDiscarded("[1, 2", {}).is_discarded());
  EXPECT_TRUE(ParseBoundedJsonOrDiscarded("[1, 2]", {.max_bytes = 3}).is_discarded());
}

TEST(BoundedJsonTest, FilesAreCheckedBeforeReading) {
  const std::string dir = ::testing::TempDir() + "/bounded_json_files";
  std::filesystem::create_directories(dir);
  const std::string good = dir + "/good.json";
  std::ofstream(good) << R"({"x": 1})";
  absl::StatusOr<nlohmann::json> j = ReadBoundedJsonFile(good);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["x"], 1);

  absl::StatusOr<nlohmann::json> missing = ReadBoundedJsonFile(dir + "/missing.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<nlohmann::json> d = ReadBoundedJsonFile(dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("is a directory"));

  absl::StatusOr<nlohmann::json> big = ReadBoundedJsonFile(good, {.max_bytes = 4});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr(good + ": 8 bytes"));

  const std::string deep = dir + "/deep.json";
  std::ofstream(deep) << Nested(1000);
  absl::StatusOr<nlohmann::json> dj = ReadBoundedJsonFile(deep);
  EXPECT_EQ(dj.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dj.status().message()), HasSubstr(deep + ": JSON nested more than 64"));
}

}  // namespace
}  // namespace braid::base
