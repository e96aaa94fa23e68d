#include "proto/plan_digest.h"

#include "base/digest.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace braid
