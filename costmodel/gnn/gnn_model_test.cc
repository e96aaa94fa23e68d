#include "costmodel/gnn/gnn_model.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <torch/utils.h>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel::gnn {
namespace {

using ::testing::HasSubstr;

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

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / name).string();
}

struct Fixture {
  graph::Graph g = *graph::ParseText(kGraph);
  OpVocabulary vocab = OpVocabulary::Build({"MatMul", "Relu", "Add"});
  std::vector<FeatureGraph> fs;
  CheckpointInfo info;

  Fixture() {
    fs.push_back(ExtractFeatures(g, std::vector<graph::OpId>{0, 1}, std::vector<MemberTime>{{2e-5, true}, {3e-6, true}}, vocab));
    fs.push_back(ExtractFeatures(g, std::vector<graph::OpId>{1, 2}, std::vector<MemberTime>{{3e-6, true}, {4e-6, false}}, vocab));
    fs.push_back(ExtractFeatures(g, std::vector<graph::OpId>{0, 1, 2}, std::vector<MemberTime>{{2e-5, true}, {3e-6, true}, {4e-6, false}}, vocab));
    info.device_kind = "test-dev";
    info.vocabulary = vocab.names();
    info.stats = ComputeStats(fs);
    info.split = "a";
    info.hp = {.layers = 2, .heads = 2, .width = 16};
  }
  std::vector<const FeatureGraph*> Ptrs() const {
    std::vector<const FeatureGraph*> p;
    for (const FeatureGraph& f : fs) p.push_back(&f);
    return p;
  }
};

TEST(GnnModelTest, BatchPadsAndMasks) {
  Fixture f;
  GnnBatch b = MakeBatch(f.Ptrs(), f.info.stats);
  EXPECT_EQ(b.nodes.sizes(), (std::vector<int64_t>{3, 3, kNodeFeatures}));
  EXPECT_EQ(b.node_mask.sum().item<int64_t>(), 2 + 2 + 3);
  // Padding attends to itself only; real rows follow the adjacency.
  EXPECT_TRUE(b.adj[0][2][2].item<bool>());
  EXPECT_FALSE(b.adj[0][2][0].item<bool>());
  EXPECT_TRUE(b.adj[2][0][1].item<bool>());
  EXPECT_FALSE(b.adj[2][0][2].item<bool>());
  EXPECT_EQ(b.types[0][0].item<int64_t>(), f.vocab.Index("MatMul"));
  EXPECT_EQ(b.types[0][2].item<int64_t>(), 0);
  EXPECT_FLOAT_EQ(b.log_sum[0].item<float>(), std::log(2.3e-5));
}

TEST(GnnModelTest, PaddingDoesNotChangeAPrediction) {
  Fixture f;
  torch::manual_seed(3);
  GnnNet net(f.vocab.size(), f.info.hp);
  net->eval();
  std::vector<const FeatureGraph*> alone = {&f.fs[0]};
  std::vector<const FeatureGraph*> padded = {&f.fs[0], &f.fs[2]};
  const double a = Predict(net, alone, f.info.stats)[0];
  const double b = Predict(net, padded, f.info.stats)[0];
  EXPECT_NEAR(a, b, 1e-6 * a);
  EXPECT_GT(a, 0);
}

TEST(GnnModelTest, CheckpointRoundTripPredictsTheSame) {
  Fixture f;
  torch::manual_seed(7);
  GnnNet net(f.vocab.size(), f.info.hp);
  net->eval();
  const std::string path = TempPath("roundtrip.pt");
  f.info.train_samples = 123;
  f.info.grid_json = R"([{"layers":2,"val_loss":0.5}])";
  ASSERT_TRUE(SaveCheckpoint(path, net, f.info).ok());
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "test-dev");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->id.size(), 16u);
  EXPECT_EQ(c->info.vocabulary, f.vocab.names());
  EXPECT_EQ(c->info.hp.width, 16);
  EXPECT_EQ(c->info.train_samples, 123);
  EXPECT_EQ(c->info.split, "a");
  EXPECT_EQ(c->info.stats.node_mean, f.info.stats.node_mean);
  EXPECT_THAT(c->info.grid_json, HasSubstr("0.5"));
  const std::vector<double> before = Predict(net, f.Ptrs(), f.info.stats);
  const std::vector<double> after = Predict(c->net, f.Ptrs(), c->info.stats);
  EXPECT_EQ(before, after);
  // Same weights and info, same id, whatever the file is called; other
  // weights, another id.
  const std::string renamed = TempPath("another_name.pt");
  ASSERT_TRUE(SaveCheckpoint(renamed, net, f.info).ok());
  absl::StatusOr<LoadedCheckpoint> again = LoadCheckpoint(renamed, "test-dev");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, c->id);
  EXPECT_FALSE(std::filesystem::exists(renamed + ".tmp"));
  torch::manual_seed(8);
  GnnNet other(f.vocab.size(), f.info.hp);
  const std::string path2 = TempPath("roundtrip2.pt");
  ASSERT_TRUE(SaveCheckpoint(path2, other, f.info).ok());
  EXPECT_NE(LoadCheckpoint(path2, "test-dev")->id, c->id);
}

