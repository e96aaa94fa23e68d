#include "worker/parallel_predict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "search/parallel_config.h"
#include "search/parallelize.h"
#include "search/pipeline_schedule.h"
#include "worker/parallel_test_util.h"

namespace braid::worker {
namespace {

using search::ParallelConfig;

using testing::Mlp;
using testing::Transformer;

costmodel::ClusterSpec Cpu2() { return *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2); }

int Count(const graph::Graph& g, std::string_view type) {
  int n = 0;
  for (const graph::Op& o : g.ops()) n += o.type == type;
  return n;
}

const graph::Op* FindOp(const graph::Graph& g, std::string_view name) {
  for (const graph::Op& o : g.ops())
    if (o.name.find(name) != std::string::npos) return &o;
  return nullptr;
}

constexpr auto kD = LayerParallel::kData;
constexpr auto kC = LayerParallel::kColumn;
constexpr auto kR = LayerParallel::kRow;

TEST(ParallelPredictTest, MlpForwardGraph) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(Mlp({kC, kR, kC, kR}, 1, 2));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Count(*g, "MatMul"), 4);
  EXPECT_EQ(Count(*g, "Add"), 4);
  EXPECT_EQ(Count(*g, "Relu"), 3);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->tensor(g->outputs()[0]).shape, (std::vector<int64_t>{16, 32}));
  const graph::Op& mm0 = g->ops()[0];
  EXPECT_EQ(mm0.type, "MatMul");
  EXPECT_EQ(g->tensor(mm0.inputs[0]).shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(g->tensor(mm0.inputs[1]).shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(g->tensor(mm0.inputs[1]).role, graph::TensorRole::kParameter);
}

TEST(ParallelPredictTest, TransformerForwardGraph) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(Transformer(1, 2));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Count(*g, "MatMul"), 2 * 8);  // q, k, v, scores, context, o, w1, w2
  EXPECT_EQ(Count(*g, "LayerNormalization"), 4);
  EXPECT_EQ(Count(*g, "Softmax"), 2);
  EXPECT_EQ(Count(*g, "Relu"), 2);
  EXPECT_EQ(g->tensor(g->outputs()[0]).shape, (std::vector<int64_t>{4, 8, 32}));
  // Attention scores [B, H, S, S].
  const graph::Op* sm = FindOp(*g, "block0.softmax");
  ASSERT_NE(sm, nullptr);
  EXPECT_EQ(g->tensor(sm->outputs[0]).shape, (std::vector<int64_t>{4, 4, 8, 8}));
}

// A pipeline has one graph per stage (PredictParallelTraining builds them).
TEST(ParallelPredictTest, PipelineHasNoSingleForwardGraph) {
  ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 1, 1);
  s.ranks = 2;
  s.pipeline_stages = 2;
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
}

// The DP's plan under ForcedStrategy: exactly the configs the ranks run for
// every op the DP can express.
void ExpectForced(const ParallelTrainSpec& s, std::map<std::string, ParallelConfig> want) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<search::ParallelizeOptions> o = ForcedStrategy(s, *g);
  ASSERT_TRUE(o.ok()) << o.status();
  costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<search::ParallelizeResult> r = search::ParallelizeForward(*g, c, cm, *o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const auto& [name, cfg] : want) {
    const search::OpParallelization* op = nullptr;
    for (const search::OpParallelization& x : r->ops)
      if (x.name.find(name) != std::string::npos) op = &x;
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(search::ParallelConfigString(op->config), search::ParallelConfigString(cfg)) << name;
  }
  absl::StatusOr<std::map<graph::OpId, ParallelConfig>> ex = ExecutedConfigs(s, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  for (const search::OpParallelization& x : r->ops) {
    const ParallelConfig& e = ex->at(x.op);
    if (e.replica_degree == 1) EXPECT_EQ(x.config, e) << x.name;
  }
}

