// Checkpoints are input: a damaged or hostile one (NaN weights, a zero
// standard deviation, a network that predicts inf, a directory, a truncated
// file) is refused with a status and a warning naming the path, and the
// cost model keeps the corrected roofline; a single unusable prediction of
// a loaded estimator falls back the same way.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "costmodel/cost_check.h"
#include "costmodel/gnn/checkpoint_info.h"
#include "costmodel/gnn/gnn_estimator.h"
#include "costmodel/gnn/gnn_model.h"
#include "costmodel/gnn/provider.h"
#include "gmock/gmock.h"
#include "glog/logging.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel::gnn {
namespace {

using ::testing::HasSubstr;
using graph::OpId;

constexpr char kGraph[] = R"(graph "g"
tensor x f32[8,16] input
tensor w f32[16,32] parameter
tensor y f32[8,32] activation
tensor z f32[8,32] activation
tensor b f32[8,32] input
tensor out f32[8,32] activation
op mm MatMul (x, w) -> (y) flops=8192.0
op relu Relu (y) -> (z) flops=256.0
op add Add (z, b) -> (out) flops=256.0
output out
)";

// The same ops, each of about 1e19 s on TestCluster(): whatever the network
// says of their ratio, the fused time is far beyond kMaxPredictedSeconds.
constexpr char kHugeGraph[] = R"(graph "huge"
tensor x f32[8,16] input
tensor w f32[16,32] parameter
tensor y f32[8,32] activation
tensor z f32[8,32] activation
tensor b f32[8,32] input
tensor out f32[8,32] activation
op mm MatMul (x, w) -> (y) flops=1e30
op relu Relu (y) -> (z) flops=1e30
op add Add (z, b) -> (out) flops=1e30
output out
)";

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / name).string();
}

ClusterSpec TestCluster() {
  ClusterSpec c;
  c.name = "ckpt-test";
  c.device = {.kind = "test-dev", .peak_flops_f32 = 1e11, .peak_flops_f16 = 4e11,
              .memory_bandwidth = 2e10, .memory_bytes = int64_t{1} << 34,
              .launch_overhead_s = 2e-6};
  return c;
}

// Collects the WARNING lines logged while it is alive.
class WarningSink : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int,
            const google::LogMessageTime&, const char* message, size_t len) override {
    if (severity != google::GLOG_WARNING) return;
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(message, len);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

struct Fixture {
  graph::Graph g = *graph::ParseText(kGraph);
  OpVocabulary vocab = OpVocabulary::Build({"MatMul", "Relu", "Add"});
  CheckpointInfo info;
  GnnNet net{nullptr};

  Fixture() {
    ClusterCostModel m(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
    std::vector<FeatureGraph> fs;
    for (std::vector<OpId> ops : {std::vector<OpId>{0, 1}, {1, 2}, {0, 1, 2}}) {
      fs.push_back(ExtractFeatures(g, ops, MemberTimes(m, g, ops), vocab));
    }
    info.device_kind = "test-dev";
    info.vocabulary = vocab.names();
    info.stats = ComputeStats(fs);
    info.hp = {.layers = 2, .heads = 2, .width = 16};
    torch::manual_seed(7);
    net = GnnNet(vocab.size(), info.hp);
  }

  // Sets every element of the named parameter.
  void Fill(const std::string& name, double v) {
    torch::NoGradGuard no_grad;
    torch::Tensor* p = net->named_parameters().find(name);
    ASSERT_NE(p, nullptr) << name;
    p->fill_(v);
  }

  std::string Save(const std::string& name) {
    const std::string path = TempPath(name);
    absl::Status s = SaveCheckpoint(path, net, info);
    EXPECT_TRUE(s.ok()) << s;
    return path;
  }
};

// What the server and the CLI do with a checkpoint: the provider's
// estimator for the cluster. Returns it (null when refused) and checks the
// cost model then prices the fused {mm, relu} with the corrected roofline.
FusedOpEstimator* ThroughTheProvider(const std::string& path, const graph::Graph& g) {
  InstallGnnEstimatorProvider();
  setenv("BRAID_GNN_CHECKPOINT", path.c_str(), 1);
  FusedOpEstimator* est = FusedOpEstimatorFor(TestCluster(), "");
  unsetenv("BRAID_GNN_CHECKPOINT");
  ClusterCostModel m(TestCluster(), nullptr, est, CommModel(TestCluster()));
  const std::vector<OpId> pair = {0, 1};
  const OpTime t = m.ComputeTime(g, pair);
  EXPECT_NE(t.source, TimeSource::kGnn);
  EXPECT_EQ(t.seconds, m.CorrectedRoofline(g, pair).seconds);
  EXPECT_TRUE(std::isfinite(t.seconds) && t.seconds > 0);
  return est;
}

// The checkpoint at `path` is refused by LoadCheckpoint with `code` and a
// message naming the path and `reason`, and through the provider with one
// warning naming both, leaving the roofline in use.
void ExpectRefused(const std::string& path, absl::StatusCode code, const std::string& reason) {
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "test-dev");
  ASSERT_FALSE(c.ok()) << path;
  EXPECT_EQ(c.status().code(), code) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(reason));
  WarningSink sink;
  graph::Graph g = *graph::ParseText(kGraph);
  EXPECT_EQ(ThroughTheProvider(path, g), nullptr);
  EXPECT_EQ(ThroughTheProvider(path, g), nullptr);  // loaded (and refused) once
  std::vector<std::string> warned;
  for (const std::string& l : sink.lines()) {
    if (absl::StrContains(l, "fused-op estimator")) warned.push_back(l);
  }
  ASSERT_EQ(warned.size(), 1u) << path;
  EXPECT_THAT(warned[0], HasSubstr(path));
  EXPECT_THAT(warned[0], HasSubstr(reason));
  EXPECT_THAT(warned[0], HasSubstr("corrected roofline"));
}

