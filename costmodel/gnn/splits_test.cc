#include "costmodel/gnn/splits.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel::gnn {
namespace {

GnnExample Ex(std::string model, std::string sig) {
  GnnExample e;
  e.model = std::move(model);
  e.signature = std::move(sig);
  return e;
}

// 200 signatures per DisCo model, every tenth one shared by all six; 31
// from an ONNX model (one also drawn from vgg19) and one from a zoo model
// that is not DisCo's.
std::vector<GnnExample> Examples() {
  std::vector<GnnExample> ex;
  for (size_t m = 0; m < kDiscoSampleModels.size(); ++m) {
    for (int i = 0; i < 200; ++i) {
      const bool shared = i % 10 == 0;
      ex.push_back(Ex(std::string(kDiscoSampleModels[m]),
                      shared ? "shared" + std::to_string(i) : "m" + std::to_string(m) + "/" + std::to_string(i)));
    }
  }
  for (int i = 0; i < 30; ++i) ex.push_back(Ex("tests/data/x.onnx", "onnx" + std::to_string(i)));
  ex.push_back(Ex("tests/data/x.onnx", "m0/5"));  // also drawn from vgg19
  ex.push_back(Ex("zoo:mlp@sample", "mlp0"));
  return ex;
}

std::set<std::string> Sigs(const std::vector<GnnExample>& ex, const std::vector<int>& idx) {
  std::set<std::string> s;
  for (int i : idx) s.insert(ex[i].signature);
  return s;
}

TEST(SplitsTest, ParseAndNames) {
  EXPECT_EQ(*ParseSplit("a"), Split::kA);
  EXPECT_EQ(*ParseSplit("all"), Split::kAll);
  EXPECT_EQ(SplitName(Split::kB), "b");
  EXPECT_EQ(ParseSplit("c").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsOnnxModel("models/bert.onnx"));
  EXPECT_FALSE(IsOnnxModel("zoo:bert_large@sample"));
}

TEST(SplitsTest, SplitAIsBySignatureHashOverTheDiscoModels) {
  std::vector<GnnExample> ex = Examples();
  SplitSets s = SplitExamples(ex, Split::kA);
  const std::set<std::string> train = Sigs(ex, s.train), val = Sigs(ex, s.val), test = Sigs(ex, s.test);
  EXPECT_EQ(train.size(), s.train.size());  // each signature once
  EXPECT_EQ(train.size() + val.size() + test.size(), 6u * 180 + 20);  // distinct DisCo signatures
  for (const std::string& t : test) {
    EXPECT_EQ(SignatureHash(t) % 10, 9u);
    EXPECT_FALSE(train.contains(t));
    EXPECT_FALSE(val.contains(t));
  }
  for (const std::string& v : val) EXPECT_EQ(SignatureHash(v) % 10, 8u);
  for (int i : s.train) EXPECT_NE(ex[i].model, "tests/data/x.onnx");
  // Roughly 80/10/10.
  EXPECT_GT(s.train.size(), 800u);
  EXPECT_GT(s.test.size(), 80u);
  EXPECT_LT(s.test.size(), 170u);
  // Deterministic.
  SplitSets again = SplitExamples(ex, Split::kA);
  EXPECT_EQ(again.train, s.train);
  EXPECT_EQ(again.test, s.test);
}

TEST(SplitsTest, SplitBHoldsOutAModelAndOnnxFiles) {
  std::vector<GnnExample> ex = Examples();
  SplitSets s = SplitExamples(ex, Split::kB, "zoo:transformer@sample");
  const std::set<std::string> test = Sigs(ex, s.test);
  EXPECT_EQ(s.test_holdout.size(), 200u);
  EXPECT_EQ(s.test_onnx.size(), 31u);
  EXPECT_EQ(s.test.size(), 231u);
  for (int i : s.test_holdout) EXPECT_EQ(ex[i].model, "zoo:transformer@sample");
  for (int i : s.test_onnx) EXPECT_EQ(ex[i].model, "tests/data/x.onnx");
  for (const std::vector<int>* part : {&s.train, &s.val}) {
    for (int i : *part) {
      EXPECT_NE(ex[i].model, "zoo:transformer@sample");
      EXPECT_NE(ex[i].model, "tests/data/x.onnx");
      EXPECT_NE(ex[i].model, "zoo:mlp@sample");
      EXPECT_FALSE(test.contains(ex[i].signature)) << ex[i].signature;
    }
  }
  // vgg19's m0/5 is in the ONNX test part, so not in training.
  EXPECT_FALSE(Sigs(ex, s.train).contains("m0/5"));
  // Signatures the holdout shares with the training models are out too.
  EXPECT_FALSE(Sigs(ex, s.train).contains("shared10"));
  EXPECT_FALSE(Sigs(ex, s.val).contains("shared10"));
  EXPECT_GT(s.train.size(), 5u * 180 * 8 / 10);
}

TEST(SplitsTest, SplitAllTrainsOnEverythingButSplitATest) {
  std::vector<GnnExample> ex = Examples();
  SplitSets all = SplitExamples(ex, Split::kAll);
  SplitSets a = SplitExamples(ex, Split::kA);
  const std::set<std::string> train = Sigs(ex, all.train);
  for (const std::string& t : Sigs(ex, a.test)) EXPECT_FALSE(train.contains(t));
  EXPECT_TRUE(train.contains("mlp0") || Sigs(ex, all.val).contains("mlp0") ||
              Sigs(ex, all.test).contains("mlp0"));
  EXPECT_EQ(train.size() + all.val.size() + all.test.size(), 6u * 180 + 20 + 30 + 1);
}

}  // namespace
}  // namespace braid::costmodel::gnn
