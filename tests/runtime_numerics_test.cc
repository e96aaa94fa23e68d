// Programs lowered from plan rows (search/program_lowering.h) trained by
// braid-rank processes on Gloo over loopback, against the world-1 program of
// the same model: per-step losses and final parameters must agree.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "gmock/gmock.h"
#include "graph/builder.h"
#include "graph/program.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "search/parallel_strategies.h"
#include "search/program_lowering.h"
#include "search/program_sim.h"
#include "worker/program_ranks.h"
#include "worker/runtime/checkpoint.h"

namespace braid {
namespace {

using graph::DType;
using graph::Graph;
using graph::GraphBuilder;
using graph::TensorId;

Graph Mlp() {
  GraphBuilder b("mlp");
  TensorId x = b.Input("x", {8, 32});
  x = b.Relu(b.Linear(x, 64));
  x = b.Relu(b.Linear(x, 64));
  b.MarkOutput(b.Linear(x, 16));
  return *std::move(b).Build();
}

// One pre-LN transformer layer with attention spelled as exporters do,
// training-mode dropout on the attention probabilities.
Graph Transformer() {
  const int64_t batch = 8, seq = 8, hidden = 32, heads = 4, dh = hidden / heads;
  GraphBuilder b("layer");
  TensorId x = b.Input("x", {batch, seq, hidden});
  TensorId h = b.LayerNorm(x);
  auto split = [&](TensorId t, std::vector<int64_t> perm) {
    return b.Transpose(b.Reshape(t, {batch, seq, heads, dh}), std::move(perm));
  };
  TensorId q = split(b.Linear(h, hidden), {0, 2, 1, 3});
  TensorId k = split(b.Linear(h, hidden), {0, 2, 3, 1});
  TensorId v = split(b.Linear(h, hidden), {0, 2, 1, 3});
  // Attention dropout: its mask is keyed by each element's index in the full
  // tensor, so every split drops what the world-1 run drops.
  TensorId p = b.Dropout(b.Softmax(b.MatMul(q, k), -1), 0.1);
  TensorId o = b.Reshape(b.Transpose(b.MatMul(p, v), {0, 2, 1, 3}), {batch, seq, hidden});
  x = b.Add(x, b.Linear(o, hidden));
  x = b.Add(x, b.Linear(b.Gelu(b.Linear(b.LayerNorm(x), 4 * hidden)), hidden));
  b.MarkOutput(x);
  return *std::move(b).Build();
}

absl::StatusOr<worker::ProgramRun> Train(const graph::Program& p, int steps) {
  return worker::TrainProgramOnRanks(
      p, {.steps = steps, .rank_binary = BRAID_RANK_BINARY, .timeout_s = 600,
          .what = "runtime numerics test"});
}

double RelErr(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

costmodel::ClusterSpec CpuLocal(int ranks) {
  return *costmodel::WithRanks(*costmodel::LoadCluster("cpu-local"), ranks);
}

// The program of strategy row `row` of `g` on cpu-local at `ranks`.
absl::StatusOr<graph::Program> LowerRow(const Graph& g, int ranks, const std::string& row,
                                        search::LoweringOptions options = {}) {
  const costmodel::ClusterSpec c = CpuLocal(ranks);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ASSIGN_OR_RETURN(std::vector<search::StrategyRow> rows, search::ParallelStrategyTable(g, c, cm, {}));
  for (const search::StrategyRow& r : rows) {
    if (r.name != row || !r.has_plan) continue;
    options.row = r.name;
    return search::LowerProgram(g, r.result.ops, options);
  }
  return absl::NotFoundError(absl::StrCat("no ", row, " row"));
}

// Every row of the strategy table with a plan, lowered and trained at
// `ranks`, matches the world-1 run.
void CheckRows(const Graph& g, int ranks, const std::vector<std::string>& must_have,
               bool sync_batch_norm = false) {
  const costmodel::ClusterSpec c = CpuLocal(ranks);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  search::StrategyTableOptions o;
  o.base.parallel_strands = false;
  absl::StatusOr<std::vector<search::StrategyRow>> rows = search::ParallelStrategyTable(g, c, cm, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<graph::Program> ref_prog = search::LowerWorldOne(g, {});
  ASSERT_TRUE(ref_prog.ok()) << ref_prog.status();
  constexpr int kSteps = 3;
  absl::StatusOr<worker::ProgramRun> ref = Train(*ref_prog, kSteps);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->losses.size(), kSteps);
  // Training moves the loss: the check compares something that changes.
  EXPECT_NE(ref->losses.front(), ref->losses.back());
  std::set<std::string> seen;
  for (const search::StrategyRow& row : *rows) {
    if (!row.has_plan) continue;
    SCOPED_TRACE(absl::StrCat(g.name(), " row ", row.name, " at ", ranks, " ranks"));
    absl::StatusOr<graph::Program> prog = search::LowerProgram(
        g, row.result.ops, {.row = row.name, .sync_batch_norm = sync_batch_norm});
    ASSERT_TRUE(prog.ok()) << prog.status();
    EXPECT_EQ(prog->World(), ranks);
    EXPECT_EQ(prog->model_fingerprint, ref_prog->model_fingerprint);
    absl::StatusOr<worker::ProgramRun> got = Train(*prog, kSteps);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_LE(RelErr(got->losses[s], ref->losses[s]), 1e-4)
          << "step " << s << ": " << got->losses[s] << " vs " << ref->losses[s];
    }
    const std::set<std::string> params = runtime::ParameterNames(*ref_prog);
    runtime::CheckpointDiff d = runtime::CompareCheckpoints(got->checkpoint, ref->checkpoint, &params);
    EXPECT_THAT(d.mismatched, ::testing::IsEmpty());
    EXPECT_LE(d.max_rel_error, 1e-4) << "worst tensor " << d.worst;
    if (d.max_rel_error > 1e-4) {
      for (const auto& [name, r] : ref->checkpoint.tensors) {
        if (!params.contains(name)) continue;
        runtime::Checkpoint one, mine;
        one.tensors[name] = r;
        mine.tensors[name] = got->checkpoint.tensors[name];
        const double e = runtime::CompareCheckpoints(mine, one).max_rel_error;
        if (e > 1e-4) ADD_FAILURE() << "  " << name << ": " << e;
      }
    }
    seen.insert(row.name);
  }
  for (const std::string& r : must_have) EXPECT_TRUE(seen.contains(r)) << "row " << r << " missing";
}

TEST(RuntimeNumericsTest, MlpRowsMatchWorldOneAtTwoRanks) {
  CheckRows(Mlp(), 2, {"data_parallel", "braid"});
}

TEST(RuntimeNumericsTest, TransformerRowsMatchWorldOneAtTwoRanks) {
  CheckRows(Transformer(), 2, {"data_parallel", "expert:megatron", "braid"});
}

// Time mode: braid-rank clocks every op of the steps after the warm-up on
// every rank, and clocking changes nothing the step computes.
TEST(RuntimeNumericsTest, TimeModeClocksEveryOpOnEveryRank) {
  absl::StatusOr<graph::Program> prog = LowerRow(Mlp(), 2, "data_parallel");
  ASSERT_TRUE(prog.ok()) << prog.status();
  absl::StatusOr<worker::ProgramRun> plain = Train(*prog, 3);
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<worker::ProgramRun> timed = worker::TrainProgramOnRanks(
      *prog, {.steps = 3, .clock_ops = true, .warmup = 1, .rank_binary = BRAID_RANK_BINARY,
              .timeout_s = 600, .what = "runtime numerics test"});
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_EQ(timed->losses, plain->losses);
  ASSERT_EQ(timed->op_clocks.size(), 2u);
  for (const std::vector<worker::ProgramOpClock>& rank : timed->op_clocks) {
    ASSERT_EQ(rank.size(), static_cast<size_t>(prog->graph.num_ops()));
    int allreduces = 0;
    double matmul_s = 0;
    for (const worker::ProgramOpClock& op : rank) {
      EXPECT_GE(op.min_s, 0) << op.op;
      EXPECT_LE(op.min_s, op.median_s) << op.op;
      if (op.type == "AllReduce") ++allreduces;
      if (op.type == "MatMul" || op.type == "Gemm") matmul_s += op.median_s;
    }
    EXPECT_GT(allreduces, 0);  // the gradient reductions are clocked too
    EXPECT_GT(matmul_s, 0);
  }
  // Nothing left to clock after the warm-up is refused.
  absl::StatusOr<worker::ProgramRun> none = worker::TrainProgramOnRanks(
      *prog, {.steps = 1, .clock_ops = true, .warmup = 1, .rank_binary = BRAID_RANK_BINARY,
              .timeout_s = 600, .what = "runtime numerics test"});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), ::testing::HasSubstr("nothing to clock"));
}

