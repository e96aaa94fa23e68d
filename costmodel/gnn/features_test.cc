#include "costmodel/gnn/features.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"

namespace braid::costmodel::gnn {
namespace {

using graph::OpId;

// relu(x @ w) feeds an Add outside the group {mm, relu}; a Sigmoid reads y
// (inside) too, so y leaves when the Sigmoid is not a member.
constexpr char kGraph[] = R"(graph "g"
tensor x f32[8,16] input
tensor w f32[16,32] parameter
tensor y f32[8,32] activation
tensor z f32[8,32] activation
tensor b f32[8,32] input
tensor out f32[8,32] activation
tensor big f32[2,3,4,5,6] input
tensor big2 f32[2,3,4,5,6] activation
op mm MatMul (x, w) -> (y) flops=8192.0
op relu Relu (y) -> (z) flops=256.0
op add Add (z, b) -> (out) flops=256.0
op neg Neg (big) -> (big2)
output out
output big2
)";

// The group {mm, relu} alone, as the sampler stores it (server's
// FusedGroupGraph): what leaves the group is a graph output.
constexpr char kGroupAlone[] = R"(graph "fused:mm"
tensor x f32[8,16] input
tensor w f32[16,32] parameter
tensor y f32[8,32] activation
tensor z f32[8,32] activation
op mm MatMul (x, w) -> (y) flops=8192.0
op relu Relu (y) -> (z) flops=256.0
output z
)";

graph::Graph Parse(const char* text) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

float Feature(const FeatureGraph& f, int node, int k) {
  return f.nodes[static_cast<size_t>(node) * kNodeFeatures + k];
}

TEST(FeaturesTest, VocabularyIsSortedWithUnknownZero) {
  OpVocabulary v = OpVocabulary::Build({"Relu", "MatMul", "Relu", "Add"});
  EXPECT_EQ(v.size(), 4);
  EXPECT_EQ(v.Index("Add"), 1);
  EXPECT_EQ(v.Index("MatMul"), 2);
  EXPECT_EQ(v.Index("Relu"), 3);
  EXPECT_EQ(v.Index("Conv"), 0);
}

TEST(FeaturesTest, MatMulReluGroup) {
  graph::Graph g = Parse(kGraph);
  OpVocabulary v = OpVocabulary::Build({"MatMul", "Relu"});
  const std::vector<OpId> ops = {1, 0};  // any order: nodes follow op ids
  const std::vector<MemberTime> times = {{2e-5, true}, {4e-6, false}};
  FeatureGraph f = ExtractFeatures(g, ops, times, v);
  ASSERT_EQ(f.num_nodes, 2);
  EXPECT_EQ(f.type_ids, (std::vector<int32_t>{1, 2}));
  // mm: reads x (512 B) and w (2048 B), writes y (1024 B).
  EXPECT_FLOAT_EQ(Feature(f, 0, 0), std::log1p(2560.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 1), std::log1p(1024.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 2), std::log1p(8192.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 3), std::log(2e-5));
  EXPECT_EQ(Feature(f, 0, 4), 1.0f);
  EXPECT_EQ(Feature(f, 1, 4), 0.0f);
  // Output [8,32] right-aligned to rank 4: log2(1+d) = 0, 0, log2(9), log2(33).
  EXPECT_EQ(Feature(f, 0, 5), 0.0f);
  EXPECT_EQ(Feature(f, 0, 6), 0.0f);
  EXPECT_FLOAT_EQ(Feature(f, 0, 7), std::log2(9.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 8), std::log2(33.0));
  // Inputs x [8,16] and w [16,32].
  EXPECT_FLOAT_EQ(Feature(f, 0, 11), std::log2(9.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 12), std::log2(17.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 15), std::log2(17.0));
  EXPECT_FLOAT_EQ(Feature(f, 0, 16), std::log2(33.0));
  // relu has one input, so input 1's shape is all zeros.
  for (int k = 13; k < 17; ++k) EXPECT_EQ(Feature(f, 1, k), 0.0f);
  // External inputs and whether an output leaves: mm 2 and no (y is read
  // only by relu), relu 0 and yes (z feeds the Add outside).
  EXPECT_EQ(Feature(f, 0, 17), 2.0f);
  EXPECT_EQ(Feature(f, 0, 18), 0.0f);
  EXPECT_EQ(Feature(f, 1, 17), 0.0f);
  EXPECT_EQ(Feature(f, 1, 18), 1.0f);
  // Category one-hot: MatMul and elementwise.
  EXPECT_EQ(Feature(f, 0, 19 + static_cast<int>(graph::OpCategory::kMatMul)), 1.0f);
  EXPECT_EQ(Feature(f, 1, 19 + static_cast<int>(graph::OpCategory::kElementwise)), 1.0f);
  float hot = 0;
  for (int k = 19; k < kNodeFeatures; ++k) hot += Feature(f, 0, k);
  EXPECT_EQ(hot, 1.0f);
  // Adjacency: the y edge, both directions, and self loops.
  EXPECT_EQ(f.adj, (std::vector<uint8_t>{1, 1, 1, 1}));
  // Group: log of 24 us, boundary x + w + z = 3584 B, two members.
  EXPECT_NEAR(f.log_sum_member_s, std::log(2.4e-5), 1e-12);
  EXPECT_FLOAT_EQ(f.group[0], std::log(2.4e-5));
  EXPECT_FLOAT_EQ(f.group[1], std::log1p(3584.0));
  EXPECT_EQ(f.group[2], 2.0f);
}

