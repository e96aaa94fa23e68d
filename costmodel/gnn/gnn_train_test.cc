#include "costmodel/gnn/gnn_train.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "costmodel/gnn/sample_hashes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel::gnn {
namespace {

ClusterSpec TestCluster() {
  ClusterSpec c;
  c.name = "test";
  c.device = {.kind = "test-dev", .peak_flops_f32 = 1e11, .peak_flops_f16 = 4e11,
              .memory_bandwidth = 2e10, .memory_bytes = int64_t{1} << 34, .launch_overhead_s = 2e-6};
  return c;
}

// A chain of n ops on [rows, cols] f32 tensors: an optional MatMul first,
// then elementwise ops. Member times follow a roofline; the fused kernel
// costs the MatMul plus 30% of the elementwise members (50% when the rows
// are narrow), plus one launch: a known function of member times and shapes.
GnnExample Synthetic(std::mt19937_64& rng, int index) {
  std::uniform_int_distribution<int> n_dist(2, 6), rows_log(5, 12), cols_log(4, 10), coin(0, 1);
  const int n = n_dist(rng);
  const int64_t rows = int64_t{1} << rows_log(rng), cols = int64_t{1} << cols_log(rng);
  const bool matmul = coin(rng) == 1;
  static const char* kEw[] = {"Relu", "Add", "Sigmoid", "Mul"};
  GnnExample e;
  e.model = std::string(kDiscoSampleModels[index % kDiscoSampleModels.size()]);
  graph::Graph& g = e.graph;
  g.set_name(absl::StrCat("syn", index));
  graph::TensorId cur;
  double lib_s = 0, ew_s = 0;
  auto time_of = [](double flops, double bytes) { return std::max(flops / 1e11, bytes / 2e10) + 2e-6; };
  std::string sig = absl::StrCat(rows, "x", cols, matmul ? "mm" : "");
  int first = 0;
  if (matmul) {
    const int64_t k = 256;
    graph::TensorId x = g.AddTensor("x", {rows, k}, graph::DType::kF32, graph::TensorRole::kInput);
    graph::TensorId w = g.AddTensor("w", {k, cols}, graph::DType::kF32, graph::TensorRole::kParameter);
    cur = g.AddTensor("t0", {rows, cols}, graph::DType::kF32, graph::TensorRole::kActivation);
    graph::OpId id = g.AddOp("mm", "MatMul", {x, w}, {cur});
    g.mutable_op(id).flops = 2.0 * rows * k * cols;
    lib_s = time_of(g.op(id).flops, 4.0 * (rows * k + k * cols + rows * cols));
    e.members.push_back(ProfileSample{lib_s, 0, 10});
    first = 1;
  } else {
    cur = g.AddTensor("x", {rows, cols}, graph::DType::kF32, graph::TensorRole::kInput);
  }
  std::uniform_int_distribution<int> ew(0, 3);
  for (int i = first; i < n; ++i) {
    const char* type = kEw[ew(rng)];
    std::vector<graph::TensorId> ins = {cur};
    if (std::string(type) == "Add" || std::string(type) == "Mul") {
      ins.push_back(g.AddTensor(absl::StrCat("b", i), {rows, cols}, graph::DType::kF32, graph::TensorRole::kInput));
    }
    graph::TensorId out = g.AddTensor(absl::StrCat("t", i), {rows, cols}, graph::DType::kF32, graph::TensorRole::kActivation);
    graph::OpId id = g.AddOp(absl::StrCat("op", i), type, ins, {out});
    g.mutable_op(id).flops = static_cast<double>(rows * cols);
    const double t = time_of(rows * cols, 4.0 * rows * cols * (ins.size() + 1));
    ew_s += t;
    e.members.push_back(ProfileSample{t, 0, 10});
    absl::StrAppend(&sig, ":", type);
    cur = out;
  }
  g.AddOutput(cur);
  e.signature = sig;
  const double share = cols <= 64 ? 0.5 : 0.3;
  e.fused = ProfileSample{lib_s + share * ew_s + 2e-6, 0, 10};
  return e;
}

std::vector<GnnExample> SyntheticSet(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<GnnExample> out;
  for (int i = 0; i < n; ++i) out.push_back(Synthetic(rng, i));
  return out;
}

TrainOptions SmallOptions() {
  TrainOptions o;
  o.grid = {{.layers = 2, .heads = 2, .width = 32}};
  o.max_epochs = 60;
  o.patience = 10;
  o.batch_size = 32;
  o.learning_rate = 3e-3;
  return o;
}

TEST(GnnTrainTest, LearnsASyntheticFusionRule) {
  std::vector<GnnExample> ex = SyntheticSet(900, 11);
  absl::StatusOr<GnnTrainRun> run = TrainFromExamples(ex, TestCluster(), Split::kA, "", SmallOptions());
  ASSERT_TRUE(run.ok()) << run.status();
  // The untrained network predicts roughly "no saving" (log ratio ~ 0), off
  // by log(0.3..0.5) on elementwise groups; training must learn the rule.
  constexpr double kThreshold = 0.02;
  RecordProperty("untrained_val_loss", absl::StrCat(run->model.untrained_val_loss));
  RecordProperty("val_loss", absl::StrCat(run->model.val_loss));
  RecordProperty("epochs", run->model.epochs);
  EXPECT_GT(run->model.untrained_val_loss, kThreshold);
  EXPECT_LT(run->model.val_loss, kThreshold) << "untrained " << run->model.untrained_val_loss;
  EXPECT_GT(run->model.val_loss, 0);
  // The checkpoint info describes the run.
  EXPECT_EQ(run->info.split, "a");
  EXPECT_EQ(run->info.device_kind, "test-dev");
  EXPECT_EQ(run->info.train_samples, static_cast<int64_t>(run->sets.train.size()));
  EXPECT_EQ(run->info.vocabulary, (std::vector<std::string>{"Add", "MatMul", "Mul", "Relu", "Sigmoid"}));
  EXPECT_EQ(nlohmann::json::parse(run->info.grid_json).size(), 1u);
  // Test-set signatures never trained.
  for (int i : run->sets.test) EXPECT_EQ(SignatureHash(ex[i].signature) % 10, 9u);
  // It records the training and validation samples, and no test sample.
  ASSERT_TRUE(run->info.sample_hashes.has_value());
  EXPECT_EQ(run->info.sample_hashes->train.size(), run->sets.train.size());
  EXPECT_EQ(run->info.sample_hashes->validation.size(), run->sets.val.size());
  std::vector<std::string> test;
  for (int i : run->sets.test) test.push_back(SampleHash("test-dev", ex[i].signature));
  absl::StatusOr<Disjointness> d = CheckDisjoint(run->info.sample_hashes, test);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->checked);
  std::vector<std::string> train = {SampleHash("test-dev", ex[run->sets.train[0]].signature)};
  EXPECT_EQ(CheckDisjoint(run->info.sample_hashes, train).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(GnnTrainTest, DeterministicForASeedAndGridPicksByValidation) {
  std::vector<GnnExample> ex = SyntheticSet(300, 5);
  TrainOptions o = SmallOptions();
  o.max_epochs = 4;
  o.grid = {{.layers = 1, .heads = 1, .width = 8}, {.layers = 2, .heads = 2, .width = 16}};
  absl::StatusOr<GnnTrainRun> a = TrainFromExamples(ex, TestCluster(), Split::kA, "", o);
  absl::StatusOr<GnnTrainRun> b = TrainFromExamples(ex, TestCluster(), Split::kA, "", o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->model.grid.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a->model.grid[i].val_loss, b->model.grid[i].val_loss);
    EXPECT_EQ(a->model.grid[i].train_loss, b->model.grid[i].train_loss);
  }
  const double best = std::min(a->model.grid[0].val_loss, a->model.grid[1].val_loss);
  EXPECT_EQ(a->model.val_loss, best);
  EXPECT_EQ(a->info.hp.width, a->model.grid[0].val_loss <= a->model.grid[1].val_loss ? 8 : 16);
}

TEST(GnnTrainTest, RefusesEmptySets) {
  TrainOptions o = SmallOptions();
  std::vector<LabeledGraph> none;
  EXPECT_EQ(TrainGnn(none, none, 3, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GnnTrainTest, FeaturizeUsesProfilesElseRoofline) {
  std::vector<GnnExample> ex = SyntheticSet(3, 2);
  ex[0].members[1].reset();
  OpVocabulary v = VocabularyOf(ex, std::vector<int>{0, 1, 2});
  std::vector<LabeledGraph> l = Featurize(ex, std::vector<int>{0}, TestCluster(), v);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].seconds, ex[0].fused.median_s);
  const FeatureGraph& f = l[0].features;
  EXPECT_FLOAT_EQ(f.nodes[3], std::log(ex[0].members[0]->median_s));
  EXPECT_EQ(f.nodes[4], 1.0f);
  EXPECT_EQ(f.nodes[kNodeFeatures + 4], 0.0f);  // the roofline stood in
  ClusterCostModel roofline(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  const graph::OpId one = 1;
  EXPECT_FLOAT_EQ(f.nodes[kNodeFeatures + 3],
                  std::log(roofline.RooflineTime(ex[0].graph, std::span<const graph::OpId>(&one, 1))));
}

}  // namespace
}  // namespace braid::costmodel::gnn
