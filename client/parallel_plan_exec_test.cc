#include "client/parallel_plan_exec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "search/parallel_plan.h"
#include "search/parallelize.h"
#include "client/parallel_spec_graph.h"
#include "client/parallel_test_util.h"
#include "base/status_macros.h"

namespace braid::client {

using worker::ParallelTrainOptions;
using worker::ParallelTrainResult;
using worker::RunParallelTraining;
namespace {

constexpr auto kD = LayerParallel::kData;
constexpr auto kC = LayerParallel::kColumn;
constexpr auto kR = LayerParallel::kRow;

using testing::Mlp;
using testing::Transformer;

costmodel::ClusterSpec Cpu2() {
  return *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2);
}

std::vector<LayerParallel::Kind> Kinds(const ParallelTrainSpec& s) {
  std::vector<LayerParallel::Kind> k;
  for (const LayerParallel& l : s.layers) k.push_back(l.kind);
  return k;
}

// braid plan --parallel's search on cpu-local at 2 ranks, with a small
// fusion budget (the rows' configs do not depend on it).
// A short, deterministic fusion search (one thread, fixed seed).
search::ParallelPlanOptions QuickPlanOptions() {
  search::ParallelPlanOptions o;
  o.fusion.time_budget_s = 0.5;
  o.fusion.threads = 1;
  o.fusion.seed = 1;
  return o;
}

search::ParallelPlanResult Plan(const graph::Graph& g) {
  const costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  search::ParallelPlanOptions o = QuickPlanOptions();
  o.substitutions = false;
  o.pipeline_stages = {2};
  o.micro_batches = {1, 2, 4};
  absl::StatusOr<search::ParallelPlanResult> r = search::PlanParallel(g, c, cm, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : search::ParallelPlanResult();
}

const search::ParallelPlanRow* Row(const search::ParallelPlanResult& r, const std::string& name) {
  for (const search::ParallelPlanRow& row : r.rows)
    if (row.strategy.name == name) return &row;
  return nullptr;
}

// The plan file's "parallel" section of a spec's forced plan: the DP run
// with the executed configs forced (ForcedStrategy), as a table row.
nlohmann::json ForcedPlanJson(const ParallelTrainSpec& s, const graph::Graph& g) {
  const costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<search::ParallelizeOptions> o = ForcedStrategy(s, g);
  EXPECT_TRUE(o.ok()) << o.status();
  absl::StatusOr<search::ParallelizeResult> r = search::ParallelizeForward(g, c, cm, *o);
  EXPECT_TRUE(r.ok()) << r.status();
  search::ParallelPlanRow row;
  row.strategy.name = "forced";
  row.strategy.has_plan = true;
  row.strategy.result = *r;
  row.data_degree = s.data_degree;
  row.model_degree = s.model_degree;
  return search::ParallelPlanJson(g, row, c);
}

TEST(ParallelPlanExecTest, ParsesConfigStrings) {
  for (const search::ParallelConfig& c :
       {search::ParallelConfig{.output_degrees = {1, 8}},
        search::ParallelConfig{.output_degrees = {2, 1, 1}, .reduction_degree = 2},
        search::ParallelConfig{.output_degrees = {1, 1}, .reduction_degree = 2, .replica_degree = 3}}) {
    absl::StatusOr<search::ParallelConfig> p = ParseParallelConfig(search::ParallelConfigString(c));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, c);
  }
  for (const char* bad : {"", "out[]", "out[1,x]", "in[1,2]", "out[1,2] red", "out[1,2] foo2"}) {
    absl::StatusOr<search::ParallelConfig> p = ParseParallelConfig(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParallelPlanExecTest, RecognizesTheExecutorsModels) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(Mlp({kC, kR, kC, kR}, 1, 2));
  ASSERT_TRUE(g.ok());
  absl::StatusOr<ParallelTrainSpec> m = ExecutableModel(*g);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->widths, (std::vector<int64_t>{64, 128, 128, 128, 32}));
  EXPECT_EQ(m->batch, 16);
  EXPECT_EQ(Kinds(*m), (std::vector<LayerParallel::Kind>{kD, kD, kD, kD}));

  g = ParallelTrainForwardGraph(Transformer(2, 1));
  ASSERT_TRUE(g.ok());
  m = ExecutableModel(*g);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->transformer.has_value());
  EXPECT_EQ(m->transformer->d_model, 32);
  EXPECT_EQ(m->transformer->heads, 4);
  EXPECT_EQ(m->transformer->seq, 8);
  EXPECT_EQ(m->transformer->d_ff, 64);
  EXPECT_EQ(m->transformer->blocks, 2);
  EXPECT_EQ(m->batch, 4);

