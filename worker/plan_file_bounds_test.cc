// Plan bytes reach the activator from a file or a server, and cached plans
// from disk: all are parsed within size and depth bounds
// (base/bounded_json.h), so a deeply nested document is refused with a
// status instead of overflowing the stack of every rank that copies it.
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/activator.h"
#include "worker/plan_cache.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;

// {"plan":{"plan":...}} `levels` deep: 1.2 MB at 100,000 levels.
std::string NestedPlan(int levels) {
  std::string s;
  s.reserve(static_cast<size_t>(levels) * 10);
  for (int i = 0; i < levels; ++i) s += "{\"plan\":";
  s += "{}";
  for (int i = 0; i < levels; ++i) s += "}";
  return s;
}

TEST(PlanFileBoundsTest, ADeeplyNestedPlanIsRefused) {
  const std::string deep = NestedPlan(100000);
  absl::StatusOr<v1::Plan> p = ParsePlanFile(deep, "deep.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("deep.json: JSON nested more than 64 levels deep"));
  EXPECT_FALSE(IsOverlapPlanFile(deep));
  absl::StatusOr<OverlapPlan> o = ParseOverlapPlanFile(deep, "deep.json", 2);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("nested more than 64 levels"));
}

TEST(PlanFileBoundsTest, PlansWithinTheBoundsStillParse) {
  // `braid plan --json` output: the plan under "plan", its fingerprint beside it.
  const std::string text = R"({"plan": {"format": "braid.plan.v1",
      "groups": [{"ops": ["a", "b"]}], "buckets": [["g1", "g2"]]},
      "graph_fingerprint": "abc", "predicted_iteration_s": 0.5})";
  absl::StatusOr<v1::Plan> p = ParsePlanFile(text, "plan.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->graph_fingerprint(), "abc");
  ASSERT_EQ(p->fusion_groups_size(), 1);
  EXPECT_EQ(p->fusion_groups(0).ops_size(), 2);
  ASSERT_EQ(p->buckets_size(), 1);
  EXPECT_EQ(p->buckets(0).gradients(1), "g2");
  // Nesting near the bound in an ignored field is fine.
  std::string nested = "1";
  for (int i = 0; i < 60; ++i) nested = "[" + nested + "]";
  absl::StatusOr<v1::Plan> q = ParsePlanFile(
      R"({"format": "braid.plan.v1", "groups": [], "buckets": [], "note": )" + nested + "}",
      "note.json");
  EXPECT_TRUE(q.ok()) << q.status();
}

TEST(PlanFileBoundsTest, ADeeplyNestedCacheFileIsDataLoss) {
  const std::string dir = ::testing::TempDir() + "/plan_file_bounds_cache";
  std::filesystem::remove_all(dir);
  LocalPlanCache cache(dir);
  absl::StatusOr<std::string> path = cache.PathFor("job-1");
  ASSERT_TRUE(path.ok()) << path.status();
  std::filesystem::create_directories(dir);
  std::ofstream(*path) << NestedPlan(100000);
  absl::StatusOr<std::optional<v1::GetPlanResponse>> got = cache.Get("job-1");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("nested more than 64 levels"));
}

}  // namespace
}  // namespace braid::worker