TEST(ParallelPredictTest, ForcedMegatronMlp) {
  const ParallelTrainSpec s = Mlp({kC, kR, kC, kR}, 1, 2);
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::map<graph::OpId, ParallelConfig>> ex = ExecutedConfigs(s, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<std::string> mm;
  for (const auto& [id, c] : *ex)
    if (g->op(id).type == "MatMul") mm.push_back(search::ConfigKindName(*g, id, c));
  EXPECT_EQ(mm, (std::vector<std::string>{"column", "row", "column", "row"}));
  ExpectForced(s, {});
  // The DP's own plan names the same kinds.
  absl::StatusOr<search::ParallelizeOptions> o = ForcedStrategy(s, *g);
  ASSERT_TRUE(o.ok());
  costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<search::ParallelizeResult> r = search::ParallelizeForward(*g, c, cm, *o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> dp;
  for (const search::OpParallelization& x : r->ops)
    if (g->op(x.op).type == "MatMul") dp.push_back(search::ConfigKindName(*g, x.op, x.config));
  EXPECT_EQ(dp, mm);
}

TEST(ParallelPredictTest, ForcedDataMlp) {
  const ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 2, 1);
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::map<graph::OpId, ParallelConfig>> ex = ExecutedConfigs(s, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  for (const auto& [id, c] : *ex) {
    EXPECT_EQ(c.output_degrees[0], 2) << g->op(id).name;
    EXPECT_EQ(c.TotalDegree(), 2);
  }
  ExpectForced(s, {});
}

TEST(ParallelPredictTest, ForcedMegatronTransformer) {
  const ParallelTrainSpec s = Transformer(1, 2);
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::map<graph::OpId, ParallelConfig>> ex = ExecutedConfigs(s, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<std::string> kinds;
  for (const auto& [id, c] : *ex) {
    const graph::Op& o = g->op(id);
    if (o.type == "MatMul" && o.name.rfind("block0.", 0) == 0)
      kinds.push_back(search::ConfigKindName(*g, id, c));
    if (o.type == "LayerNormalization") EXPECT_EQ(c.replica_degree, 2) << o.name;
    if (o.type == "Softmax") EXPECT_EQ(c.output_degrees, (std::vector<int>{1, 2, 1, 1}));
  }
  // q, k, v column; scores and context head-parallel; o row; w1 column; w2 row.
  EXPECT_EQ(kinds, (std::vector<std::string>{"column", "column", "column", "head", "head", "row",
                                             "column", "row"}));
  ExpectForced(s, {});
}

TEST(ParallelPredictTest, PlannedCollectivesMegatronMlp) {
  absl::StatusOr<std::vector<PlannedCollective>> c = PlannedCollectives(Mlp({kC, kR, kC, kR}, 1, 2));
  ASSERT_TRUE(c.ok()) << c.status();
  // Forward: the all-reduce after each row layer (g); backward: the input
  // gradient of the second column layer (f). The first layer's is not computed.
  ASSERT_EQ(c->size(), 3u);
  std::multiset<int64_t> bytes;
  for (const PlannedCollective& x : *c) {
    EXPECT_EQ(x.collective, costmodel::Collective::kAllReduce) << x.what;
    EXPECT_EQ(x.group_size, 2);
    bytes.insert(x.bytes);
  }
  // [16, 128] after layer 1 (forward and its gradient), [16, 32] after layer 3.
  EXPECT_EQ(bytes, (std::multiset<int64_t>{16 * 32 * 4, 16 * 128 * 4, 16 * 128 * 4}));
  absl::StatusOr<std::vector<PlannedCollective>> d = PlannedCollectives(Mlp({kD, kD, kD, kD}, 2, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ(d->at(0).what, "grad sync");
  EXPECT_EQ(d->at(0).bytes, 4 * (64 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 32 + 32));
}

// braid's MLP plan: column, row, row, row. The first two row layers
// reduce-scatter their partial outputs on features into the next row layer
// (bias Add and Relu split like a column layer's); the last all-reduces.
TEST(ParallelPredictTest, RowIntoRowIsReduceScattered) {
  const ParallelTrainSpec s = Mlp({kC, kR, kR, kR}, 1, 2);
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::map<graph::OpId, ParallelConfig>> ex = ExecutedConfigs(s, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::map<std::string, std::string> cfg;
  for (const auto& [id, c] : *ex) cfg[g->op(id).name] = search::ParallelConfigString(c);
  EXPECT_EQ(cfg, (std::map<std::string, std::string>{
                     {"matmul1", "out[1,2]"},      {"add1", "out[1,2]"},
                     {"relu1", "out[1,2]"},        {"matmul2", "out[1,1] red2"},
                     {"add2", "out[1,2]"},         {"relu2", "out[1,2]"},
                     {"matmul3", "out[1,1] red2"}, {"add3", "out[1,2]"},
                     {"relu3", "out[1,2]"},        {"matmul4", "out[1,1] red2"},
                     {"add4", "out[1,1] rep2"}}));
  ExpectForced(s, {});

  absl::StatusOr<std::vector<PlannedCollective>> c = PlannedCollectives(s);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> got;
  for (const PlannedCollective& x : *c) {
    EXPECT_EQ(x.group_size, 2) << x.what;
    got.push_back(
        absl::StrCat(x.what, " ", std::string(costmodel::CollectiveName(x.collective)), " ", x.bytes));
  }
  std::sort(got.begin(), got.end());
  // Forward: a reduce-scatter of [16, 128] after layers 1 and 2, the
  // all-reduce of [16, 32] after layer 3; backward: the reduce-scatters'
  // adjoint all-gathers of the output gradients. No f: layer 0's input
  // gradient is not computed and the row layers' input gradients stay split.
  EXPECT_EQ(got, (std::vector<std::string>{"bwd matmul2 AllGather 8192",
                                           "bwd matmul3 AllGather 8192",
                                           "fwd matmul2 ReduceScatter 8192",
                                           "fwd matmul3 ReduceScatter 8192",
                                           "fwd matmul4 AllReduce 2048"}));

  // With loss_rows_split the last bias Add is split by rows (braid's
  // out[2,1]): a reduce-scatter by rows instead of the all-reduce, its
  // adjoint all-gather, and the bias gradient's all-reduce.
  ParallelTrainSpec r = s;
  r.loss_rows_split = true;
  ex = ExecutedConfigs(r, *g);
  ASSERT_TRUE(ex.ok()) << ex.status();
  for (const auto& [id, c] : *ex) {
    if (g->op(id).name == "add4") EXPECT_EQ(search::ParallelConfigString(c), "out[2,1]");
  }
  ExpectForced(r, {{"add4", ParallelConfig{.output_degrees = {2, 1}}}});
  c = PlannedCollectives(r);
  ASSERT_TRUE(c.ok()) << c.status();
  got.clear();
  for (const PlannedCollective& x : *c) {
    got.push_back(
        absl::StrCat(x.what, " ", std::string(costmodel::CollectiveName(x.collective)), " ", x.bytes));
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"bwd l3.bias AllReduce 128",
                                           "bwd matmul2 AllGather 8192",
                                           "bwd matmul3 AllGather 8192",
                                           "bwd matmul4 AllGather 2048",
                                           "fwd matmul2 ReduceScatter 8192",
                                           "fwd matmul3 ReduceScatter 8192",
                                           "fwd matmul4 ReduceScatter 2048"}));
}

// A pipeline stage starting with the ReLU of the previous stage's last
// Linear: that ReLU is the stage's first op (priced and profiled there), and
// the previous stage ends with the bias Add.
TEST(ParallelPredictTest, StageStartingWithRelu) {
  ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 1, 1);
  s.ranks = 2;
  s.pipeline_stages = 2;
  s.micro_batches = 2;
  s.stage_begin = {0, 2};
  s.stage_relu_first = {false, true};
  absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, "cpu-test");
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::vector<std::string> ops;
  for (const ExecutedKey& k : *keys)
    if (k.part == "forward") ops.push_back(k.key.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "Add", "Relu", "MatMul", "Add",  // stage 0
                                           "Relu", "MatMul", "Add", "Relu", "MatMul", "Add"}));
  // A single-stage spec with stage_relu_first {true} is that stage's model.
  ParallelTrainSpec one = Mlp({kD, kD}, 1, 1);
  one.widths = {128, 128, 32};
  one.stage_relu_first = {true};
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(one);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::vector<graph::OpId>> order = g->TopologicalOrder();
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(g->op(order->front()).type, "Relu");
  EXPECT_EQ(g->num_ops(), 6);
}