// The plan's gradient buckets run as one AllReduce each: the same training,
// fewer collectives.
TEST(RuntimeNumericsTest, GradientBucketsRunAsOneAllReduceEach) {
  const Graph g = Mlp();
  absl::StatusOr<graph::Program> plain = LowerRow(g, 2, "data_parallel");
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Two buckets: the last two gradients produced, then all the others.
  std::vector<std::string> grads;
  for (const graph::Op& op : plain->graph.ops())
    if (op.type == "AllReduce" && !op.GetInts("mesh_axes").empty())
      grads.push_back(plain->graph.tensor(op.inputs[0]).name);
  ASSERT_GE(grads.size(), 4u);
  std::vector<std::vector<std::string>> buckets = {{grads[0], grads[1]}, {}};
  buckets[1].assign(grads.begin() + 2, grads.end());
  absl::StatusOr<graph::Program> bucketed =
      LowerRow(g, 2, "data_parallel", {.gradient_buckets = buckets});
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  ASSERT_EQ(bucketed->buckets.size(), 2u);
  EXPECT_EQ(bucketed->buckets[1].size(), grads.size() - 2);
  EXPECT_NE(bucketed->program_fingerprint, plain->program_fingerprint);
  absl::StatusOr<worker::ProgramRun> a = Train(*plain, 3);
  absl::StatusOr<worker::ProgramRun> b = Train(*bucketed, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int s = 0; s < 3; ++s) {
    EXPECT_LE(RelErr(b->losses[s], a->losses[s]), 1e-6) << "step " << s;
    EXPECT_EQ(b->collectives[s], a->collectives[s] - static_cast<int>(grads.size()) + 2) << "step " << s;
  }
  runtime::CheckpointDiff d = runtime::CompareCheckpoints(b->checkpoint, a->checkpoint);
  EXPECT_TRUE(d.mismatched.empty());
  EXPECT_LE(d.max_rel_error, 1e-6) << d.worst;
  // Buckets that name no AllReduce, or one twice, are refused; and the
  // program file keeps them.
  graph::Program bad = *bucketed;
  bad.buckets[0].push_back("no such op");
  EXPECT_THAT(std::string(graph::ValidateProgram(bad).message()), ::testing::HasSubstr("names no op"));
  bad = *bucketed;
  bad.buckets[0].push_back(bad.buckets[1][0]);
  EXPECT_THAT(std::string(graph::ValidateProgram(bad).message()), ::testing::HasSubstr("two buckets"));
  bad = *bucketed;
  bad.buckets[0].push_back(bad.graph.op(0).name);
  EXPECT_THAT(std::string(graph::ValidateProgram(bad).message()), ::testing::HasSubstr("not an AllReduce"));
  absl::StatusOr<graph::Program> back = graph::ProgramFromJson(graph::ProgramToJson(*bucketed));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->buckets, bucketed->buckets);
}

