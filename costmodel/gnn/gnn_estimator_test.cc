#include "costmodel/gnn/gnn_estimator.h"

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <torch/utils.h>

#include "gmock/gmock.h"
#include "costmodel/gnn/gnn_model.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel::gnn {
namespace {

using ::testing::HasSubstr;
using graph::OpId;

// Predictions only; the sample index is not used by the estimator.
class FakeGnnStore : public GnnStore {
 public:
  absl::StatusOr<bool> PutSample(const GnnSampleRecord&) override { return false; }
  absl::StatusOr<std::vector<GnnSampleRecord>> Samples(const std::string&) const override { return std::vector<GnnSampleRecord>{}; }
  absl::StatusOr<int64_t> CountSamples(const std::string&, const std::string&) const override { return 0; }
  absl::Status PutPredictions(const std::string& id,
                              const std::vector<std::pair<std::string, double>>& rows) override {
    ++writes;
    for (const auto& [sig, s] : rows) rows_[id][sig] = s;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::pair<std::string, double>>> Predictions(const std::string& id) const override {
    std::vector<std::pair<std::string, double>> out;
    auto it = rows_.find(id);
    if (it != rows_.end()) out.assign(it->second.begin(), it->second.end());
    return out;
  }
  // One device kind here: every other checkpoint's rows go.
  absl::StatusOr<int64_t> KeepOnlyPredictions(const std::string&, const std::string& id) override {
    int64_t dropped = 0;
    for (auto it = rows_.begin(); it != rows_.end();) {
      if (it->first == id) {
        ++it;
        continue;
      }
      dropped += static_cast<int64_t>(it->second.size());
      it = rows_.erase(it);
    }
    return dropped;
  }
  absl::Status PutMeta(const std::string&, const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::StatusOr<std::optional<std::string>> GetMeta(const std::string&, const std::string&) const override {
    return std::optional<std::string>();
  }
  int writes = 0;

 private:
  std::map<std::string, std::map<std::string, double>> rows_;
};

// Two identical MatMul+Relu layers, then an Add; and an AllReduce.
constexpr char kGraph[] = R"(graph "g"
tensor x f32[8,16] input
tensor w1 f32[16,16] parameter
tensor y1 f32[8,16] activation
tensor z1 f32[8,16] activation
tensor w2 f32[16,16] parameter
tensor y2 f32[8,16] activation
tensor z2 f32[8,16] activation
tensor out f32[8,16] activation
tensor gr f32[16,16] input
tensor red f32[16,16] activation
op mm1 MatMul (x, w1) -> (y1) flops=4096.0
op relu1 Relu (y1) -> (z1) flops=128.0
op mm2 MatMul (z1, w2) -> (y2) flops=4096.0
op relu2 Relu (y2) -> (z2) flops=128.0
op add Add (z2, z1) -> (out) flops=128.0
op ar AllReduce (gr) -> (red) {group_size=2} phase=comm
output out
output red
)";

ClusterSpec TestCluster(const std::string& kind = "test-dev") {
  ClusterSpec c;
  c.name = "test";
  c.device = {.kind = kind, .peak_flops_f32 = 1e11, .peak_flops_f16 = 4e11,
              .memory_bandwidth = 2e10, .memory_bytes = int64_t{1} << 34, .launch_overhead_s = 2e-6};
  return c;
}

std::string Checkpoint(const std::string& name, int seed) {
  graph::Graph g = *graph::ParseText(kGraph);
  OpVocabulary vocab = OpVocabulary::Build({"Add", "MatMul", "Relu"});
  ClusterSpec c = TestCluster();
  ClusterCostModel m(c, nullptr, nullptr, CommModel(c));
  std::vector<FeatureGraph> fs;
  for (std::vector<OpId> ops : {std::vector<OpId>{0, 1}, {2, 3, 4}, {1, 2}}) {
    fs.push_back(ExtractFeatures(g, ops, MemberTimes(m, g, ops), vocab));
  }
  CheckpointInfo info;
  info.device_kind = "test-dev";
  info.vocabulary = vocab.names();
  info.stats = ComputeStats(fs);
  info.hp = {.layers = 2, .heads = 2, .width = 16};
  torch::manual_seed(seed);
  GnnNet net(vocab.size(), info.hp);
  const std::string path = (std::filesystem::path(testing::TempDir()) / name).string();
  EXPECT_TRUE(SaveCheckpoint(path, net, info).ok());
  return path;
}

class GnnEstimatorTest : public testing::Test {
 protected:
  graph::Graph g = *graph::ParseText(kGraph);
  std::string ckpt = Checkpoint("est.pt", 1);
};

TEST_F(GnnEstimatorTest, SecondEstimateIsACacheHit) {
  auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(est.ok()) << est.status();
  GnnEstimator& e = **est;
  EXPECT_EQ(e.Version(), "gnn-" + e.checkpoint_id());
  std::optional<double> a = e.Estimate(g, std::vector<OpId>{1, 0});
  ASSERT_TRUE(a.has_value());
  EXPECT_GT(*a, 0);
  EXPECT_EQ(e.forward_passes(), 1);
  EXPECT_EQ(e.Estimate(g, std::vector<OpId>{0, 1}), a);
  EXPECT_EQ(e.forward_passes(), 1);
  // {mm2, relu2} is the same fused op as {mm1, relu1} (same shapes, edges,
  // outputs leaving): its signature hits the cache.
  EXPECT_EQ(FusedSignature(g, std::vector<OpId>{2, 3}), FusedSignature(g, std::vector<OpId>{0, 1}));
  EXPECT_EQ(e.Estimate(g, std::vector<OpId>{2, 3}), a);
  EXPECT_EQ(e.forward_passes(), 1);
  std::optional<double> b = e.Estimate(g, std::vector<OpId>{3, 4});
  EXPECT_EQ(e.forward_passes(), 2);
  EXPECT_EQ(e.Cached(FusedSignature(g, std::vector<OpId>{3, 4})), b);
  // The network's answer, uncached, is the same number.
  EXPECT_DOUBLE_EQ((*e.EstimateBatch(std::vector<FeatureGraph>{e.Features(g, std::vector<OpId>{0, 1})}))[0], *a);
  // No estimate for one op or a group with a collective.
  EXPECT_EQ(e.Estimate(g, std::vector<OpId>{0}), std::nullopt);
  EXPECT_EQ(e.Estimate(g, std::vector<OpId>{4, 5}), std::nullopt);
}

TEST_F(GnnEstimatorTest, PrefetchIsOneForwardPass) {
  auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(est.ok()) << est.status();
  GnnEstimator& e = **est;
  const std::vector<std::vector<OpId>> groups = {{0, 1}, {2, 3}, {1, 0}, {2, 3, 4}, {3, 4}, {0}};
  e.Prefetch(g, groups);
  EXPECT_EQ(e.forward_passes(), 1);
  // {2,3} and {1,0} are {0,1}'s fused op; the single op is left out.
  EXPECT_EQ(e.predictions_run(), 3);
  for (const auto& grp : groups) e.Estimate(g, grp);
  EXPECT_EQ(e.forward_passes(), 1);
  e.Prefetch(g, groups);  // all cached: nothing to run
  EXPECT_EQ(e.forward_passes(), 1);
  // The batched answers are the single-group ones.
  auto fresh = GnnEstimator::Load(ckpt, TestCluster(), nullptr, nullptr);
  EXPECT_NEAR(*(*fresh)->Estimate(g, std::vector<OpId>{2, 3, 4}), *e.Estimate(g, std::vector<OpId>{2, 3, 4}),
              1e-6 * *e.Estimate(g, std::vector<OpId>{2, 3, 4}));
}

TEST_F(GnnEstimatorTest, ConcurrentEstimatesAgree) {
  auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(est.ok()) << est.status();
  const std::vector<std::vector<OpId>> groups = {{0, 1}, {2, 3}, {2, 3, 4}, {1, 2}, {3, 4}, {0, 1, 2}};
  std::vector<std::vector<double>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 50; ++r) {
        for (const auto& grp : groups) {
          std::optional<double> v = (*est)->Estimate(g, grp);
          if (r == 0) got[t].push_back(v.value_or(-1));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(got[t], got[0]);
  EXPECT_LE((*est)->predictions_run(), 4 * static_cast<int64_t>(groups.size()));
  EXPECT_EQ((*est)->cache_size(), 5);  // {0,1} and {2,3} share a signature
}

TEST_F(GnnEstimatorTest, StoredPredictionsSurviveAReloadOfTheSameCheckpoint) {
  FakeGnnStore store;
  double a = 0;
  {
    auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, &store);
    ASSERT_TRUE(est.ok()) << est.status();
    a = *(*est)->Estimate(g, std::vector<OpId>{0, 1});
    (*est)->Prefetch(g, std::vector<std::vector<OpId>>{{2, 3}, {3, 4}});
    // {2,3} was a hit; the prefetch wrote its one new row and the pending estimate.
    EXPECT_EQ(store.writes, 1);
  }  // destruction writes what is pending
  auto again = GnnEstimator::Load(ckpt, TestCluster(), nullptr, &store);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->loaded_from_store(), 2);
  EXPECT_EQ((*again)->Estimate(g, std::vector<OpId>{0, 1}), a);
  EXPECT_EQ((*again)->forward_passes(), 0);
  const std::string old_id = (*again)->checkpoint_id();
  // Another checkpoint: the old rows go, nothing is served from them.
  const std::string other = Checkpoint("other.pt", 2);
  auto changed = GnnEstimator::Load(other, TestCluster(), nullptr, &store);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_NE((*changed)->checkpoint_id(), old_id);
  EXPECT_EQ((*changed)->loaded_from_store(), 0);
  EXPECT_TRUE(store.Predictions(old_id)->empty());
  (*changed)->Estimate(g, std::vector<OpId>{0, 1});
  EXPECT_EQ((*changed)->forward_passes(), 1);
}

// The same through the real SQLite store, across "restarts".
TEST_F(GnnEstimatorTest, SqlitePredictionCacheSurvivesARestart) {
  const std::string db = (std::filesystem::path(testing::TempDir()) / "gnn_cache.db").string();
  std::filesystem::remove(db);
  std::string id;
  double a = 0, b = 0;
  {
    auto store = GnnStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, store->get());
    ASSERT_TRUE(est.ok()) << est.status();
    id = (*est)->checkpoint_id();
    (*est)->Prefetch(g, std::vector<std::vector<OpId>>{{0, 1}, {3, 4}});
    a = *(*est)->Estimate(g, std::vector<OpId>{0, 1});
    b = *(*est)->Estimate(g, std::vector<OpId>{2, 3, 4});  // pending until destruction
  }
  {
    auto store = GnnStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->Predictions(id)->size(), 3u);
    auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, store->get());
    ASSERT_TRUE(est.ok()) << est.status();
    EXPECT_EQ((*est)->loaded_from_store(), 3);
    EXPECT_EQ((*est)->Estimate(g, std::vector<OpId>{0, 1}), a);
    EXPECT_EQ((*est)->Estimate(g, std::vector<OpId>{2, 3, 4}), b);
    EXPECT_EQ((*est)->forward_passes(), 0);
  }
  {
    auto store = GnnStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    auto est = GnnEstimator::Load(Checkpoint("other_sqlite.pt", 3), TestCluster(), nullptr, store->get());
    ASSERT_TRUE(est.ok()) << est.status();
    EXPECT_EQ((*est)->loaded_from_store(), 0);
    EXPECT_TRUE((*store)->Predictions(id)->empty());
    (*est)->Estimate(g, std::vector<OpId>{0, 1});
    EXPECT_EQ((*est)->forward_passes(), 1);
  }
}

TEST_F(GnnEstimatorTest, RefusesACheckpointOfAnotherDeviceKind) {
  auto est = GnnEstimator::Load(ckpt, TestCluster("cpu-1t:x86_64-avx512:AMD EPYC"), nullptr, nullptr);
  EXPECT_EQ(est.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(est.status().message(),
              HasSubstr("trained for device kind 'test-dev'; this cluster's is 'cpu-1t:x86_64-avx512:AMD EPYC'"));
}

TEST_F(GnnEstimatorTest, CostModelReportsGnnTimes) {
  auto est = GnnEstimator::Load(ckpt, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(est.ok()) << est.status();
  ClusterCostModel m(TestCluster(), nullptr, est->get(), CommModel(TestCluster()));
  OpTime t = m.ComputeTime(g, std::vector<OpId>{0, 1});
  EXPECT_EQ(t.source, TimeSource::kGnn);
  EXPECT_EQ(t.seconds, *(*est)->Estimate(g, std::vector<OpId>{0, 1}));
  EXPECT_THAT(m.Generation(), HasSubstr("estimator-gnn-" + (*est)->checkpoint_id()));
}

}  // namespace
}  // namespace braid::costmodel::gnn