TEST(ParallelPredictTest, PlannedCollectivesMegatronTransformer) {
  absl::StatusOr<std::vector<PlannedCollective>> c = PlannedCollectives(Transformer(1, 2));
  ASSERT_TRUE(c.ok()) << c.status();
  // Per block: g after Wo and W2, f at LN1's and LN2's outputs.
  ASSERT_EQ(c->size(), 8u);
  for (const PlannedCollective& x : *c) {
    EXPECT_EQ(x.collective, costmodel::Collective::kAllReduce) << x.what;
    EXPECT_EQ(x.bytes, 4 * 8 * 32 * 4) << x.what;
  }
}

TEST(ParallelPredictTest, PriorPredictionIsPositiveAndTagged) {
  const ParallelTrainSpec s = Mlp({kC, kR, kC, kR}, 1, 2);
  costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<ParallelPrediction> p = PredictParallelTraining(s, c, cm);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(p->step_s, 0);
  EXPECT_GT(p->compute.s, p->forward.s);
  EXPECT_EQ(p->compute.source(), "prior");
  EXPECT_EQ(p->comm.source(), "prior");
  EXPECT_GT(p->comm.s, 0);
  EXPECT_EQ(p->grad_sync.s, 0);
  EXPECT_GT(p->dp_time_s, 0);
}