  // The zoo's kind of MLP (Gemm with W[out, in]) is not what the ranks run.
  graph::GraphBuilder b("gemm_mlp");
  graph::TensorId x = b.Input("x", {16, 64});
  x = b.Relu(b.Linear(x, 128));
  b.MarkOutput(b.Linear(x, 32));
  absl::StatusOr<graph::Graph> gemm = std::move(b).Build();
  ASSERT_TRUE(gemm.ok());
  m = ExecutableModel(*gemm);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("--write-model"), std::string::npos) << m.status();
}

// The round trip spec -> plan (the DP forced to the spec's configs, written
// as a plan file's section) -> spec.
TEST(ParallelPlanExecTest, RoundTripMlp) {
  for (const ParallelTrainSpec& s :
       {Mlp({kD, kD, kD, kD}, 2, 1), Mlp({kC, kR, kC, kR}, 1, 2), Mlp({kC, kR, kC, kC}, 1, 2)}) {
    absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
    ASSERT_TRUE(g.ok());
    const nlohmann::json j = ForcedPlanJson(s, *g);
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, 2);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << j.dump(1);
    EXPECT_EQ(Kinds(p->spec), Kinds(s));
    EXPECT_EQ(p->spec.data_degree, s.data_degree);
    EXPECT_EQ(p->spec.model_degree, s.model_degree);
    EXPECT_EQ(p->spec.ranks, 2);
    EXPECT_EQ(p->spec.widths, s.widths);
    EXPECT_EQ(p->strategy, "forced");
    EXPECT_EQ(p->verified_ops + static_cast<int>(p->replicated.size()), g->num_ops());
    // Only the ops after a row layer's all-reduce run replicated.
    if (s.model_degree == 1) EXPECT_TRUE(p->replicated.empty());
  }
}

TEST(ParallelPlanExecTest, RoundTripTransformer) {
  for (const ParallelTrainSpec& s : {Transformer(2, 1), Transformer(1, 2)}) {
    absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(s);
    ASSERT_TRUE(g.ok());
    const nlohmann::json j = ForcedPlanJson(s, *g);
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->spec.data_degree, s.data_degree);
    EXPECT_EQ(p->spec.model_degree, s.model_degree);
    ASSERT_TRUE(p->spec.transformer.has_value());
    EXPECT_EQ(p->spec.transformer->blocks, 2);
    EXPECT_EQ(p->verified_ops + static_cast<int>(p->replicated.size()), g->num_ops());
  }
}

// Widths whose pipeline cut (equal compute shares) falls between Linears.
ParallelTrainSpec PipelineableMlp() {
  ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 2, 1);
  s.widths = {64, 128, 128, 128, 128};
  return s;
}

absl::StatusOr<PlannedSpec> FromRow(const graph::Graph& g, const search::ParallelPlanResult& r,
                                    const std::string& name) {
  const search::ParallelPlanRow* row = Row(r, name);
  if (row == nullptr) return absl::NotFoundError(absl::StrCat("no row ", name));
  return ParallelSpecFromPlan(g, search::ParallelPlanJson(g, *row, Cpu2()), 2);
}

