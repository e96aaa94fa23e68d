#include "client/planning.h"

#include <vector>

#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::client {
namespace {

// a -> b -> c: each reads what the one before wrote.
constexpr char kChain[] = R"(
graph "chain"
tensor x f32[4] input
tensor t0 f32[4] activation
tensor t1 f32[4] activation
tensor t2 f32[4] activation
op a Relu (x) -> (t0)
op b Tanh (t0) -> (t1)
op c Exp (t1) -> (t2)
output t2
)";

costmodel::SimGraph Tasks(const std::vector<std::vector<int32_t>>& ops) {
  costmodel::SimGraph sg;
  for (const std::vector<int32_t>& o : ops) {
    sg.tasks.push_back({.name = "t", .kind = costmodel::TaskKind::kCompute, .op_ids = o});
  }
  return sg;
}

TEST(ComputeOrderTest, FollowsTheSimulatedStartTimes) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  costmodel::SimGraph sg = Tasks({{0}, {1}, {2}});
  costmodel::SimResult r;
  r.start_s = {0, 1, 2};
  EXPECT_EQ(ComputeOrder(*g, sg, r), (std::vector<graph::OpId>{0, 1, 2}));
}

// Equal start times (zero-duration tasks) must not put a reader before the
// task that writes its input.
TEST(ComputeOrderTest, AReaderNeverPrecedesItsProducer) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  costmodel::SimGraph sg = Tasks({{2}, {1}, {0}});
  costmodel::SimResult r;
  r.start_s = {0, 0, 0};
  EXPECT_EQ(ComputeOrder(*g, sg, r), (std::vector<graph::OpId>{0, 1, 2}));
}

// A group {a (duplicated), b} recomputes a and so starts before a's home in
// the simulation; the executor runs a once, at home, so home comes first.
TEST(ComputeOrderTest, AGroupWaitsForTheHomeOfWhatItDuplicates) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kChain);
  ASSERT_TRUE(g.ok()) << g.status();
  search::Plan plan;
  plan.groups.push_back({.ops = {0, 1}, .duplicated = {0}});
  costmodel::SimGraph sg = Tasks({{0, 1}, {0}, {2}});
  costmodel::SimResult r;
  r.start_s = {0, 5, 9};
  EXPECT_EQ(ComputeOrder(*g, sg, r, &plan), (std::vector<graph::OpId>{0, 1, 2}));
}

}  // namespace
}  // namespace braid::client