class TempStore {
 public:
  TempStore() {
    path_ = absl::StrCat(std::filesystem::temp_directory_path().string(), "/parallel_predict_test_",
                         getpid(), ".db");
    std::filesystem::remove(path_);
    store_ = *costmodel::ProfileStore::Open(path_);
  }
  ~TempStore() {
    store_.reset();
    for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + ext);
  }
  costmodel::ProfileStore& operator*() { return *store_; }
  costmodel::ProfileStore* get() { return store_.get(); }

 private:
  std::string path_;
  std::unique_ptr<costmodel::ProfileStore> store_;
};

// With known profiles (every forward shard 1 ms, backward 3 ms, loss 0.5 ms,
// update 0.25 ms, rank noise 1e-5 s²/s) and an exact comm fit (T = 1 ns/B +
// 20 us), the prediction is the hand-computed sum plus the waiting for the
// slower of 2 ranks at each synchronizing collective: E[max of 2 standard
// normals] = 1/sqrt(pi), times sqrt(noise x compute x collectives).
void ExpectHandSum(const ParallelTrainSpec& s) {
  TempStore store;
  costmodel::ClusterSpec c = Cpu2();
  absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, c.device.kind);
  ASSERT_TRUE(keys.ok()) << keys.status();
  const std::map<std::string, double> value = {{"forward", 1e-3},
                                               {"backward", 3e-3},
                                               {"loss", 0.5e-3},
                                               {"update", 0.25e-3},
                                               {"noise", 1e-5}};
  int ops = 0;
  for (const ExecutedKey& k : *keys) {
    ASSERT_TRUE((*store).Put(k.key, {.median_s = value.at(k.part), .repetitions = 1}).ok());
    ops += k.part == "forward";
  }
  std::vector<costmodel::CommSample> cs;
  for (const char* coll : {"AllReduce", "ReduceScatter", "AllGather"}) {
    cs.push_back({coll, 2, 1 << 20, 1e-9 * (1 << 20) + 20e-6});
    cs.push_back({coll, 2, 4 << 20, 1e-9 * (4 << 20) + 20e-6});
  }
  costmodel::CommModel comm(c);
  ASSERT_TRUE(comm.Fit(cs).ok());
  costmodel::ClusterCostModel cm(c, store.get(), nullptr, comm);
  absl::StatusOr<ParallelPrediction> p = PredictParallelTraining(s, c, cm, {.store = store.get()});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::vector<PlannedCollective>> colls = PlannedCollectives(s);
  ASSERT_TRUE(colls.ok());
  double comm_s = 0;
  int syncs = 0;
  for (const PlannedCollective& x : *colls) {
    comm_s += 1e-9 * x.bytes + 20e-6;
    syncs += x.group_size > 1;
  }
  const double skew = std::sqrt(1e-5 * (ops * 4e-3 + 0.75e-3) * syncs / M_PI);
  EXPECT_NEAR(p->forward.s, ops * 1e-3, 1e-12);
  EXPECT_NEAR(p->compute.s, ops * 4e-3, 1e-12);
  EXPECT_NEAR(p->step.s, 0.75e-3, 1e-12);
  EXPECT_NEAR(p->comm.s + p->grad_sync.s, comm_s, 1e-12);
  EXPECT_GT(comm_s, 0);
  EXPECT_GT(syncs, 0);
  EXPECT_NEAR(p->skew.s, skew, 1e-9);  // Simpson's rule for E[max]: 1e-9 relative
  EXPECT_NEAR(p->step_s, ops * 4e-3 + 0.75e-3 + comm_s + p->skew.s, 1e-12);
  EXPECT_EQ(p->forward.source(), "measured");
  EXPECT_EQ(p->compute.source(), "measured");
  EXPECT_EQ(p->step.source(), "measured");
  for (const PredictedPart* part : {&p->comm, &p->grad_sync})
    if (part->s > 0) EXPECT_EQ(part->source(), "measured");
  EXPECT_TRUE(p->notes.empty()) << p->notes[0];
  EXPECT_EQ(p->replicated_ops > 0, s.model_degree > 1 && !s.loss_rows_split);
}

