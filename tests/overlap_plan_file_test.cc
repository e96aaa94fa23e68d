// Overlap plan files, the part the activator reads without ranks
// (worker/activator.h): what braid-overlap-measure --write-plan writes
// (OverlapPlanJson) parses back to the same spec and methods, and each way a
// plan can be wrong is refused naming the field. The ranks' side (broadcast,
// HMAC, agreement, training) is in activator_e2e_test.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/activator.h"
#include "worker/overlap_train.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;
using M = DecomposeMethod;

OverlapTrainSpec TinyTransformer() {
  OverlapTrainSpec s;
  s.model = OverlapModel::kTransformer;
  s.rows = 32;
  s.d_model = 16;
  s.d_ff = 32;
  s.heads = 4;
  s.seq = 8;
  s.blocks = 1;
  s.ranks = 2;
  s.lr = 0.02;
  s.seed = 9;
  return s;
}

std::vector<M> Methods(size_t n) {
  std::vector<M> out;
  for (size_t i = 0; i < n; ++i) out.push_back(i % 2 == 0 ? M::kLooped : M::kNone);
  return out;
}

TEST(OverlapPlanFileTest, WrittenPlanParsesBackToTheSameSpecAndMethods) {
  const OverlapTrainSpec s = TinyTransformer();
  const std::vector<M> methods = Methods(OverlapPairs(s).size());
  ASSERT_EQ(methods.size(), 8u);  // transformer: 8 pairs per block
  const std::string text = OverlapPlanJson(s, methods, 0.0125);
  EXPECT_TRUE(IsOverlapPlanFile(text));
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], "braid.plan.v1");
  EXPECT_EQ(j["overlap_training"]["pairs"][0], "b0.qkv.ag");
  EXPECT_EQ(j["overlap_training"]["pairs"].size(), 8u);

  absl::StatusOr<OverlapPlan> p = ParseOverlapPlanFile(text, "ovl.json", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->methods, methods);
  EXPECT_DOUBLE_EQ(p->predicted_step_s, 0.0125);
  EXPECT_EQ(p->spec.model, OverlapModel::kTransformer);
  EXPECT_EQ(p->spec.rows, 32);
  EXPECT_EQ(p->spec.d_model, 16);
  EXPECT_EQ(p->spec.d_ff, 32);
  EXPECT_EQ(p->spec.heads, 4);
  EXPECT_EQ(p->spec.seq, 8);
  EXPECT_EQ(p->spec.blocks, 1);
  EXPECT_EQ(p->spec.ranks, 2);
  EXPECT_DOUBLE_EQ(p->spec.lr, 0.02);
  EXPECT_EQ(p->spec.seed, 9u);
  ASSERT_EQ(p->spec.variants.size(), 1u);
  EXPECT_EQ(p->spec.variants[0], methods);

  // Not a data-parallel plan: ParsePlanFile says where it runs.
  absl::StatusOr<v1::Plan> dp = ParsePlanFile(text, "ovl.json");
  ASSERT_FALSE(dp.ok());
  EXPECT_THAT(dp.status().message(), HasSubstr("overlap"));
  EXPECT_FALSE(IsOverlapPlanFile(R"({"format": "braid.plan.v1", "groups": []})"));
}

TEST(OverlapPlanFileTest, EachWrongFieldIsRefusedByName) {
  const OverlapTrainSpec s = TinyTransformer();
  const nlohmann::json good = nlohmann::json::parse(OverlapPlanJson(s, Methods(8), 0.01));
  auto refused = [](const nlohmann::json& j, int world) {
    absl::StatusOr<OverlapPlan> p = ParseOverlapPlanFile(j.dump(), "ovl.json", world);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  EXPECT_THAT(refused(good, 4), HasSubstr("\"ranks\" is 2, but the world size is 4"));

  nlohmann::json j = good;
  j["overlap_training"]["methods"].erase(0);
  EXPECT_THAT(refused(j, 2), HasSubstr("\"methods\" lists 7 methods, the transformer spec has 8 pairs"));

  j = good;
  j["overlap_training"]["methods"][3] = "sideways";
  EXPECT_THAT(refused(j, 2), HasSubstr("\"methods\"[3] (pair b0.fc2.rs)"));

  j = good;
  j["overlap_training"].erase("d_ff");
  EXPECT_THAT(refused(j, 2), HasSubstr("overlap_training has no \"d_ff\""));

  j = good;
  j["overlap_training"]["rows"] = "many";
  EXPECT_THAT(refused(j, 2), HasSubstr("overlap_training \"rows\""));

  j = good;
  j["overlap_training"]["heads"] = 3;  // not a multiple of ranks
  EXPECT_THAT(refused(j, 2), HasSubstr("heads=3"));

  j = good;
  j["overlap_training"]["model"] = "rnn";
  EXPECT_THAT(refused(j, 2), HasSubstr("\"model\""));

  j = good;
  j["format"] = "other";
  EXPECT_THAT(refused(j, 2), HasSubstr("braid.plan.v1"));
}

}  // namespace
}  // namespace braid::worker
