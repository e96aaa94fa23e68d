#include "search/parallel_graph.h"

#include <algorithm>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "costmodel/simulator.h"
#include "graph/builder.h"
#include "graph/training.h"
#include "search/backtracking.h"
#include "search/lowering.h"
#include "search/plan.h"
#include "search/parallelize.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::OpKind;
using graph::TensorId;

costmodel::ClusterSpec OneDgx() { return *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8); }

// x[64,1024] -> MatMul w1[1024,4096] -> Relu -> MatMul w2[4096,1024]
Graph Mlp2() {
  GraphBuilder b("mlp2");
  TensorId x = b.Input("x", {64, 1024});
  TensorId w1 = b.Param("w1", {1024, 4096});
  TensorId h = b.Relu(b.MatMul(x, w1));
  TensorId w2 = b.Param("w2", {4096, 1024});
  b.MarkOutput(b.MatMul(h, w2));
  return *std::move(b).Build();
}

int Count(const Graph& g, OpKind k) {
  int n = 0;
  for (const graph::Op& op : g.ops()) n += op.kind == k;
  return n;
}

const graph::Tensor* Find(const Graph& g, const std::string& name) {
  for (const graph::Tensor& t : g.tensors())
    if (t.name == name) return &t;
  return nullptr;
}

// Forces every MatMul to `first` / `second` kind names at data degree d.
ParallelizeOptions Force(const std::string& first, const std::string& second, int d) {
  ParallelizeOptions o;
  o.check_memory = false;
  o.filter = [=](const Graph& g, graph::OpId op, const ParallelConfig& c) {
    if (c.output_degrees.empty() || c.output_degrees[0] != d) return false;
    if (g.op(op).kind != OpKind::kMatMul) return true;
    const std::string want = g.op(op).name == g.ops()[0].name ? first : second;
    return ConfigKindName(g, op, c) == want;
  };
  return o;
}

