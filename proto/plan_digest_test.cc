#include "proto/plan_digest.h"

#include "base/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace braid {
namespace {

v1::Plan MakePlan() {
  v1::Plan p;
  p.set_graph_fingerprint("00000000000000aa");
  p.set_cluster_fingerprint("cpu-local-bb");
  v1::FusionGroup* g = p.add_fusion_groups();
  g->add_ops("fc1");
  g->add_ops("relu1");
  p.add_buckets()->add_gradients("fc1.w.grad");
  p.add_ddp_buckets()->add_gradients("fc1.w.grad");
  p.set_predicted_iteration_s(0.012);
  p.set_predicted_compute_s(0.008);
  p.set_predicted_comm_s(0.006);
  p.set_cost_generation("gen-1");
  return p;
}

TEST(PlanDigestTest, CoversWhatRanksEnactNotTheCostFigures) {
  const v1::Plan p = MakePlan();
  const std::string d = PlanDigest(p);
  EXPECT_EQ(d.size(), 64u);
  v1::Plan recosted = p;
  recosted.set_predicted_iteration_s(0.5);
  recosted.clear_predicted_compute_s();
  recosted.set_cost_generation("gen-2");
  EXPECT_EQ(PlanDigest(recosted), d);
  for (int change = 0; change < 4; ++change) {
    v1::Plan q = p;
    if (change == 0) q.mutable_fusion_groups(0)->add_duplicated("fc1");
    if (change == 1) q.mutable_buckets(0)->add_gradients("fc2.w.grad");
    if (change == 2) q.set_graph_fingerprint("00000000000000ab");
    if (change == 3) q.clear_ddp_buckets();
    EXPECT_NE(PlanDigest(q), d) << change;
  }
  v1::Plan identity = p;
  identity.clear_predicted_iteration_s();
  identity.clear_predicted_compute_s();
  identity.clear_predicted_comm_s();
  identity.clear_cost_generation();
  EXPECT_EQ(d, Sha256Hex(SerializeDeterministic(identity)));
}

TEST(PlanDigestTest, OfSerializedBytesMatchesAndRejectsGarbage) {
  const v1::Plan p = MakePlan();
  absl::StatusOr<std::string> d = PlanDigestOfSerialized(SerializeDeterministic(p));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, PlanDigest(p));
  EXPECT_EQ(PlanDigestOfSerialized("\xff\xff\xff").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A parallel plan with a per-device program whose JSON's content hashes to
// its fingerprint (as graph::ComputeProgramFingerprint makes it).
v1::Plan MakeParallelPlan(uint64_t seed = 1) {
  v1::Plan p = MakePlan();
  v1::ParallelPlan* par = p.mutable_parallel();
  par->set_strategy("expert:megatron");
  par->set_degree(2);
  par->set_data_degree(1);
  par->set_model_degree(2);
  nlohmann::json j = {{"format", "braid-program/1"},
                      {"model", "mlp"},
                      {"row", "expert:megatron"},
                      {"mesh", {2}},
                      {"seed", seed},
                      {"model_fingerprint", "00000000000000aa"},
                      {"graph", "graph \"mlp.program\"\n"},
                      {"loads", nlohmann::json::object()}};
  const std::string fp = Sha256Hex(j.dump());
  j["program_fingerprint"] = fp;
  v1::DeviceProgram* dp = par->mutable_program();
  dp->set_format("braid-program/1");
  dp->set_row("expert:megatron");
  dp->add_mesh(2);
  dp->set_model_fingerprint("00000000000000aa");
  dp->set_program_fingerprint(fp);
  dp->set_json(j.dump());
  return p;
}

TEST(PlanDigestTest, CoversTheProgramThroughItsHeader) {
  const v1::Plan p = MakeParallelPlan();
  ASSERT_TRUE(CheckDeviceProgram(p.parallel().program()).ok())
      << CheckDeviceProgram(p.parallel().program());
  const std::string d = PlanDigest(p);
  // Another program (another seed: another fingerprint) is another plan.
  const v1::Plan other = MakeParallelPlan(2);
  ASSERT_TRUE(CheckDeviceProgram(other.parallel().program()).ok());
  EXPECT_NE(PlanDigest(other), d);
  for (int change = 0; change < 5; ++change) {
    v1::Plan q = p;
    v1::DeviceProgram* dp = q.mutable_parallel()->mutable_program();
    if (change == 0) dp->set_program_fingerprint(std::string(64, '0'));
    if (change == 1) dp->set_row("braid");
    if (change == 2) dp->set_mesh(0, 4);
    if (change == 3) dp->set_model_fingerprint("00000000000000ab");
    if (change == 4) q.mutable_parallel()->clear_program();
    EXPECT_NE(PlanDigest(q), d) << change;
  }
  v1::Plan refused = p;
  refused.mutable_parallel()->clear_program();
  const std::string without = PlanDigest(refused);
  refused.mutable_parallel()->set_program_error("lowering: no mesh");
  EXPECT_NE(PlanDigest(refused), without);
  // The JSON text itself is left to CheckDeviceProgram: its whitespace is
  // no part of the identity, its content is (through the fingerprint).
  v1::Plan spaced = p;
  spaced.mutable_parallel()->mutable_program()->set_json(
      nlohmann::json::parse(p.parallel().program().json()).dump(2));
  EXPECT_EQ(PlanDigest(spaced), d);
  EXPECT_TRUE(CheckDeviceProgram(spaced.parallel().program()).ok());
  absl::StatusOr<std::string> got = PlanDigestOfSerialized(SerializeDeterministic(spaced));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, d);
}

TEST(PlanDigestTest, OfSerializedBytesRefusesAProgramThatIsNotItsFingerprints) {
  const v1::Plan p = MakeParallelPlan();
  // The JSON of another program under this one's header.
  v1::Plan swapped = p;
  swapped.mutable_parallel()->mutable_program()->set_json(
      MakeParallelPlan(2).parallel().program().json());
  absl::StatusOr<std::string> d = PlanDigestOfSerialized(SerializeDeterministic(swapped));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("program_fingerprint"));
  // Its content changed, the fingerprint in it kept.
  nlohmann::json j = nlohmann::json::parse(p.parallel().program().json());
  j["seed"] = 7;
  v1::Plan changed = p;
  changed.mutable_parallel()->mutable_program()->set_json(j.dump());
  d = PlanDigestOfSerialized(SerializeDeterministic(changed));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("does not match program_fingerprint"));
  // Not JSON, or nested past the bound.
  for (const std::string& text : {std::string("{\"format\":"), std::string(100, '[')}) {
    v1::Plan bad = p;
    bad.mutable_parallel()->mutable_program()->set_json(text);
    EXPECT_EQ(CheckDeviceProgram(bad.parallel().program()).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace braid