// Trains `s` for 2 steps on 2 ranks and the data-parallel spec of the same
// model beside it: the same model, weights and data give the same losses.
void RunsLikeDataParallel(ParallelTrainSpec s) {
  ParallelTrainSpec d = s;
  d.data_degree = 2;
  d.model_degree = 1;
  d.pipeline_stages = 1;
  d.stage_begin.clear();
  d.stage_relu_first.clear();
  d.loss_rows_split = false;
  d.micro_batches = 1;
  for (LayerParallel& l : d.layers) l.kind = kD;
  s.steps = d.steps = 2;
  ParallelTrainOptions o{.rank_binary = BRAID_PARALLEL_RANK_BINARY, .timeout_s = 60};
  absl::StatusOr<ParallelTrainResult> a = RunParallelTraining(s, o);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<ParallelTrainResult> b = RunParallelTraining(d, o);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->loss.size(), 2u);
  ASSERT_EQ(b->loss.size(), 2u);
  EXPECT_EQ(a->step_s.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(a->loss[i], b->loss[i], 1e-4 * std::abs(b->loss[i])) << i;
}

TEST(ParallelPlanExecTest, MlpTableRows) {
  const ParallelTrainSpec spec = PipelineableMlp();
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(spec);
  ASSERT_TRUE(g.ok());
  const search::ParallelPlanResult r = Plan(*g);

  absl::StatusOr<PlannedSpec> dp = FromRow(*g, r, "data_parallel");
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->strategy, "data_parallel");
  EXPECT_EQ(dp->spec.data_degree, 2);
  EXPECT_EQ(dp->spec.model_degree, 1);
  EXPECT_EQ(dp->spec.pipeline_stages, 1);
  EXPECT_EQ(Kinds(dp->spec), (std::vector<LayerParallel::Kind>{kD, kD, kD, kD}));
  EXPECT_EQ(dp->spec.widths, spec.widths);
  EXPECT_EQ(dp->verified_ops, g->num_ops());
  EXPECT_TRUE(dp->replicated.empty());

  const search::ParallelPlanRow* pipe = Row(r, "pipeline:2");
  ASSERT_NE(pipe, nullptr);
  ASSERT_NE(pipe->pipeline, nullptr);
  absl::StatusOr<PlannedSpec> pp = FromRow(*g, r, "pipeline:2");
  ASSERT_TRUE(pp.ok()) << pp.status();
  EXPECT_EQ(pp->spec.pipeline_stages, 2);
  EXPECT_EQ(pp->spec.micro_batches, pipe->pipeline->micro_batches);
  EXPECT_EQ(pp->spec.stage_begin, (std::vector<int>{0, 2}));
  EXPECT_EQ(pp->spec.data_degree * pp->spec.model_degree, 1);
  EXPECT_EQ(pp->spec.schedule, ParallelTrainSpec::PipelineSchedule::k1F1B);
  EXPECT_EQ(pp->verified_ops, g->num_ops());
  RunsLikeDataParallel(pp->spec);

  // braid's own row: run exactly, or refused with the op or layer named.
  absl::StatusOr<PlannedSpec> br = FromRow(*g, r, "braid");
  if (br.ok()) {
    EXPECT_EQ(br->verified_ops + static_cast<int>(br->replicated.size()), g->num_ops());
  } else {
    EXPECT_EQ(br.status().code(), absl::StatusCode::kFailedPrecondition) << br.status();
    EXPECT_NE(br.status().message().find("matmul"), std::string::npos) << br.status();
  }
}

// braid-parallel-model's MLP (4 Linears of width 1024) at `batch`, as
// `braid plan F --parallel --cluster cpu-local --ranks 2` plans it (default
// options; a small fusion budget, which the rows' configs do not depend on):
// the chosen row's plan section, mapped.
// braid's plan of braid-parallel-model's MLP at `batch` on 2 ranks: the
// chosen row, or the row named `row_name`.
absl::StatusOr<PlannedSpec> ChosenMeasureMlpPlan(int64_t batch, std::string* chosen,
                                                 graph::Graph* graph,
                                                 const std::string& row_name = "") {
  ParallelTrainSpec s = Mlp({kD, kD, kD, kD}, 1, 1);
  s.widths = {1024, 1024, 1024, 1024, 1024};
  s.batch = batch;
  ASSIGN_OR_RETURN(*graph, ParallelTrainForwardGraph(s));
  const costmodel::ClusterSpec c = Cpu2();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ASSIGN_OR_RETURN(search::ParallelPlanResult r,
                   search::PlanParallel(*graph, c, cm, QuickPlanOptions()));
  if (r.chosen < 0) return absl::NotFoundError("no chosen row");
  const search::ParallelPlanRow* named = row_name.empty() ? &r.rows[r.chosen] : Row(r, row_name);
  if (named == nullptr) return absl::NotFoundError(absl::StrCat("no row ", row_name));
  const search::ParallelPlanRow& row = *named;
  *chosen = row.strategy.name;
  return ParallelSpecFromPlan(*graph, search::ParallelPlanJson(*graph, row, c), 2);
}

