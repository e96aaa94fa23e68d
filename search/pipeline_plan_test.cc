#include "search/pipeline_plan.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::TensorId;

Graph Mlp(int layers, int64_t width, int64_t batch) {
  GraphBuilder b("mlp");
  TensorId x = b.Input("x", {batch, width});
  for (int i = 0; i < layers; ++i) {
    x = b.MatMul(x, b.Param(absl::StrCat("w", i), {width, width}));
    if (i + 1 < layers) x = b.Relu(x);
  }
  b.MarkOutput(x);
  return *std::move(b).Build();
}

TEST(PipelineCutPointsTest, ChainCutsEverywhereResidualOnlyAroundIt) {
  // A chain: every boundary sends one tensor.
  const Graph chain = Mlp(3, 64, 8);  // matmul relu matmul relu matmul
  auto cuts = PipelineCutPoints(chain);
  ASSERT_TRUE(cuts.ok()) << cuts.status();
  EXPECT_EQ(*cuts, (std::vector<int>{1, 2, 3, 4}));
  // r = relu(x @ w0); h = relu(r @ w1); y = h + r; out = y @ w2. While r
  // waits for the Add, two activations cross: no cut inside the residual.
  GraphBuilder b("res");
  TensorId x = b.Input("x", {8, 64});
  TensorId r = b.Relu(b.MatMul(x, b.Param("w0", {64, 64})));   // ops 0, 1
  TensorId h = b.Relu(b.MatMul(r, b.Param("w1", {64, 64})));   // ops 2, 3
  TensorId y = b.Add(h, r);                                     // op 4
  b.MarkOutput(b.MatMul(y, b.Param("w2", {64, 64})));           // op 5
  const Graph res = *std::move(b).Build();
  auto rc = PipelineCutPoints(res);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, (std::vector<int>{1, 2, 5}));
}

TEST(PipelineCandidatesTest, TwoAndFourStagesOnEightGpus) {
  const Graph g = Mlp(8, 4096, 256);
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  PipelinePlanOptions o;
  o.stage.check_memory = false;
  auto r = PipelineCandidates(g, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  for (const PipelineCandidate& p : *r) {
    EXPECT_TRUE(p.status.ok()) << p.status;
    EXPECT_EQ(static_cast<int>(p.stage_begin.size()), p.stages);
    EXPECT_EQ(static_cast<int>(p.stage_plans.size()), p.stages);
    EXPECT_GT(p.time_s, 0);
    EXPECT_GE(p.time_s, p.timing.iteration_s);
    EXPECT_GT(p.micro_batches, 0);
    // Equal layers: equal stages (8 MatMuls and 7 Relus over S stages).
    const int ops = g.num_ops();
    for (int s = 1; s < p.stages; ++s) EXPECT_NEAR(p.stage_begin[s], s * ops / p.stages, 2);
    // Each stage is planned on degree / S devices.
    for (const ParallelizeResult& sp : p.stage_plans)
      for (const OpParallelization& op : sp.ops)
        EXPECT_EQ(op.data_degree * op.model_degree, 8 / p.stages) << op.name;
  }
  // More micro-batches shrink the bubble (same stages).
  PipelinePlanOptions one = o;
  one.stages = {2};
  one.micro_batches = {1};
  PipelinePlanOptions many = one;
  many.micro_batches = {8};
  auto a = PipelineCandidates(g, c, cm, one);
  auto b = PipelineCandidates(g, c, cm, many);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->at(0).timing.bubble_fraction, b->at(0).timing.bubble_fraction);
}

TEST(PipelineCandidatesTest, NoCutPointNoCandidate) {
  GraphBuilder b("one");
  TensorId x = b.Input("x", {8, 64});
  b.MarkOutput(b.MatMul(x, b.Param("w", {64, 64})));
  const Graph g = *std::move(b).Build();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 2);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto r = PipelineCandidates(g, c, cm, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
}

}  // namespace
}  // namespace braid::search