TEST(ParallelPredictTest, KnownProfilesGiveTheHandSumMlp) {
  ExpectHandSum(Mlp({kC, kR, kC, kR}, 1, 2));
  ExpectHandSum(Mlp({kD, kD, kD, kD}, 2, 1));
  // braid's plan: reduce-scatters into row layers, and into the loss by rows.
  ExpectHandSum(Mlp({kC, kR, kR, kR}, 1, 2));
  ParallelTrainSpec rows = Mlp({kC, kR, kR, kR}, 1, 2);
  rows.loss_rows_split = true;
  ExpectHandSum(rows);
}

// braid's MLP plan with scattering row layers and the last one's rows
// reduce-scattered into the loss.
ParallelTrainSpec RowsIntoLoss() {
  ParallelTrainSpec rows = Mlp({kC, kR, kR, kR}, 1, 2);
  rows.loss_rows_split = true;
  return rows;
}

// A 2-stage pipeline of Megatron halves on 4 ranks whose second stage starts
// with the ReLU of the first stage's last Linear.
ParallelTrainSpec PipelineReluFirst() {
  ParallelTrainSpec pipe = Mlp({kC, kC, kC, kR}, 1, 2);
  pipe.ranks = 4;
  pipe.pipeline_stages = 2;
  pipe.micro_batches = 2;
  pipe.stage_begin = {0, 2};
  pipe.stage_relu_first = {false, true};
  return pipe;
}

// ProfileExecutedOps times every key the prediction reads for the new
// modes: the split bias Adds, the stage's leading ReLU, the rows' loss.
TEST(ParallelPredictTest, ProfilesTheReduceScatterAndReluFirstPlans) {
  const ParallelTrainSpec rows = RowsIntoLoss();
  ParallelTrainSpec pipe = PipelineReluFirst();
  pipe.loss_rows_split = true;
  ParallelTrainSpec relu_only = pipe;
  relu_only.loss_rows_split = false;
  for (const ParallelTrainSpec& s : {rows, relu_only, pipe}) {
    TempStore store;
    costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), s.ranks);
    // Two samples per kernel: the least that gives the noise (a variance).
    ASSERT_TRUE(
        ProfileExecutedOps(s, c, *store, {.warmup = 0, .passes = 1, .repetitions = 2}).ok());
    absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, c.device.kind);
    ASSERT_TRUE(keys.ok()) << keys.status();
    for (const ExecutedKey& k : *keys) {
      EXPECT_TRUE((*store).Get(k.key).has_value()) << k.key.op_type << " " << k.key.signature;
    }
    costmodel::ClusterCostModel cm(c, store.get(), nullptr, costmodel::CommModel(c));
    absl::StatusOr<ParallelPrediction> p =
        PredictParallelTraining(s, c, cm, {.store = store.get()});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GT(p->step_s, 0);
    // (A pipeline with model_degree 2 prices part of its compute from priors
    // even when profiled, with or without the new modes: not checked here.)
    if (s.pipeline_stages == 1) EXPECT_EQ(p->compute.source(), "measured");
  }
}