TEST(FeaturesTest, SameFeaturesInTheModelAndAlone) {
  graph::Graph g = Parse(kGraph);
  graph::Graph alone = Parse(kGroupAlone);
  OpVocabulary v = OpVocabulary::Build({"MatMul", "Relu"});
  const std::vector<MemberTime> times = {{2e-5, true}, {4e-6, false}};
  FeatureGraph a = ExtractFeatures(g, std::vector<OpId>{0, 1}, times, v);
  FeatureGraph b = ExtractFeatures(alone, std::vector<OpId>{0, 1}, times, v);
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(a.adj, b.adj);
  EXPECT_EQ(a.type_ids, b.type_ids);
  EXPECT_EQ(a.group, b.group);
}

TEST(FeaturesTest, UnconnectedMembersAndHighRank) {
  graph::Graph g = Parse(kGraph);
  OpVocabulary v = OpVocabulary::Build({"MatMul"});
  FeatureGraph f = ExtractFeatures(g, std::vector<OpId>{0, 3}, std::vector<MemberTime>{{1e-5, true}, {0, false}}, v);
  EXPECT_EQ(f.type_ids, (std::vector<int32_t>{1, 0}));  // Neg is unknown
  EXPECT_EQ(f.adj, (std::vector<uint8_t>{1, 0, 0, 1}));
  // [2,3,4,5,6] keeps the last four dims with the leading 2 folded into 3.
  EXPECT_FLOAT_EQ(Feature(f, 1, 5), std::log2(7.0));
  EXPECT_FLOAT_EQ(Feature(f, 1, 6), std::log2(5.0));
  EXPECT_FLOAT_EQ(Feature(f, 1, 8), std::log2(7.0));
  // A zero time is clamped to a nanosecond.
  EXPECT_FLOAT_EQ(Feature(f, 1, 3), std::log(1e-9));
  // y leaves the group {mm, neg}: relu reads it.
  EXPECT_EQ(Feature(f, 0, 18), 1.0f);
}

TEST(FeaturesTest, MemberTimesFromTheCostModel) {
  graph::Graph g = Parse(kGraph);
  ClusterSpec c;
  c.name = "t";
  c.device = {.kind = "test-dev", .peak_flops_f32 = 1e12, .peak_flops_f16 = 4e12,
              .memory_bandwidth = 1e11, .memory_bytes = int64_t{1} << 34, .launch_overhead_s = 1e-5};
  ClusterCostModel m(c, nullptr, nullptr, CommModel(c));
  std::vector<MemberTime> t = MemberTimes(m, g, std::vector<OpId>{1, 0});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_FALSE(t[0].measured);
  EXPECT_DOUBLE_EQ(t[0].seconds, m.RooflineTime(g, std::vector<OpId>{0}));
  EXPECT_DOUBLE_EQ(t[1].seconds, m.RooflineTime(g, std::vector<OpId>{1}));
}

TEST(FeaturesTest, StatsNormaliseAndGuardConstants) {
  graph::Graph g = Parse(kGraph);
  OpVocabulary v = OpVocabulary::Build({"MatMul", "Relu"});
  std::vector<FeatureGraph> fs = {
      ExtractFeatures(g, std::vector<OpId>{0, 1}, std::vector<MemberTime>{{1e-5, true}, {1e-6, true}}, v),
      ExtractFeatures(g, std::vector<OpId>{1, 2}, std::vector<MemberTime>{{1e-6, true}, {1e-6, true}}, v)};
  FeatureStats s = ComputeStats(fs);
  ASSERT_EQ(s.node_mean.size(), static_cast<size_t>(kNodeFeatures));
  // Everything measured: the constant feature gets std 1.
  EXPECT_FLOAT_EQ(s.node_mean[4], 1.0f);
  EXPECT_FLOAT_EQ(s.node_std[4], 1.0f);
  // Members: 2 and 2.
  EXPECT_FLOAT_EQ(s.group_mean[2], 2.0f);
  EXPECT_FLOAT_EQ(s.group_std[2], 1.0f);
  // Log member time over the four nodes.
  const double m = (std::log(1e-5) + 3 * std::log(1e-6)) / 4;
  EXPECT_NEAR(s.node_mean[3], m, 1e-5);
}

// The structural key identifies exactly what the fused signature does:
// over every chain of 2-5 ops of two zoo models, equal keys <=> equal
// signatures.
TEST(FeaturesTest, StructuralKeyMatchesFusedSignature) {
  for (const char* model : {"resnet50", "transformer"}) {
    absl::StatusOr<graph::Graph> g = graph::BuildZooModel(model);
    ASSERT_TRUE(g.ok()) << g.status();
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_sig;
    std::map<std::pair<uint64_t, uint64_t>, std::string> by_key;
    int groups = 0;
    for (OpId start = 0; start < g->num_ops(); ++start) {
      std::vector<OpId> group = {start};
      while (group.size() < 5) {
        std::vector<OpId> next = g->Successors(group.back());
        if (next.empty()) break;
        group.push_back(next.front());
        std::vector<OpId> sorted = SortedGroup(group);
        const std::string sig = FusedSignature(*g, sorted);
        const GroupKey k = StructuralKey(*g, sorted);
        const std::pair<uint64_t, uint64_t> key = {k.lo, k.hi};
        auto [s_it, s_new] = by_sig.emplace(sig, key);
        EXPECT_EQ(s_it->second, key) << sig;
        auto [k_it, k_new] = by_key.emplace(key, sig);
        EXPECT_EQ(k_it->second, sig);
        ++groups;
      }
    }
    EXPECT_GT(groups, 100) << model;
    EXPECT_LT(by_sig.size(), static_cast<size_t>(groups)) << model << ": repeated layers share signatures";
    EXPECT_EQ(by_sig.size(), by_key.size());
  }
}

}  // namespace
}  // namespace braid::costmodel::gnn