// The training and validation samples' hashes travel in the checkpoint
// file; one saved without them loads without them.
TEST(GnnModelTest, CheckpointKeepsItsSampleHashes) {
  Fixture f;
  torch::manual_seed(7);
  GnnNet net(f.vocab.size(), f.info.hp);
  f.info.train_samples = 2;
  f.info.val_samples = 1;
  f.info.sample_hashes = SampleHashes{
      .train = {SampleHash("test-dev", "s1"), SampleHash("test-dev", "s2")},
      .validation = {SampleHash("test-dev", "s3")}};
  const std::string path = TempPath("hashes.pt");
  ASSERT_TRUE(SaveCheckpoint(path, net, f.info).ok());
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "test-dev");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->info.sample_hashes.has_value());
  EXPECT_EQ(c->info.sample_hashes->train, f.info.sample_hashes->train);
  EXPECT_EQ(c->info.sample_hashes->validation, f.info.sample_hashes->validation);
  f.info.sample_hashes.reset();
  const std::string without = TempPath("no_hashes.pt");
  ASSERT_TRUE(SaveCheckpoint(without, net, f.info).ok());
  c = LoadCheckpoint(without, "test-dev");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->info.sample_hashes.has_value());
  // Hashes that do not match the sample counts are refused.
  f.info.sample_hashes = SampleHashes{.train = {SampleHash("test-dev", "s1")}};
  ASSERT_TRUE(SaveCheckpoint(path, net, f.info).ok());
  c = LoadCheckpoint(path, "test-dev");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("sample hashes: 1 training"));
}

TEST(GnnModelTest, RefusesAnotherDeviceKind) {
  Fixture f;
  GnnNet net(f.vocab.size(), f.info.hp);
  const std::string path = TempPath("device.pt");
  ASSERT_TRUE(SaveCheckpoint(path, net, f.info).ok());
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "cuda:NVIDIA H100");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("was trained for device kind 'test-dev'; this cluster's is 'cuda:NVIDIA H100'"));
}

TEST(GnnModelTest, RefusesAnotherSchemaOrFormatVersion) {
  Fixture f;
  GnnNet net(f.vocab.size(), f.info.hp);
  CheckpointInfo schema = f.info;
  schema.feature_schema = "v0:old";
  const std::string p1 = TempPath("schema.pt");
  ASSERT_TRUE(SaveCheckpoint(p1, net, schema).ok());
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(p1, "test-dev");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("feature schema 'v0:old'"));
  EXPECT_THAT(c.status().message(), HasSubstr(kFeatureSchema));

  CheckpointInfo version = f.info;
  version.format_version = kCheckpointFormatVersion + 1;
  const std::string p2 = TempPath("version.pt");
  ASSERT_TRUE(SaveCheckpoint(p2, net, version).ok());
  c = LoadCheckpoint(p2, "test-dev");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr(absl::StrCat("format version ", kCheckpointFormatVersion + 1,
                                     "; this braid reads version ", kCheckpointFormatVersion)));
}

TEST(GnnModelTest, RefusesFilesThatAreNoCheckpoint) {
  const std::string path = TempPath("garbage.pt");
  std::ofstream(path) << "not a zip archive";
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint(path, "test-dev");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("garbage.pt"));
  EXPECT_EQ(LoadCheckpoint(TempPath("missing.pt"), "test-dev").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(GnnModelTest, RejectsBadHyperParams) {
  EXPECT_TRUE(ValidateHyperParams({.layers = 2, .heads = 4, .width = 64}).ok());
  EXPECT_EQ(ValidateHyperParams({.layers = 2, .heads = 3, .width = 64}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateHyperParams({.layers = 0, .heads = 2, .width = 64}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::costmodel::gnn
