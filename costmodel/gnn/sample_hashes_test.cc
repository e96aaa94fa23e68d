#include "costmodel/gnn/sample_hashes.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "costmodel/gnn/checkpoint_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel::gnn {
namespace {

using ::testing::HasSubstr;

GnnExample Example(const std::string& model, const std::string& signature) {
  GnnExample e;
  e.model = model;
  e.signature = signature;
  return e;
}

// Valid metadata (statistics of the schema's sizes) trained on two samples
// and validated on one.
CheckpointInfo InfoWithHashes() {
  CheckpointInfo info;
  info.device_kind = "cpu-test";
  info.vocabulary = {"MatMul", "Relu"};
  info.stats = {.node_mean = std::vector<float>(kNodeFeatures, 0.5f),
                .node_std = std::vector<float>(kNodeFeatures, 1.0f),
                .group_mean = std::vector<float>(kGroupFeatures, 0.0f),
                .group_std = std::vector<float>(kGroupFeatures, 2.0f)};
  info.split = "all";
  info.train_samples = 2;
  info.val_samples = 1;
  info.sample_hashes = SampleHashes{
      .train = {SampleHash("cpu-test", "fused2|a"), SampleHash("cpu-test", "fused2|b")},
      .validation = {SampleHash("cpu-test", "fused2|c")}};
  return info;
}

TEST(SampleHashesTest, HashIsTheSha256PrefixOfKindAndSignature) {
  // sha256(b"cpu-test\0fused2|MatMul:x")[:16], hex: the recorded scheme.
  EXPECT_EQ(SampleHash("cpu-test", "fused2|MatMul:x"), "9828cd0f7ec647393769625c318c98b7");
  EXPECT_TRUE(IsSampleHash(SampleHash("cpu-test", "fused2|MatMul:x")));
  EXPECT_NE(SampleHash("cpu-other", "fused2|MatMul:x"), SampleHash("cpu-test", "fused2|MatMul:x"));
  EXPECT_NE(SampleHash("cpu-test", "fused2|MatMul:y"), SampleHash("cpu-test", "fused2|MatMul:x"));
  // The separator keeps the kind and the signature apart.
  EXPECT_NE(SampleHash("ab", "c"), SampleHash("a", "bc"));
  EXPECT_FALSE(IsSampleHash("9828CD0F7EC647393769625C318C98B7"));
  EXPECT_FALSE(IsSampleHash("9828cd0f7ec64739"));
  EXPECT_FALSE(IsSampleHash("9828cd0f7ec647393769625c318c98bz"));
}

TEST(SampleHashesTest, RecordsTrainAndValidationByContentSorted) {
  // The same signature from two models is one sample.
  const std::vector<GnnExample> ex = {Example("zoo:a", "s1"), Example("zoo:b", "s1"),
                                      Example("zoo:a", "s2"), Example("zoo:a", "s3"),
                                      Example("zoo:a", "s4")};
  SplitSets sets;
  sets.train = {3, 0, 1};
  sets.val = {2};
  sets.test = {4};
  std::optional<SampleHashes> h = RecordSampleHashes(ex, sets, "k");
  ASSERT_TRUE(h.has_value());
  std::vector<std::string> want = {SampleHash("k", "s1"), SampleHash("k", "s3")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(h->train, want);
  EXPECT_EQ(h->validation, std::vector<std::string>{SampleHash("k", "s2")});
}

TEST(SampleHashesTest, MoreThanTheMaximumRecordsNone) {
  const std::vector<GnnExample> ex = {Example("zoo:a", "s1")};
  SplitSets sets;
  sets.train.assign(kMaxSampleHashes, 0);
  EXPECT_TRUE(RecordSampleHashes(ex, sets, "k").has_value());
  sets.val = {0};
  EXPECT_FALSE(RecordSampleHashes(ex, sets, "k").has_value());
}

TEST(SampleHashesTest, DisjointTestSetIsChecked) {
  const SampleHashes rec{.train = {SampleHash("k", "a"), SampleHash("k", "b")},
                         .validation = {SampleHash("k", "c")}};
  const std::vector<std::string> test = {SampleHash("k", "d"), SampleHash("k", "e")};
  absl::StatusOr<Disjointness> d = CheckDisjoint(rec, test);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->checked);
  EXPECT_EQ(d->test_samples, 2);
  EXPECT_EQ(d->recorded_samples, 3);
}

TEST(SampleHashesTest, OverlapIsRefusedWithItsCounts) {
  const SampleHashes rec{.train = {SampleHash("k", "a"), SampleHash("k", "b")},
                         .validation = {SampleHash("k", "c")}};
  const std::vector<std::string> test = {SampleHash("k", "a"), SampleHash("k", "c"),
                                         SampleHash("k", "d"), SampleHash("k", "e")};
  absl::StatusOr<Disjointness> d = CheckDisjoint(rec, test);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(),
              HasSubstr("trained on 2 of the 4 test samples (1 in its training set, 1 in its "
                        "validation set)"));
}