TEST(PerDeviceGraphTest, MegatronPairHasOneCollectiveEachWay) {
  const Graph fwd = Mlp2();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto r = ParallelizeForward(fwd, c, cm, Force("column", "row", 1));
  ASSERT_TRUE(r.ok()) << r.status();
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(pd->data_degree, 1);
  EXPECT_EQ(pd->model_degree, 8);
  // Each device holds its shard of both weights.
  ASSERT_NE(Find(pd->forward, "w1"), nullptr);
  EXPECT_EQ(Find(pd->forward, "w1")->shape, (std::vector<int64_t>{1024, 512}));
  EXPECT_EQ(Find(pd->forward, "w2")->shape, (std::vector<int64_t>{512, 1024}));
  // Column -> Relu -> row moves nothing; the row MatMul's partial sums are
  // reduced once (Megatron's g): the loss reads rows split over the 8
  // devices (LossInputLayout), so a ReduceScatter rather than an AllReduce.
  EXPECT_EQ(Count(pd->forward, OpKind::kReduceScatter), 1);
  EXPECT_EQ(Count(pd->forward, OpKind::kAllReduce), 0);
  EXPECT_EQ(pd->forward.tensor(pd->forward.outputs()[0]).shape, (std::vector<int64_t>{8, 1024}));
  EXPECT_EQ(pd->collectives, 1);
  EXPECT_GT(pd->forward_comm_s, 0);

  auto train = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(train.ok()) << train.status();
  // Backward: the ReduceScatter's adjoint, an AllGather of the output
  // gradient's rows at the same price; the gradient AllReduces (phase
  // communication) are over a data group of 1.
  int bwd_ag = 0;
  for (const graph::Op& op : train->ops()) {
    if (op.kind == OpKind::kAllGather && op.phase == graph::Phase::kBackward) {
      ++bwd_ag;
      EXPECT_DOUBLE_EQ(op.GetFloat("comm_time_s", -1), pd->forward_comm_s);
    }
    if (op.kind == OpKind::kAllReduce) {
      EXPECT_EQ(op.phase, graph::Phase::kCommunication) << op.name;
      EXPECT_EQ(op.GetInt("group_size", 0), 1) << op.name;
    }
  }
  EXPECT_EQ(bwd_ag, 1);

  // The simulator charges the priced collectives, and the fusion search runs
  // on the per-device training graph.
  DataGroupCostModel dcm(cm, c, pd->degree);
  auto sg = Lower(*train, NoFusionPlan(*train), dcm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  const costmodel::SimResult sim = costmodel::Simulate(*sg);
  EXPECT_GE(sim.comm_s, 2 * pd->forward_comm_s * (1 - 1e-9));
  SearchConfig cfg;
  cfg.time_budget_s = 5;
  cfg.threads = 1;
  cfg.seed_with_baselines = false;
  auto s = RunFusionSearch(*train, dcm, cfg);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_LE(s->sim.iteration_s, sim.iteration_s * (1 + 1e-9));
}

TEST(PerDeviceGraphTest, DataParallelSplitsTheBatchOnly) {
  const Graph fwd = Mlp2();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto r = ParallelizeForward(fwd, c, cm, Force("data", "data", 8));
  ASSERT_TRUE(r.ok()) << r.status();
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(pd->data_degree, 8);
  EXPECT_EQ(pd->collectives, 0);
  EXPECT_EQ(Find(pd->forward, "x")->shape, (std::vector<int64_t>{8, 1024}));
  EXPECT_EQ(Find(pd->forward, "w1")->shape, (std::vector<int64_t>{1024, 4096}));
  auto train = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(train.ok()) << train.status();
  for (const graph::Op& op : train->ops())
    if (op.kind == OpKind::kAllReduce) EXPECT_EQ(op.GetInt("group_size", 0), 8) << op.name;
}

TEST(PerDeviceGraphTest, ColumnOutputIsRedistributedForTheLoss) {
  // Both MatMuls column-parallel: the hidden activation is gathered before
  // the second (its input must be whole), and the output's columns become
  // rows for the loss: one AllToAll (Combine(1) Partition(0)).
  const Graph fwd = Mlp2();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto r = ParallelizeForward(fwd, c, cm, Force("column", "column", 1));
  ASSERT_TRUE(r.ok()) << r.status();
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(Count(pd->forward, OpKind::kAllGather), 1);
  EXPECT_EQ(Count(pd->forward, OpKind::kAllToAll), 1);
  const graph::Tensor& out = pd->forward.tensor(pd->forward.outputs()[0]);
  EXPECT_EQ(out.shape, (std::vector<int64_t>{8, 1024}));
  auto train = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(Count(*train, OpKind::kReduceScatter), 1);  // the AllGather's adjoint
  EXPECT_EQ(Count(*train, OpKind::kAllToAll), 2);       // and the AllToAll's
}

TEST(PerDeviceGraphTest, MixedDataDegreesReduceEachGradientOverItsOwnGroup) {
  // The first MatMul data parallel over 8, the second (and the Relu) over
  // 4 x model 2: w1's gradient is all-reduced over 8 ranks, w2's over 4.
  const Graph fwd = Mlp2();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelizeOptions o;
  o.check_memory = false;
  o.filter = [](const Graph& g, graph::OpId op, const ParallelConfig& cfg) {
    const int want = op == 0 ? 8 : 4;
    return !cfg.output_degrees.empty() && cfg.output_degrees[0] == want;
  };
  auto r = ParallelizeForward(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_TRUE(pd->mixed_data_degrees);
  EXPECT_EQ(pd->data_degree, 8);
  EXPECT_EQ(pd->grad_group.at("w1"), 8);
  EXPECT_EQ(pd->grad_group.at("w2"), 4);
  auto train = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(train.ok()) << train.status();
  std::map<std::string, int64_t> groups;
  for (const graph::Op& op : train->ops())
    if (op.phase == graph::Phase::kCommunication) groups[op.name] = op.GetInt("group_size", 0);
  EXPECT_EQ(groups.at("w1.grad.allreduce"), 8);
  EXPECT_EQ(groups.at("w2.grad.allreduce"), 4);
  // One bucket holding both: two collectives, each over its own group.
  DataGroupCostModel dcm(cm, c, pd->degree);
  Plan one = NoFusionPlan(*train);
  Bucket all;
  for (const Bucket& b : one.buckets) all.grads.insert(all.grads.end(), b.grads.begin(), b.grads.end());
  one.buckets = {all};
  auto sg = Lower(*train, one, dcm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  const int64_t b1 = 1024 * 4096 * 4, b2 = 4096 * 1024 * 4;
  const double want = dcm.CollectiveTime(costmodel::Collective::kAllReduce, b1, 8) +
                      dcm.CollectiveTime(costmodel::Collective::kAllReduce, b2 / 2, 4);
  double got = -1;
  for (const costmodel::SimTask& t : sg->tasks)
    if (t.kind == costmodel::TaskKind::kComm && t.name.find("bucket") != std::string::npos) got = t.duration_s;
  EXPECT_NEAR(got, want, want * 1e-9);
}

// Two input-fed Linear strands meeting at an Add, run side by side on two
// groups of 4 devices of a 16-device, two-node cluster, each strand data
// parallel over its group: a weight's gradient is all-reduced among its
// group's 4 devices (inside a node), not over a data group of 4 strided
// across both nodes, and the bucket is priced so.
TEST(PerDeviceGraphTest, StrandGradientsReduceAmongTheirGroupsDevices) {
  GraphBuilder b("strands");
  // Many rows, a small weight: data parallelism inside the group.
  TensorId y0 = b.Relu(b.Linear(b.Input("x0", {8192, 256}), 256));
  TensorId y1 = b.Relu(b.Linear(b.Input("x1", {8192, 256}), 256));
  b.MarkOutput(b.Add(y0, y1));
  const Graph fwd = *std::move(b).Build();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 16);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelizeOptions o;
  o.check_memory = false;
  o.strand_devices = {4};
  // The strands' ops on all 16 devices are filtered out (the filter is over
  // all the devices; side by side it does not apply): the DP has to place
  // the strands side by side.
  o.filter = [](const Graph& g, graph::OpId op, const ParallelConfig&) {
    return g.op(op).kind == graph::OpKind::kAdd;
  };
  auto r = ParallelizeForward(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->strand_blocks.size(), 1u);
  ASSERT_EQ(r->strand_blocks[0].devices_per_strand, 4);
  // The strands' ops data parallel in their group (set here: the DP splits
  // the weights, which needs no gradient sync at all).
  for (OpParallelization& op : r->ops) {
    if (op.num_devices == 0) continue;
    auto cands = CandidateConfigs(fwd, op.op, 4);
    ASSERT_TRUE(cands.ok()) << cands.status();
    auto dp = std::find_if(cands->begin(), cands->end(), [](const ParallelConfig& cfg) {
      return cfg.output_degrees[0] == 4 && cfg.TotalDegree() == 4;
    });
    ASSERT_NE(dp, cands->end()) << op.name;
    op.config = *dp;
    op.data_degree = 4;
    op.model_degree = 1;
    auto l = ConfigLayouts(fwd, op.op, op.config);
    ASSERT_TRUE(l.ok()) << l.status();
    op.layouts = *l;
  }
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(pd->degree, 16);
  // The busiest device runs one strand: one Gemm, one weight.
  int gemms = 0;
  std::string weight;
  for (const graph::Op& op : pd->forward.ops()) {
    if (op.kind != graph::OpKind::kGemm) continue;
    ++gemms;
    weight = pd->forward.tensor(op.inputs[1]).name;
  }
  ASSERT_EQ(gemms, 1);
  EXPECT_EQ(pd->grad_devices.at(weight), 4);
  auto train = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(train.ok()) << train.status();
  int reduced = 0;
  for (const graph::Op& op : train->ops()) {
    if (op.phase != graph::Phase::kCommunication) continue;
    ++reduced;
    EXPECT_EQ(op.GetInt("group_size", 0), 4) << op.name;
    EXPECT_EQ(op.GetInt("group_devices", 0), 4) << op.name;
  }
  EXPECT_EQ(reduced, 2);  // the weight and the bias
  DataGroupCostModel dcm(cm, c, pd->degree);
  // The bucket holding both gradients: one AllReduce among the group's 4.
  Plan one = NoFusionPlan(*train);
  Bucket all;
  for (const Bucket& bk : one.buckets) all.grads.insert(all.grads.end(), bk.grads.begin(), bk.grads.end());
  one.buckets = {all};
  auto sg = Lower(*train, one, dcm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  const double bucket_want = dcm.CollectiveTimeOnDevices(costmodel::Collective::kAllReduce,
                                                         (256 * 256 + 256) * 4, 4, 4);
  double bucket_got = -1;
  for (const costmodel::SimTask& t : sg->tasks)
    if (t.kind == costmodel::TaskKind::kComm && t.name.find("bucket") != std::string::npos)
      bucket_got = t.duration_s;
  EXPECT_NEAR(bucket_got, bucket_want, bucket_want * 1e-9);
  const int64_t bytes = 64 << 20;
  for (int g : {2, 4}) {
    SCOPED_TRACE(g);
    const double inside =
        dcm.CollectiveTimeOnDevices(costmodel::Collective::kAllReduce, bytes, g, 4);
    auto want = ViewCollectiveTime(c, g, 4 / g, 0, costmodel::Collective::kAllReduce, bytes, g);
    ASSERT_TRUE(want.ok());
    EXPECT_NEAR(inside, *want, *want * 1e-12);
    // Over all 16 devices a data group of g is strided across the nodes.
    EXPECT_LT(inside, dcm.CollectiveTime(costmodel::Collective::kAllReduce, bytes, g) / 2);
  }
}

// GPT-2's fused QKV: x[8,16,64] @ w[64,192] -> Split(axis 2) into q, k, v,
// read by two Adds. With the MatMul column-parallel the Split is segmented:
// each device splits its 24 columns into its 8 of q, k and v, and every
// consumer reads its output's piece without a collective.
Graph FusedQkv() {
  GraphBuilder b("qkv");
  TensorId x = b.Input("x", {8, 16, 64});
  TensorId h = b.MatMul(x, b.Param("w", {64, 192}));
  std::vector<TensorId> qkv = b.Custom("split", "Split", {h}, {{8, 16, 64}, {8, 16, 64}, {8, 16, 64}},
                                       {{"axis", int64_t{2}}, {"split", std::vector<int64_t>{64, 64, 64}}});
  b.MarkOutput(b.Add(b.Add(qkv[0], qkv[1]), qkv[2]));
  return *std::move(b).Build();
}

TEST(PerDeviceGraphTest, SegmentedSplitFeedsEachConsumerItsOutput) {
  const Graph fwd = FusedQkv();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto r = ParallelizeForward(fwd, c, cm, Force("column", "column", 1));
  ASSERT_TRUE(r.ok()) << r.status();
  const OpParallelization* split = nullptr;
  for (const OpParallelization& o : r->ops)
    if (fwd.op(o.op).kind == OpKind::kSplit) split = &o;
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(ConfigKindName(fwd, split->op, split->config), "segmented");
  ASSERT_EQ(split->layouts.outputs.size(), 3u);
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  const graph::Op* sp = nullptr;
  for (const graph::Op& op : pd->forward.ops())
    if (op.kind == OpKind::kSplit) sp = &op;
  ASSERT_NE(sp, nullptr);
  ASSERT_EQ(sp->outputs.size(), 3u);
  EXPECT_EQ(sp->GetInts("split"), (std::vector<int64_t>{8, 8, 8}));
  for (TensorId t : sp->outputs)
    EXPECT_EQ(pd->forward.tensor(t).shape, (std::vector<int64_t>{8, 16, 8}));
  // The Adds read outputs 0, 1 (the first) and 2 (the second).
  std::vector<TensorId> read;
  for (const graph::Op& op : pd->forward.ops())
    if (op.kind == OpKind::kAdd)
      for (TensorId t : op.inputs)
        if (pd->forward.tensor(t).producer != graph::kNoId &&
            pd->forward.op(pd->forward.tensor(t).producer).kind == OpKind::kSplit)
          read.push_back(t);
  EXPECT_EQ(read, sp->outputs);
  // Only the loss's rows move: nothing between the MatMul, the Split and
  // the Adds.
  EXPECT_EQ(pd->collectives, 1);
}

// An LSTM (X [seq, batch, in]: dim 0 is the recurrence) runs whole on every
// device with its three outputs; its weights' gradients are reduced over
// every device.
TEST(PerDeviceGraphTest, ReplicatedLstmKeepsEveryOutputWhole) {
  GraphBuilder b("lstm");
  TensorId x = b.Input("x", {16, 8, 32});
  std::vector<TensorId> outs =
      b.Custom("lstm", "LSTM", {x, b.Param("w", {1, 256, 32}), b.Param("r", {1, 256, 64})},
               {{16, 1, 8, 64}, {1, 8, 64}, {1, 8, 64}}, {{"hidden_size", int64_t{64}}});
  b.MarkOutput(b.Relu(outs[0]));
  const Graph fwd = *std::move(b).Build();
  const costmodel::ClusterSpec c = OneDgx();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelizeOptions o;
  o.check_memory = false;
  auto r = ParallelizeForward(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto pd = BuildPerDeviceForward(fwd, c, *r);
  ASSERT_TRUE(pd.ok()) << pd.status();
  const graph::Op* lstm = nullptr;
  for (const graph::Op& op : pd->forward.ops())
    if (op.kind == OpKind::kLSTM) lstm = &op;
  ASSERT_NE(lstm, nullptr);
  ASSERT_EQ(lstm->outputs.size(), 3u);
  EXPECT_EQ(pd->forward.tensor(lstm->outputs[0]).shape, (std::vector<int64_t>{16, 1, 8, 64}));
  EXPECT_EQ(pd->forward.tensor(lstm->outputs[2]).shape, (std::vector<int64_t>{1, 8, 64}));
  EXPECT_EQ(pd->forward.tensor(lstm->inputs[0]).shape, (std::vector<int64_t>{16, 8, 32}));
  EXPECT_EQ(pd->grad_group.at("w"), 8);
  EXPECT_EQ(pd->grad_group.at("r"), 8);
}

}  // namespace
}  // namespace braid::search