// Batch 256: braid's row is column, row, row, row (the row layers'
// outputs reduce-scattered on features into the next row layer).
TEST(ParallelPlanExecTest, BraidsMlpRowAtBatch256Runs) {
  std::string chosen;
  graph::Graph g;
  absl::StatusOr<PlannedSpec> p = ChosenMeasureMlpPlan(256, &chosen, &g, "braid");
  ASSERT_TRUE(p.ok()) << chosen << ": " << p.status();
  EXPECT_EQ(chosen, "braid");
  EXPECT_EQ(Kinds(p->spec), (std::vector<LayerParallel::Kind>{kC, kR, kR, kR}));
  EXPECT_EQ(p->spec.data_degree, 1);
  EXPECT_EQ(p->spec.model_degree, 2);
  // Every op as planned: add2/relu2/add3/relu3 split on features after the
  // reduce-scatters, add4 on rows (out[2,1]: loss_rows_split).
  EXPECT_EQ(p->verified_ops, g.num_ops());
  EXPECT_TRUE(p->replicated.empty());
  EXPECT_TRUE(p->spec.loss_rows_split);
  RunsLikeDataParallel(p->spec);
}

// Batch 8: braid's 2-stage pipeline row cuts between add2 and relu2. (It
// was the chosen row until pipelines were set against the fused rows' DP
// estimates rather than their simulated times.)
TEST(ParallelPlanExecTest, BraidsPipelineMlpPlanAtBatch8Runs) {
  std::string chosen;
  graph::Graph g;
  absl::StatusOr<PlannedSpec> p = ChosenMeasureMlpPlan(8, &chosen, &g, "pipeline:2");
  ASSERT_TRUE(p.ok()) << chosen << ": " << p.status();
  EXPECT_EQ(chosen, "pipeline:2");
  EXPECT_EQ(p->spec.pipeline_stages, 2);
  if (p->spec.stage_relu_first.empty()) {
    ADD_FAILURE() << "no stage starts with a ReLU (stage_begin " << p->spec.stage_begin[1] << ")";
  } else {
    EXPECT_EQ(p->spec.stage_relu_first, (std::vector<bool>{false, true}));
    EXPECT_EQ(p->spec.stage_begin, (std::vector<int>{0, 2}));
  }
  EXPECT_EQ(p->verified_ops, g.num_ops());
  RunsLikeDataParallel(p->spec);
}