TEST(ParallelPredictTest, KnownProfilesGiveTheHandSumTransformer) {
  ExpectHandSum(Transformer(1, 2));
}

}  // namespace
}  // namespace braid::worker

namespace braid::worker {
namespace {

// A 2-stage 1F1B pipeline of the MLP: each stage's micro-batch times from
// the known profiles, through search::SimulatePipeline, plus the slowest
// stage's per-step parts (the last stage's m losses, update, m-1 accumulates).
TEST(ParallelPredictTest, KnownProfilesGiveThePipelineSchedule) {
  ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 1, 1);
  s.ranks = 2;
  s.pipeline_stages = 2;
  s.micro_batches = 4;
  TempStore store;
  costmodel::ClusterSpec c = Cpu2();
  absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, c.device.kind);
  ASSERT_TRUE(keys.ok()) << keys.status();
  // A pipeline's stages wait on each other by send/recv in the schedule: no
  // skew term, whatever the noise.
  const std::map<std::string, double> value = {{"forward", 1e-3},   {"backward", 3e-3},
                                               {"loss", 0.5e-3},     {"update", 0.25e-3},
                                               {"accumulate", 0.1e-3}, {"noise", 1e-5}};
  int ops = 0, accumulates = 0;
  for (const ExecutedKey& k : *keys) {
    ASSERT_TRUE((*store).Put(k.key, {.median_s = value.at(k.part), .repetitions = 1}).ok());
    ops += k.part == "forward";
    accumulates += k.part == "accumulate";
  }
  // Stage 0: MatMul, Add, Relu x 2 (the ReLU after its last layer too);
  // stage 1: MatMul, Add, Relu, MatMul, Add.
  EXPECT_EQ(ops, 11);
  EXPECT_EQ(accumulates, 2);
  costmodel::ClusterCostModel cm(c, store.get(), nullptr, costmodel::CommModel(c));
  absl::StatusOr<ParallelPrediction> p = PredictParallelTraining(s, c, cm, {.store = store.get()});
  ASSERT_TRUE(p.ok()) << p.status();
  // [16 / 4 rows, 128] between the stages, priced as a 2-rank Broadcast.
  const double transfer = cm.CollectiveTime(costmodel::Collective::kBroadcast, 4 * 128 * 4, 2);
  absl::StatusOr<search::PipelineTiming> t = search::SimulatePipeline(
      {{.forward_s = 6e-3, .backward_s = 18e-3}, {.forward_s = 5e-3, .backward_s = 15e-3}}, 4,
      transfer);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(p->step_s, t->iteration_s + 4 * 0.5e-3 + 0.25e-3 + 3 * 0.1e-3, 1e-12);
  EXPECT_EQ(p->skew.s, 0);
  EXPECT_EQ(p->compute.source(), "measured");
  EXPECT_EQ(p->step.source(), "measured");
  EXPECT_EQ(p->comm.source(), "prior");  // the stage-to-stage transfers and bubble
}

}  // namespace
}  // namespace braid::worker

