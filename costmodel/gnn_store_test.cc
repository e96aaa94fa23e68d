#include "costmodel/gnn_store.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using ::testing::HasSubstr;

constexpr char kGroup[] = R"(
graph "group"
tensor x f32[8,16] input
tensor w f32[16,16] parameter
tensor y f32[8,16] activation
tensor z f32[8,16] activation
op mm MatMul (x, w) -> (y)
op relu Relu (y) -> (z)
output z
)";

class GnnStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gnn_store_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "profiles.db").string(); }
  std::filesystem::path dir_;
};

GnnSampleRecord Sample(const std::string& model) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(kGroup);
  EXPECT_TRUE(g.ok()) << g.status();
  std::vector<graph::OpId> all = {0, 1};
  return {"cpu-test", model, FusedSignature(*g, all), graph::ToText(*g), 2};
}

TEST_F(GnnStoreTest, SamplesAreIdempotentAndCountedPerModel) {
  auto s = GnnStore::Open(Path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(*(*s)->PutSample(Sample("zoo:a")));
  EXPECT_FALSE(*(*s)->PutSample(Sample("zoo:a")));
  EXPECT_TRUE(*(*s)->PutSample(Sample("zoo:b")));
  EXPECT_EQ(*(*s)->CountSamples("cpu-test", "zoo:a"), 1);
  EXPECT_EQ(*(*s)->CountSamples("cpu-other", "zoo:a"), 0);
  EXPECT_EQ((*s)->Samples("cpu-test")->size(), 2u);
  GnnSampleRecord bad = Sample("zoo:a");
  bad.num_ops = 0;
  EXPECT_THAT((*s)->PutSample(bad).status().message(), HasSubstr("must have ops"));
}

TEST_F(GnnStoreTest, ExamplesJoinMeasuredFusedKernelsWithTheirMembers) {
  auto s = GnnStore::Open(Path());
  auto profiles = ProfileStore::Open(Path());  // the same file
  ASSERT_TRUE(s.ok() && profiles.ok());
  GnnSampleRecord rec = Sample("zoo:a");
  ASSERT_TRUE((*s)->PutSample(rec).ok());
  int missing = -1;
  EXPECT_TRUE(LoadGnnExamples(**s, **profiles, "cpu-test", &missing)->empty());
  EXPECT_EQ(missing, 1);

  ASSERT_TRUE((*profiles)->Put({"cpu-test", kFusedOp, rec.signature}, {2e-5, 1e-6, 11}).ok());
  absl::StatusOr<graph::Graph> g = graph::ParseText(rec.graph_text);
  ASSERT_TRUE((*profiles)->Put({"cpu-test", "MatMul", OpSignature(*g, 0)}, {1.5e-5, 1e-6, 11}).ok());
  auto ex = LoadGnnExamples(**s, **profiles, "cpu-test", &missing);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 1u);
  EXPECT_EQ(missing, 0);
  const GnnExample& e = ex->front();
  EXPECT_EQ(e.fused.median_s, 2e-5);
  ASSERT_EQ(e.members.size(), 2u);
  ASSERT_TRUE(e.members[0].has_value());
  EXPECT_EQ(e.members[0]->median_s, 1.5e-5);
  EXPECT_FALSE(e.members[1].has_value());  // Relu not measured
  std::vector<graph::OpId> all = {0, 1};
  EXPECT_EQ(FusedSignature(e.graph, all), rec.signature);
}

TEST_F(GnnStoreTest, PredictionsAreKeptPerCheckpoint) {
  auto s = GnnStore::Open(Path());
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(*(*s)->KeepOnlyPredictions("cpu-a", "ck1"), 0);
  ASSERT_EQ(*(*s)->KeepOnlyPredictions("cpu-b", "ckB"), 0);
  ASSERT_TRUE((*s)->PutPredictions("ck1", {{"sigA", 1e-5}, {"sigB", 2e-5}}).ok());
  ASSERT_TRUE((*s)->PutPredictions("ck2", {{"sigA", 3e-5}}).ok());
  ASSERT_TRUE((*s)->PutPredictions("ckB", {{"sigA", 4e-5}}).ok());
  EXPECT_EQ((*s)->Predictions("ck1")->size(), 2u);
  EXPECT_EQ(*(*s)->KeepOnlyPredictions("cpu-a", "ck1"), 0);  // same checkpoint: kept
  EXPECT_EQ(*(*s)->KeepOnlyPredictions("cpu-a", "ck2"), 2);  // a new one: ck1's rows go
  EXPECT_TRUE((*s)->Predictions("ck1")->empty());
  EXPECT_EQ((*s)->Predictions("ckB")->size(), 1u);  // another device kind's stay
  ASSERT_EQ((*s)->Predictions("ck2")->size(), 1u);
  EXPECT_EQ((*s)->Predictions("ck2")->front().second, 3e-5);
  EXPECT_FALSE((*s)->PutPredictions("ck2", {{"sigC", -1.0}}).ok());
}

TEST_F(GnnStoreTest, MetaRoundTrips) {
  auto s = GnnStore::Open(Path());
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->GetMeta("cpu-test", "noise_floor")->has_value());
  ASSERT_TRUE((*s)->PutMeta("cpu-test", "noise_floor", "{\"p50\":0.01}").ok());
  EXPECT_EQ(**(*s)->GetMeta("cpu-test", "noise_floor"), "{\"p50\":0.01}");
}

}  // namespace
}  // namespace braid::costmodel