TEST(ParallelPlanExecTest, TransformerTableRows) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(Transformer(2, 1));
  ASSERT_TRUE(g.ok());
  const search::ParallelPlanResult r = Plan(*g);

  absl::StatusOr<PlannedSpec> dp = FromRow(*g, r, "data_parallel");
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ(dp->spec.data_degree, 2);
  EXPECT_EQ(dp->spec.model_degree, 1);
  EXPECT_EQ(dp->verified_ops, g->num_ops());

  // Megatron: tensor parallel over both ranks; the ops after the row
  // layers' all-reduce (residual Adds, LayerNorms) run replicated, listed.
  absl::StatusOr<PlannedSpec> mt = FromRow(*g, r, "expert:megatron");
  ASSERT_TRUE(mt.ok()) << mt.status();
  EXPECT_EQ(mt->spec.data_degree, 1);
  EXPECT_EQ(mt->spec.model_degree, 2);
  ASSERT_TRUE(mt->spec.transformer.has_value());
  EXPECT_EQ(mt->spec.transformer->heads, 4);
  EXPECT_EQ(mt->replicated.size(), 12u);  // per block: ln1, ln2, the o and w2 bias Adds, 2 residuals
  for (const std::string& s : mt->replicated) EXPECT_NE(s.find("runs out[1,1,1] rep2"), std::string::npos) << s;
  EXPECT_EQ(mt->verified_ops + static_cast<int>(mt->replicated.size()), g->num_ops());
  RunsLikeDataParallel(mt->spec);

  absl::StatusOr<PlannedSpec> pp = FromRow(*g, r, "pipeline:2");
  ASSERT_TRUE(pp.ok()) << pp.status();
  EXPECT_EQ(pp->spec.pipeline_stages, 2);
  EXPECT_EQ(pp->spec.stage_begin, (std::vector<int>{0, 1}));
  EXPECT_EQ(pp->verified_ops, g->num_ops());
}

nlohmann::json& OpEntry(nlohmann::json& j, const std::string& name) {
  for (nlohmann::json& o : j["ops"])
    if (o["op"] == name) return o;
  ADD_FAILURE() << "no op " << name;
  return j;
}

// A transformer row with mixed data degrees (braid's DP may put attention
// data parallel and the MLP tensor parallel) is one these ranks cannot run:
// the mapping refuses it, naming why; the data-parallel row maps.
TEST(ParallelPlanExecTest, RefusesRowsThatMixDataDegrees) {
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(Transformer(2, 1));
  ASSERT_TRUE(g.ok());
  const search::ParallelPlanResult r = Plan(*g);
  const search::ParallelPlanRow* dp = Row(r, "data_parallel");
  ASSERT_NE(dp, nullptr);
  nlohmann::json j = search::ParallelPlanJson(*g, *dp, Cpu2());
  OpEntry(j, "block0.matmul8")["config"] = "out[1,1,2]";
  OpEntry(j, "block0.matmul8")["data_degree"] = 1;
  absl::StatusOr<PlannedSpec> e = ParallelSpecFromPlan(*g, j, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::IsUnimplemented(e.status()) || absl::IsFailedPrecondition(e.status()) ||
              absl::IsInvalidArgument(e.status()))
      << e.status();
  EXPECT_NE(e.status().message().find("mixes data degrees"), std::string::npos) << e.status();
  EXPECT_TRUE(ParallelSpecFromPlan(*g, search::ParallelPlanJson(*g, *dp, Cpu2()), 2).ok());
}