namespace braid::worker {
namespace {

// The ranks clock every op of the graph the prediction prices, under the
// names that graph gives them (worker/op_clock.h): for every mode of the MLP
// (Megatron, scattering row layers, rows into the loss, a pipeline whose
// second stage starts with a ReLU) and of the transformer (Megatron, data,
// a pipeline), InGraphOpTimes finds a clock for every key, and every time
// is positive.
TEST(ParallelPredictTest, RanksClockEveryOpThePredictionPrices) {
  const ParallelTrainSpec rows = RowsIntoLoss();
  const ParallelTrainSpec pipe = PipelineReluFirst();
  ParallelTrainSpec tf_pipe = Transformer(1, 1);
  tf_pipe.ranks = 2;
  tf_pipe.pipeline_stages = 2;
  tf_pipe.micro_batches = 2;
  for (ParallelTrainSpec s : {Mlp({kC, kR, kC, kR}, 1, 2), Mlp({kD, kD, kD, kD}, 2, 1), rows, pipe,
                              Transformer(1, 2), Transformer(2, 1), tf_pipe}) {
    s.steps = 2;
    ParallelTrainOptions o;
    o.rank_binary = BRAID_PARALLEL_RANK_BINARY;
    o.op_clocks = true;
    absl::StatusOr<ParallelTrainResult> r = RunParallelTraining(s, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->op_clocks.size(), 2u);
    ASSERT_EQ(r->rank_clocked.size(), 2u);
    for (const auto& step : r->rank_clocked) {
      ASSERT_EQ(step.size(), static_cast<size_t>(s.ranks));
      for (const auto& rank : step) EXPECT_GT(rank.compute_s, 0);
    }
    absl::StatusOr<InGraphTimes> t = InGraphOpTimes(s, r->op_clocks, Cpu2().device.kind);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->unclocked.empty()) << t->unclocked.size() << " unclocked, first "
                                      << t->unclocked[0];
    absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, Cpu2().device.kind);
    ASSERT_TRUE(keys.ok());
    std::set<std::tuple<std::string, std::string>> distinct;
    for (const ExecutedKey& k : *keys) {
      if (k.part != "noise") distinct.insert({k.key.op_type, k.key.signature});
    }
    EXPECT_EQ(t->samples.size(), distinct.size());
    for (const auto& [key, sample] : t->samples) EXPECT_GT(sample.median_s, 0) << key.op_type;
    EXPECT_GT(t->clocked_s, 0);
  }
  // Nothing clocked: an error naming the option.
  EXPECT_THAT(std::string(InGraphOpTimes(rows, {}, "cpu").status().message()),
              ::testing::HasSubstr("op_clocks"));
}

// The prediction reads in-graph times through an overlay: its samples win,
// everything else (other ops, the collectives) comes from the base store.
TEST(ParallelPredictTest, InGraphTimesOverlayTheProfiledStore) {
  const ParallelTrainSpec s = Mlp({kC, kR, kC, kR}, 1, 2);
  TempStore store;
  costmodel::ClusterSpec c = Cpu2();
  absl::StatusOr<std::vector<ExecutedKey>> keys = ExecutedProfileKeys(s, c.device.kind);
  ASSERT_TRUE(keys.ok());
  for (const ExecutedKey& k : *keys)
    ASSERT_TRUE((*store).Put(k.key, {.median_s = 1e-3, .repetitions = 1}).ok());
  costmodel::OverlayProfileStore overlay(*store);
  const costmodel::ProfileKey first = (*keys)[0].key;
  ASSERT_TRUE(overlay.Put(first, {.median_s = 5e-3, .repetitions = 1}).ok());
  EXPECT_EQ(overlay.Get(first)->median_s, 5e-3);
  EXPECT_EQ((*store).Get(first)->median_s, 1e-3);  // the base is untouched
  EXPECT_EQ(overlay.Get((*keys)[1].key)->median_s, 1e-3);
  EXPECT_EQ(overlay.PutComm("k", {"AllReduce", 2, 1024, 1e-3}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(overlay.Put({"", "X", ""}, {.median_s = 1, .repetitions = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  costmodel::ClusterCostModel base_cm(c, store.get(), nullptr, costmodel::CommModel(c));
  costmodel::ClusterCostModel over_cm(c, &overlay, nullptr, costmodel::CommModel(c));
  absl::StatusOr<ParallelPrediction> a = PredictParallelTraining(s, c, base_cm, {.store = store.get()});
  absl::StatusOr<ParallelPrediction> b = PredictParallelTraining(s, c, over_cm, {.store = &overlay});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(b->compute.s, a->compute.s);  // the first key's 5 ms replaced its 1 ms
}

}  // namespace
}  // namespace braid::worker