// Fusion groups run as one fused kernel of the CPU executor (oneDNN
// Gemm + post-ops) and train as the ops one by one do.
TEST(RuntimeNumericsTest, FusionGroupsRunAsFusedKernels) {
  const Graph g = Mlp();
  absl::StatusOr<graph::Program> plain = LowerRow(g, 2, "data_parallel");
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Every Gemm -> Relu pair of the forward pass (the builder's Linear is a
  // Gemm with its bias).
  std::vector<std::vector<std::string>> groups;
  const Graph& pg = plain->graph;
  auto only_reader = [&](graph::TensorId t, std::string_view type) -> const graph::Op* {
    const graph::Tensor& x = pg.tensor(t);
    if (x.consumers.size() != 1 || pg.op(x.consumers[0]).type != type) return nullptr;
    return &pg.op(x.consumers[0]);
  };
  for (const graph::Op& op : pg.ops()) {
    if (op.type != "Gemm" || op.phase != graph::Phase::kForward) continue;
    if (const graph::Op* relu = only_reader(op.outputs[0], "Relu")) groups.push_back({op.name, relu->name});
  }
  ASSERT_FALSE(groups.empty());
  absl::StatusOr<graph::Program> fused = LowerRow(g, 2, "data_parallel", {.fusion_groups = groups});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->groups, groups);
  absl::StatusOr<worker::ProgramRun> a = Train(*plain, 3);
  absl::StatusOr<worker::ProgramRun> b = Train(*fused, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int s = 0; s < 3; ++s) {
    EXPECT_LE(RelErr(b->losses[s], a->losses[s]), 1e-5) << "step " << s;
    EXPECT_EQ(b->groups_fused[s], static_cast<int>(groups.size())) << "step " << s;
    EXPECT_EQ(b->groups_unfused[s], 0) << "step " << s;
  }
  EXPECT_TRUE(b->unfused_why.empty());
  runtime::CheckpointDiff d = runtime::CompareCheckpoints(b->checkpoint, a->checkpoint);
  EXPECT_LE(d.max_rel_error, 1e-5) << d.worst;
  // A group with a collective, or one that makes a cycle, is refused.
  graph::Program bad = *fused;
  for (const graph::Op& op : pg.ops())
    if (op.type == "AllReduce") bad.groups[0].push_back(op.name);
  EXPECT_THAT(std::string(graph::ValidateProgram(bad).message()), ::testing::HasSubstr("cannot be in a group"));
  bad = *fused;
  ASSERT_GE(groups.size(), 2u);
  bad.groups = {{groups[0][0], groups[1][1]}};  // the first Gemm and the second Relu
  EXPECT_THAT(std::string(graph::ValidateProgram(bad).message()), ::testing::HasSubstr("cycle"));
}