TEST(CheckpointValidationTest, AValidCheckpointLoadsAndIsUsed) {
  Fixture f;
  const std::string path = f.Save("valid.pt");
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "test-dev");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->path, path);
  InstallGnnEstimatorProvider();
  setenv("BRAID_GNN_CHECKPOINT", path.c_str(), 1);
  FusedOpEstimator* est = FusedOpEstimatorFor(TestCluster(), "");
  unsetenv("BRAID_GNN_CHECKPOINT");
  ASSERT_NE(est, nullptr);
  ClusterCostModel m(TestCluster(), nullptr, est, CommModel(TestCluster()));
  EXPECT_EQ(m.ComputeTime(f.g, std::vector<OpId>{0, 1}).source, TimeSource::kGnn);
}

TEST(CheckpointValidationTest, NanWeightsAreRefused) {
  Fixture f;
  f.Fill("fc1.weight", std::numeric_limits<double>::quiet_NaN());
  ExpectRefused(f.Save("nan_weights.pt"), absl::StatusCode::kInvalidArgument,
                "weight tensor 'fc1.weight' holds");
}

TEST(CheckpointValidationTest, ZeroStandardDeviationIsRefused) {
  Fixture f;
  f.info.stats.node_std[3] = 0;
  ExpectRefused(f.Save("zero_std.pt"), absl::StatusCode::kInvalidArgument,
                "node_std[3] is 0: a standard deviation must be finite and positive");
  Fixture inf_mean;
  inf_mean.info.stats.group_mean[1] = std::numeric_limits<float>::infinity();
  // JSON has no inf: nlohmann writes it as null, read back as NaN.
  ExpectRefused(inf_mean.Save("inf_mean.pt"), absl::StatusCode::kInvalidArgument,
                "group_mean[1] is nan: a mean must be finite");
}

TEST(CheckpointValidationTest, ANetworkPredictingInfIsRefused) {
  Fixture f;
  // Finite weights whose output, a log ratio of 1e4, overflows exp().
  f.Fill("fc3.weight", 0);
  f.Fill("fc3.bias", 1e4);
  ExpectRefused(f.Save("inf_output.pt"), absl::StatusCode::kInvalidArgument,
                "the network predicts inf s for a probe group");
  // And one predicting 0 s (exp of a log ratio of -1e4).
  f.Fill("fc3.bias", -1e4);
  ExpectRefused(f.Save("zero_output.pt"), absl::StatusCode::kInvalidArgument,
                "the network predicts 0 s for a probe group");
}

TEST(CheckpointValidationTest, ADirectoryIsRefused) {
  const std::string dir = TempPath("a_directory.pt");
  std::filesystem::create_directories(dir);
  ExpectRefused(dir, absl::StatusCode::kInvalidArgument, "is a directory");
}

TEST(CheckpointValidationTest, TruncatedFilesAreRefused) {
  Fixture f;
  const std::string path = f.Save("whole.pt");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 100, size_t{0}, size_t{10}}) {
    const std::string cut = TempPath(absl::StrCat("truncated_", keep, ".pt"));
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), keep);
    ExpectRefused(cut, absl::StatusCode::kInvalidArgument, "not a readable braid GNN checkpoint");
  }
}

TEST(CheckpointValidationTest, MetadataDescribingAHugeNetworkIsRefusedBeforeBuildingIt) {
  Fixture f;
  const std::string path = f.Save("small.pt");
  // The weights of a 16-layer, 4096-wide network need a GiB; the file has KiBs.
  f.info.hp = {.layers = 16, .heads = 4, .width = 4096, .type_embedding = 1024};
  EXPECT_GT(ParameterCount(f.info), int64_t{200} << 20);
  GnnNet small(f.vocab.size(), GnnHyperParams{.layers = 2, .heads = 2, .width = 16});
  // Written with the big metadata and the small network's weights.
  ASSERT_TRUE(SaveCheckpoint(path, small, f.info).ok());
  ExpectRefused(path, absl::StatusCode::kInvalidArgument, "more than its");
}