TEST(ParallelPlanExecTest, RefusesWhatTheExecutorDoesNotRun) {
  const ParallelTrainSpec mt = Mlp({kC, kR, kC, kR}, 1, 2);
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(mt);
  ASSERT_TRUE(g.ok());
  const nlohmann::json megatron = ForcedPlanJson(mt, *g);
  const nlohmann::json data = ForcedPlanJson(Mlp({kD, kD, kD, kD}, 2, 1), *g);
  auto refused = [&](const nlohmann::json& j, int ranks, absl::StatusCode code,
                     const std::string& message) {
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, ranks);
    EXPECT_EQ(p.status().code(), code) << p.status();
    EXPECT_NE(p.status().message().find(message), std::string::npos) << p.status();
  };
  {  // A Linear neither data, column nor row at the plan's degrees.
    nlohmann::json j = megatron;
    OpEntry(j, "matmul1")["config"] = "out[1,1] rep2";
    refused(j, 2, absl::StatusCode::kFailedPrecondition,
            "op matmul1 (MatMul): planned out[1,1] rep2 (replicated 2x); the plan's data x model "
            "degree is 1 x 2");
  }
  {  // Linears at different data degrees.
    nlohmann::json j = data;
    OpEntry(j, "matmul3")["config"] = "out[1,2]";
    OpEntry(j, "matmul3")["data_degree"] = 1;
    refused(j, 2, absl::StatusCode::kFailedPrecondition,
            "the plan mixes data degrees: op matmul1 (MatMul) at 2, op matmul3 (MatMul) at 1");
  }
  {  // A row layer after a row layer: the first one's output is
     // reduce-scattered on features (bias Add and Relu split), so a plan
     // that all-reduces it (replicated Add) is not what the ranks run.
    nlohmann::json j = megatron;
    OpEntry(j, "matmul3")["config"] = "out[1,1] red2";
    OpEntry(j, "add2")["config"] = "out[2,1]";
    refused(j, 2, absl::StatusCode::kFailedPrecondition,
            "op add2 (Add): planned out[2,1] (data split over 2); the executor runs out[1,2] "
            "(last-dim (column) split over 2)");
    // ... and with the bias Add and Relu split it is braid's plan, run as is.
    OpEntry(j, "add2")["config"] = "out[1,2]";
    OpEntry(j, "relu2")["config"] = "out[1,2]";
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(Kinds(p->spec), (std::vector<LayerParallel::Kind>{kC, kR, kR, kR}));
  }
  {  // A first row layer reads the replicated input: each rank slices its
     // features (matmul1's output reduce-scattered into matmul2, a row layer,
     // so add1 and relu1 stay split on features as after a column layer).
    nlohmann::json j = megatron;
    OpEntry(j, "matmul1")["config"] = "out[1,1] red2";
    OpEntry(j, "matmul2")["config"] = "out[1,1] red2";
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(Kinds(p->spec), (std::vector<LayerParallel::Kind>{kR, kR, kC, kR}));
  }
  {  // Any other op the ranks run otherwise than planned.
    nlohmann::json j = data;
    OpEntry(j, "relu1")["config"] = "out[1,2]";
    refused(j, 2, absl::StatusCode::kFailedPrecondition,
            "op relu1 (Relu): planned out[1,2] (last-dim (column) split over 2); the executor "
            "runs out[2,1] (data split over 2)");
  }
  {  // An overlap decomposition is run as the plain collective, and says so.
    nlohmann::json j = megatron;
    j["overlap"] = {{{"collective", "allreduce3"}, {"pattern", "matmul_reduce_scatter"},
                     {"method", "looped"}},
                    {{"collective", "allreduce5"}, {"pattern", "matmul_reduce_scatter"},
                     {"method", "none"}}};
    absl::StatusOr<PlannedSpec> p = ParallelSpecFromPlan(*g, j, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->not_executed,
              (std::vector<std::string>{"allreduce3 (matmul_reduce_scatter): planned overlap method "
                                        "looped, the ranks run the plain collective"}));
  }
  refused(data, 4, absl::StatusCode::kInvalidArgument, "planned for 2 devices, asked to run on 4 ranks");
  {
    nlohmann::json j = data;
    j["substitutions"] = nlohmann::json::array();
    refused(j, 2, absl::StatusCode::kUnimplemented, "rewrote the graph");
  }
  {
    nlohmann::json j = data;
    j["degree"] = "two";
    refused(j, 2, absl::StatusCode::kInvalidArgument, "parallel plan: malformed");
  }
  {
    nlohmann::json j = data;
    j["ops"].erase(j["ops"].begin() + 1);
    refused(j, 2, absl::StatusCode::kInvalidArgument, "the plan has no config for op");
  }
  // A pipeline cut inside a Linear layer (between its MatMul and bias Add).
  nlohmann::json pipe = {{"strategy", "pipeline:2"}, {"degree", 2}, {"stages", 2},
                         {"micro_batches", 2}, {"schedule", "1F1B"},
                         {"stage_plan", nlohmann::json::array()}};
  const std::vector<std::string> first = {"matmul1", "add2"};
  for (int k = 0; k < 2; ++k) pipe["stage_plan"].push_back({{"first_op", first[k]}, {"devices", 1}, {"ops", nlohmann::json::array()}});
  refused(pipe, 2, absl::StatusCode::kUnimplemented,
          "stage 1 starts at op add2 (Add), inside a Linear layer; the executor cuts stages only "
          "between Linear layers");
}

}  // namespace
}  // namespace braid::client