// A small CNN with training-mode BatchNorm: with synchronized statistics a
// data-parallel program matches the world-1 run (each shard's own
// statistics would not).
Graph Cnn() {
  GraphBuilder b("cnn");
  TensorId x = b.Input("x", {8, 3, 8, 8});
  x = b.Relu(b.BatchNorm(b.Conv(x, 8, 3, 1, 1)));
  x = b.Relu(b.BatchNorm(b.Conv(x, 8, 3, 1, 1)));
  b.MarkOutput(b.Linear(b.Flatten(b.GlobalAveragePool(x)), 10));
  Graph g = *std::move(b).Build();
  for (graph::OpId op = 0; op < g.num_ops(); ++op)
    if (g.op(op).kind == graph::OpKind::kBatchNormalization) g.mutable_op(op).attrs["training_mode"] = int64_t{1};
  return g;
}

TEST(RuntimeNumericsTest, SyncBatchNormMatchesWorldOneAtTwoRanks) {
  CheckRows(Cnn(), 2, {"data_parallel"}, /*sync_batch_norm=*/true);
}

// A GPT-2-style layer: one fused projection c_attn [D, 3D] split into q, k
// and v (nanoGPT's attention), causal mask, dropout.
Graph FusedQkv() {
  const int64_t batch = 8, seq = 8, hidden = 32, heads = 4, dh = hidden / heads;
  GraphBuilder b("fused_qkv");
  TensorId x = b.Input("x", {batch, seq, hidden});
  TensorId h = b.LayerNorm(x);
  std::vector<TensorId> qkv =
      b.Custom("split", "Split", {b.Linear(h, 3 * hidden)},
               {{batch, seq, hidden}, {batch, seq, hidden}, {batch, seq, hidden}},
               {{"axis", int64_t{2}}, {"split", std::vector<int64_t>{hidden, hidden, hidden}}});
  auto split = [&](TensorId t, std::vector<int64_t> perm) {
    return b.Transpose(b.Reshape(t, {batch, seq, heads, dh}), std::move(perm));
  };
  TensorId q = split(qkv[0], {0, 2, 1, 3});
  TensorId k = split(qkv[1], {0, 2, 3, 1});
  TensorId v = split(qkv[2], {0, 2, 1, 3});
  std::vector<double> mask(seq * seq, 0.0);
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = i + 1; j < seq; ++j) mask[i * seq + j] = -1e9;
  TensorId causal = b.Constant("causal_mask", {seq, seq}, DType::kF32, std::move(mask));
  TensorId s = b.Add(b.Scale(b.MatMul(q, k), 1.0 / std::sqrt(static_cast<double>(dh))), causal);
  TensorId p = b.Dropout(b.Softmax(s, -1), 0.1);
  TensorId o = b.Reshape(b.Transpose(b.MatMul(p, v), {0, 2, 1, 3}), {batch, seq, hidden});
  x = b.Add(x, b.Linear(o, hidden));
  b.MarkOutput(b.Linear(b.Reshape(x, {batch * seq, hidden}), 16));
  return *std::move(b).Build();
}