TEST(CheckpointValidationTest, ParameterCountIsTheNetworksOwn) {
  Fixture f;
  int64_t n = 0;
  for (const torch::Tensor& p : f.net->parameters()) n += p.numel();
  EXPECT_EQ(ParameterCount(f.info), n);
  f.info.hp = {.layers = 3, .heads = 4, .width = 32, .type_embedding = 5};
  GnnNet other(f.vocab.size(), f.info.hp);
  n = 0;
  for (const torch::Tensor& p : other->parameters()) n += p.numel();
  EXPECT_EQ(ParameterCount(f.info), n);
}

// A loaded estimator whose answer for one group is not a usable time: the
// cost model gets nullopt for it (the corrected roofline), one warning, and
// the group is not asked again.
TEST(CheckpointValidationTest, AnUnusablePredictionFallsBackToTheRoofline) {
  Fixture f;
  // A network answering "fusion saves nothing" (a log ratio of 0) for every
  // group: the prediction is the sum of the members' times.
  f.Fill("fc3.weight", 0);
  f.Fill("fc3.bias", 0);
  const std::string path = f.Save("usable.pt");
  WarningSink sink;
  auto est = GnnEstimator::Load(path, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(est.ok()) << est.status();
  graph::Graph huge = *graph::ParseText(kHugeGraph);
  ClusterCostModel m(TestCluster(), nullptr, est->get(), CommModel(TestCluster()));
  for (const std::vector<OpId>& grp : {std::vector<OpId>{0, 1}, {1, 2}, {0, 1}}) {
    EXPECT_EQ((*est)->Estimate(huge, grp), std::nullopt);
    const OpTime t = m.ComputeTime(huge, grp);
    EXPECT_NE(t.source, TimeSource::kGnn);
    EXPECT_EQ(t.seconds, m.CorrectedRoofline(huge, grp).seconds);
  }
  EXPECT_EQ((*est)->declined(), 2);
  EXPECT_EQ((*est)->predictions_run(), 2);  // {0, 1} asked once
  EXPECT_EQ((*est)->cache_size(), 0);
  EXPECT_EQ((*est)->Cached(FusedSignature(huge, std::vector<OpId>{0, 1})), std::nullopt);
  int warned = 0;
  for (const std::string& l : sink.lines()) {
    if (!absl::StrContains(l, "fused-op estimator")) continue;
    ++warned;
    EXPECT_THAT(l, HasSubstr(path));
    EXPECT_THAT(l, HasSubstr("corrected roofline"));
  }
  EXPECT_EQ(warned, 1);
  // Prefetch declines the same way.
  (*est)->Prefetch(huge, std::vector<std::vector<OpId>>{{0, 1, 2}});
  EXPECT_EQ((*est)->Estimate(huge, std::vector<OpId>{0, 1, 2}), std::nullopt);
  EXPECT_EQ((*est)->declined(), 3);
  // The same network answers groups of ordinary ops. (A fresh estimator:
  // predictions are kept per fused signature, which is the huge graph's
  // too; only the members' FLOPs differ.)
  auto fresh = GnnEstimator::Load(path, TestCluster(), nullptr, nullptr);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ClusterCostModel ordinary(TestCluster(), nullptr, fresh->get(), CommModel(TestCluster()));
  EXPECT_EQ(ordinary.ComputeTime(f.g, std::vector<OpId>{0, 1}).source, TimeSource::kGnn);
  EXPECT_EQ((*fresh)->declined(), 0);
}

// The prediction cache in the profile database is input too.
TEST(CheckpointValidationTest, UnusableStoredPredictionsAreDropped) {
  Fixture f;
  const std::string path = f.Save("stored.pt");
  const std::string db = TempPath("ckpt_validation.db");
  std::filesystem::remove(db);
  auto store = GnnStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  std::string id;
  {
    auto est = GnnEstimator::Load(path, TestCluster(), nullptr, store->get());
    ASSERT_TRUE(est.ok()) << est.status();
    id = (*est)->checkpoint_id();
  }
  const std::string sig = FusedSignature(f.g, std::vector<OpId>{0, 1});
  ASSERT_TRUE((*store)
                  ->PutPredictions(id, {{sig, 2 * kMaxPredictedSeconds},
                                        {"other", 0.0},
                                        {"fine", 1e-3}})
                  .ok());
  auto est = GnnEstimator::Load(path, TestCluster(), nullptr, store->get());
  ASSERT_TRUE(est.ok()) << est.status();
  EXPECT_EQ((*est)->loaded_from_store(), 1);
  const std::optional<double> t = (*est)->Estimate(f.g, std::vector<OpId>{0, 1});
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(std::isfinite(*t) && *t > 0);
  EXPECT_EQ((*est)->forward_passes(), 1);  // asked the network, not the bad row
}

}  // namespace
}  // namespace braid::costmodel::gnn