TEST(SampleHashesTest, NoRecordedHashesIsUnchecked) {
  const std::vector<std::string> test = {SampleHash("k", "a")};
  absl::StatusOr<Disjointness> d = CheckDisjoint(std::nullopt, test);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->checked);
  EXPECT_EQ(d->test_samples, 1);
}

TEST(SampleHashesTest, CheckpointMetadataRoundTripsTheHashes) {
  const CheckpointInfo info = InfoWithHashes();
  ASSERT_TRUE(ValidateCheckpointInfo(info).ok());
  absl::StatusOr<std::string> text = CheckpointInfoToJson(info);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["sample_hashes"]["scheme"], kSampleHashScheme);
  absl::StatusOr<CheckpointInfo> back = CheckpointInfoFromJson(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->sample_hashes.has_value());
  EXPECT_EQ(back->sample_hashes->train, info.sample_hashes->train);
  EXPECT_EQ(back->sample_hashes->validation, info.sample_hashes->validation);
  EXPECT_TRUE(ValidateCheckpointInfo(*back).ok());
}

TEST(SampleHashesTest, MetadataWithoutHashesReadsAsNone) {
  CheckpointInfo info = InfoWithHashes();
  info.sample_hashes.reset();
  absl::StatusOr<std::string> text = CheckpointInfoToJson(info);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_FALSE(nlohmann::json::parse(*text).contains("sample_hashes"));
  absl::StatusOr<CheckpointInfo> back = CheckpointInfoFromJson(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->sample_hashes.has_value());
}

// The metadata with its "sample_hashes" object changed by `edit`, read back.
absl::StatusOr<CheckpointInfo> ReadEdited(void (*edit)(nlohmann::json&)) {
  nlohmann::json j = nlohmann::json::parse(*CheckpointInfoToJson(InfoWithHashes()));
  edit(j["sample_hashes"]);
  return CheckpointInfoFromJson(j.dump());
}

TEST(SampleHashesTest, MalformedHashesAreRefused) {
  auto bad_hash = ReadEdited([](nlohmann::json& h) { h["train"][1] = "not-a-hash"; });
  EXPECT_EQ(bad_hash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_hash.status().message(),
              HasSubstr("\"train\" entry 1 is not 32 lowercase hex digits"));
  auto scheme = ReadEdited([](nlohmann::json& h) { h["scheme"] = "md5"; });
  EXPECT_EQ(scheme.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scheme.status().message(), HasSubstr("\"scheme\" is 'md5'"));
  auto missing = ReadEdited([](nlohmann::json& h) { h.erase("validation"); });
  EXPECT_THAT(missing.status().message(), HasSubstr("\"validation\" is missing"));
  auto not_object = ReadEdited([](nlohmann::json& h) { h = nlohmann::json::array(); });
  EXPECT_EQ(not_object.status().code(), absl::StatusCode::kInvalidArgument);
  auto too_many = ReadEdited([](nlohmann::json& h) {
    h["validation"] = std::vector<std::string>(kMaxSampleHashes + 1, SampleHash("k", "x"));
  });
  EXPECT_THAT(too_many.status().message(),
              HasSubstr(absl::StrCat("has ", kMaxSampleHashes + 1, " entries, above ",
                                     kMaxSampleHashes)));
}

TEST(SampleHashesTest, HashCountsMustMatchTheSampleCounts) {
  CheckpointInfo info = InfoWithHashes();
  info.train_samples = 3;
  absl::Status s = ValidateCheckpointInfo(info);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("2 training and 1 validation samples recorded, but the "
                                     "network was trained on 3 and validated on 1"));
}

}  // namespace
}  // namespace braid::costmodel::gnn
