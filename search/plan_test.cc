// Tests of plan.h: JSON by name, canonical form and fingerprints.
#include "search/plan.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/test_util.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PlanJsonTest, RoundTripsByName) {
  TinyTraining t = MakeTinyTraining();
  Plan p;
  p.groups.push_back({{t.relu_grad, t.b_grad}, {t.relu_grad}});
  p.buckets.push_back({{t.b_grad_t, t.w_grad_t}});
  nlohmann::json j = PlanToJson(t.g, p);
  EXPECT_EQ(j["groups"][0]["ops"], nlohmann::json({"relu_grad", "b_grad"}));
  EXPECT_EQ(j["groups"][0]["duplicated"], nlohmann::json({"relu_grad"}));
  EXPECT_EQ(j["buckets"][0], nlohmann::json({"b.grad", "w.grad"}));
  absl::StatusOr<Plan> back = PlanFromJson(t.g, nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
}

TEST(PlanJsonTest, UnknownNamesAreNamedInTheError) {
  TinyTraining t = MakeTinyTraining();
  absl::StatusOr<Plan> p = PlanFromJson(
      t.g, nlohmann::json::parse(R"({"groups":[{"ops":["relu","nope"]}],"buckets":[]})"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("groups[0].ops[1]: no op named 'nope'"));
  p = PlanFromJson(t.g, nlohmann::json::parse(R"({"buckets":[["w.grad","zz.grad"]]})"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("no tensor named 'zz.grad'"));
}

TEST(PlanTest, CanonicalizeAndFingerprint) {
  Plan a;
  a.groups.push_back({{5, 3}, {}});
  a.groups.push_back({{2, 1}, {2}});
  a.groups.push_back({{7}, {}});  // a single unfused op: dropped
  a.buckets.push_back({{4, 9}});
  Plan c = Canonicalize(a);
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_THAT(c.groups[0].ops, ElementsAre(1, 2));
  EXPECT_THAT(c.groups[1].ops, ElementsAre(3, 5));
  Plan b = c;
  EXPECT_EQ(PlanFingerprint(a), PlanFingerprint(b));
  b.buckets[0].grads = {9, 4};
  EXPECT_NE(PlanFingerprint(a), PlanFingerprint(b));
}

}  // namespace
}  // namespace braid::search
