#include "costmodel/fused_sampler.h"

#include <set>
#include <string>
#include <vector>

#include "costmodel/profile_store.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using graph::Graph;
using graph::OpId;

Graph Parse(const std::string& text) {
  absl::StatusOr<Graph> g = graph::ParseText(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

// Two linear layers with bias and ReLU, a residual, and a diamond.
constexpr char kNet[] = R"(
graph "net"
tensor x f32[16,32] input
tensor w1 f32[32,32] parameter
tensor b1 f32[32] parameter
tensor w2 f32[32,32] parameter
tensor b2 f32[32] parameter
tensor y1 f32[16,32] activation
tensor z1 f32[16,32] activation
tensor a1 f32[16,32] activation
tensor y2 f32[16,32] activation
tensor z2 f32[16,32] activation
tensor a2 f32[16,32] activation
tensor r f32[16,32] activation
tensor t f32[16,32] activation
tensor s f32[16,32] activation
tensor q f32[16,32] activation
op mm1 MatMul (x, w1) -> (y1)
op add1 Add (y1, b1) -> (z1)
op relu1 Relu (z1) -> (a1)
op mm2 MatMul (a1, w2) -> (y2)
op add2 Add (y2, b2) -> (z2)
op relu2 Relu (z2) -> (a2)
op res Add (a2, a1) -> (r)
op tanh Tanh (r) -> (t)
op sig Sigmoid (r) -> (s)
op mul Mul (t, s) -> (q)
output q
)";

TEST(FusedSamplerTest, GroupsAreDistinctConvexImplementableAndDeterministic) {
  Graph g = Parse(kNet);
  FusedSamplerOptions o{.count = 50, .min_ops = 2, .max_ops = 6, .seed = 3};
  std::vector<std::vector<OpId>> groups = SampleFusedGroups(g, CpuFusionBackend(), o);
  ASSERT_GE(groups.size(), 5u);
  std::set<std::string> sigs;
  for (const std::vector<OpId>& grp : groups) {
    EXPECT_GE(grp.size(), 2u);
    EXPECT_LE(grp.size(), 6u);
    EXPECT_TRUE(std::is_sorted(grp.begin(), grp.end()));
    EXPECT_TRUE(IsConvex(g, grp));
    EXPECT_TRUE(CpuFusionBackend().CanImplement(g, grp).ok());
    EXPECT_TRUE(sigs.insert(FusedSignature(g, grp)).second) << "duplicate group";
  }
  EXPECT_EQ(SampleFusedGroups(g, CpuFusionBackend(), o), groups);
  o.seed = 4;
  EXPECT_NE(SampleFusedGroups(g, CpuFusionBackend(), o), groups);
}

TEST(FusedSamplerTest, ConvexityOfADiamond) {
  Graph g = Parse(kNet);
  auto id = [&](const std::string& name) {
    for (OpId o = 0; o < g.num_ops(); ++o) {
      if (g.op(o).name == name) return o;
    }
    return OpId{-1};
  };
  std::vector<OpId> split = {id("res"), id("mul")};  // tanh and sig lie between
  EXPECT_FALSE(IsConvex(g, split));
  std::vector<OpId> whole = {id("res"), id("tanh"), id("sig"), id("mul")};
  EXPECT_TRUE(IsConvex(g, whole));
  std::vector<OpId> skip = {id("relu1"), id("res")};  // the path through mm2..relu2
  EXPECT_FALSE(IsConvex(g, skip));
}

TEST(FusedSamplerTest, CommunicationAndEmptyGraphsGiveNothing) {
  Graph g = Parse("graph \"e\"\ntensor x f32[4] input\noutput x\n");
  EXPECT_TRUE(SampleFusedGroups(g, CpuFusionBackend(), {}).empty());
}

}  // namespace
}  // namespace braid::costmodel