// Megatron on a fused projection: each rank holds its heads of q, k and v
// (the weight and bias in 3 segments), the Split runs on the rank's piece
// with no gather, and training matches the world-1 run.
TEST(RuntimeNumericsTest, FusedQkvMegatronHoldsEachRanksHeadsInSegments) {
  const Graph g = FusedQkv();
  CheckRows(g, 2, {"data_parallel", "expert:megatron"});
  absl::StatusOr<graph::Program> p = LowerRow(g, 2, "expert:megatron");
  ASSERT_TRUE(p.ok()) << p.status();
  int segmented = 0;
  for (const auto& [name, l] : p->loads) {
    if (l.segments.empty()) continue;
    ++segmented;
    EXPECT_THAT(l.segments, ::testing::Contains(3)) << name;
  }
  EXPECT_EQ(segmented, 4);  // weight, bias and their momenta
  // The Split reads the bias Add's piece (no gather) and gives this rank's
  // heads of q, k and v.
  int splits = 0;
  for (const graph::Op& op : p->graph.ops()) {
    if (op.type != "Split" || op.phase != graph::Phase::kForward) continue;
    ++splits;
    const graph::Tensor& in = p->graph.tensor(op.inputs[0]);
    ASSERT_NE(in.producer, graph::kNoId);
    EXPECT_EQ(p->graph.op(in.producer).type, "Add");
    EXPECT_EQ(in.shape, (std::vector<int64_t>{8, 8, 48}));
    for (TensorId o : op.outputs) EXPECT_EQ(p->graph.tensor(o).shape, (std::vector<int64_t>{8, 8, 16}));
  }
  EXPECT_EQ(splits, 1);
}

// The program simulated as it runs: its buckets one collective each, its
// tensor-parallel collectives priced by the communication model (not the
// comm_time_s the lowering copies), a bad bucket refused.
TEST(RuntimeNumericsTest, ProgramSimulationPricesItsBucketsAndCollectives) {
  const costmodel::ClusterSpec c = CpuLocal(2);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<graph::Program> dp = LowerRow(Mlp(), 2, "data_parallel");
  ASSERT_TRUE(dp.ok()) << dp.status();
  std::vector<std::string> grads;
  for (const graph::Op& op : dp->graph.ops()) {
    if (op.kind == graph::OpKind::kAllReduce && !op.GetInts("mesh_axes").empty()) grads.push_back(op.name);
  }
  ASSERT_GE(grads.size(), 2u);
  absl::StatusOr<search::ProgramSimulation> each = search::SimulateProgram(*dp, cm);
  ASSERT_TRUE(each.ok()) << each.status();
  EXPECT_EQ(each->plan.buckets.size(), grads.size());
  EXPECT_EQ(each->result.unfinished_tasks, 0);
  EXPECT_GT(each->result.iteration_s, 0);
  graph::Program bucketed = *dp;
  bucketed.buckets = {grads};
  absl::StatusOr<search::ProgramSimulation> one = search::SimulateProgram(bucketed, cm);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->plan.buckets.size(), 1u);
  EXPECT_EQ(one->plan.buckets[0].grads.size(), grads.size());
  EXPECT_LT(one->result.comm_s, each->result.comm_s);  // one collective's latency, not several
  absl::StatusOr<graph::Program> meg = LowerRow(Transformer(), 2, "expert:megatron");
  ASSERT_TRUE(meg.ok()) << meg.status();
  absl::StatusOr<search::ProgramSimulation> tp = search::SimulateProgram(*meg, cm);
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_GT(tp->result.comm_s, 0);
  bucketed.buckets = {{"no such op"}};
  EXPECT_EQ(search::SimulateProgram(bucketed, cm).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RuntimeNumericsTest, MegatronProgramHoldsItsCollectivesAndAdjoints) {
  absl::StatusOr<graph::Program> p = LowerRow(Transformer(), 2, "expert:megatron");
  ASSERT_TRUE(p.ok()) << p.status();
  int forward_coll = 0, backward_coll = 0;
  for (const graph::Op& op : p->graph.ops()) {
    if (graph::CategoryOf(op.kind) != graph::OpCategory::kCollective) continue;
    EXPECT_TRUE(op.attrs.contains("mesh_axes")) << op.name;
    (op.phase == graph::Phase::kForward ? forward_coll : backward_coll)++;
  }
  EXPECT_GT(forward_coll, 0);
  EXPECT_GT(backward_coll, forward_coll);  // adjoints and gradient reductions
  // The program survives its JSON form, fingerprint checked.
  absl::StatusOr<graph::Program> back = graph::ProgramFromJson(graph::ProgramToJson(*p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->program_fingerprint, p->program_fingerprint);
  nlohmann::json forged = graph::ProgramToJson(*p);
  forged["mesh"] = {1, 2};
  EXPECT_FALSE(graph::ProgramFromJson(forged).ok());
}

}  // namespace
}  // namespace braid
