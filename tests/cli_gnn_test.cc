// `braid gnn train` and `braid gnn eval` end to end on small sample
// databases: the checkpoint records its training and validation samples,
// eval scores a test set disjoint from them ("checked"), refuses one that
// shares samples with them, whichever database it comes from, and scores a
// checkpoint that records none with the disjointness "unchecked".
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "costmodel/cluster.h"
#include "costmodel/gnn/gnn_model.h"
#include "costmodel/gnn/sample_hashes.h"
#include "costmodel/gnn_store.h"
#include "costmodel/profile_store.h"
#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHoldout[] = "zoo:bert_large@sample";  // split b's default

struct CliRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CliRun Braid(const std::string& args) {
  const std::string err_file = ::testing::TempDir() + "/braid_cli_gnn_stderr.txt";
  const std::string cmd = std::string(BRAID_BIN) + " " + args + " 2>" + err_file;
  e2e::CommandResult c = e2e::RunCommand(cmd);
  CliRun r{c.exit_code, std::move(c.out), ""};
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

// The device kind of cpu-local, which the commands below use.
std::string DeviceKind() {
  absl::StatusOr<costmodel::ClusterSpec> c = costmodel::LoadCluster("cpu-local");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? c->device.kind : "";
}

// Fused MatMul+Relu group number `id`: its row count makes its signature
// its own.
std::string GroupText(int id) {
  const int m = 4 + id;
  return absl::StrCat("graph \"g", id, "\"\n", "tensor x f32[", m, ",16] input\n",
                      "tensor w f32[16,24] parameter\n", "tensor y f32[", m, ",24] activation\n",
                      "tensor z f32[", m, ",24] activation\n",
                      "op mm MatMul (x, w) -> (y)\nop relu Relu (y) -> (z)\noutput z\n");
}

// A profile database with group `id` drawn from `model` for each entry, its
// fused kernel measured.
void WriteSamples(const std::string& db, const std::vector<std::pair<std::string, int>>& samples) {
  std::filesystem::remove(db);
  const std::string kind = DeviceKind();
  auto store = costmodel::GnnStore::Open(db);
  auto profiles = costmodel::ProfileStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  for (const auto& [model, id] : samples) {
    absl::StatusOr<graph::Graph> g = graph::ParseText(GroupText(id));
    ASSERT_TRUE(g.ok()) << g.status();
    const std::vector<graph::OpId> all = {0, 1};
    const std::string sig = costmodel::FusedSignature(*g, all);
    ASSERT_TRUE((*store)->PutSample({kind, model, sig, graph::ToText(*g), 2}).ok());
    const double seconds = 2e-6 + 1e-9 * (4 + id) * 16 * 24;
    ASSERT_TRUE((*profiles)->Put({kind, costmodel::kFusedOp, sig}, {seconds, 1e-8, 5}).ok());
  }
}

std::vector<std::pair<std::string, int>> Range(const std::string& model, int begin, int end) {
  std::vector<std::pair<std::string, int>> out;
  for (int id = begin; id < end; ++id) out.emplace_back(model, id);
  return out;
}

std::vector<std::pair<std::string, int>> Concat(std::vector<std::pair<std::string, int>> a,
                                                const std::vector<std::pair<std::string, int>>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class CliGnnTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(e2e::TempDir("cli_gnn"));
    // Training: 140 groups of vgg19 (train and validation), 20 of the
    // held-out model (its test set).
    WriteSamples(Path("train.db"),
                 Concat(Range("zoo:vgg19@sample", 0, 140), Range(kHoldout, 140, 160)));
    // Other groups only: 100 of resnet50 (not scored under split b) and 20
    // of the held-out model.
    WriteSamples(Path("disjoint.db"),
                 Concat(Range("zoo:resnet50@sample", 200, 300), Range(kHoldout, 300, 320)));
    // The same, plus five of the training database's vgg19 groups drawn
    // from the held-out model: test samples the checkpoint was trained on.
    WriteSamples(Path("overlap.db"),
                 Concat(Concat(Range("zoo:resnet50@sample", 200, 300), Range(kHoldout, 300, 320)),
                        Range(kHoldout, 0, 5)));
    train_ = new CliRun(Braid(absl::StrCat(
        "gnn train --db ", Path("train.db"), " --split b --layers 1 --heads 1 --width 4 ",
        "--epochs 2 --patience 2 -o ", Path("gnn.pt"))));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete dir_;
  }
  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }
  static CliRun Eval(const std::string& checkpoint, const std::string& db, bool json) {
    return Braid(absl::StrCat("gnn eval --checkpoint ", Path(checkpoint), " --db ", Path(db),
                              json ? " --json" : ""));
  }

  static std::string* dir_;
  static CliRun* train_;
};

std::string* CliGnnTest::dir_ = nullptr;
CliRun* CliGnnTest::train_ = nullptr;

TEST_F(CliGnnTest, TrainRecordsItsSamples) {
  ASSERT_EQ(train_->exit_code, 0) << train_->err;
  EXPECT_THAT(train_->out, ::testing::ContainsRegex(
                               "sample hashes: [0-9]+ training and [0-9]+ validation samples "
                               "recorded"));
  absl::StatusOr<costmodel::gnn::LoadedCheckpoint> c =
      costmodel::gnn::LoadCheckpoint(Path("gnn.pt"), DeviceKind());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->info.sample_hashes.has_value());
  const costmodel::gnn::SampleHashes& h = *c->info.sample_hashes;
  // Every vgg19 group, none of the held-out model's.
  EXPECT_EQ(h.train.size() + h.validation.size(), 140u);
  EXPECT_GT(h.validation.size(), 0u);
  EXPECT_EQ(static_cast<int64_t>(h.train.size()), c->info.train_samples);
  absl::StatusOr<graph::Graph> g = graph::ParseText(GroupText(3));
  ASSERT_TRUE(g.ok());
  const std::string three =
      costmodel::gnn::SampleHash(DeviceKind(), costmodel::FusedSignature(*g, std::vector<graph::OpId>{0, 1}));
  const bool recorded = std::binary_search(h.train.begin(), h.train.end(), three) ||
                        std::binary_search(h.validation.begin(), h.validation.end(), three);
  EXPECT_TRUE(recorded);
}

TEST_F(CliGnnTest, EvalOnDisjointTestSamplesSaysChecked) {
  ASSERT_EQ(train_->exit_code, 0) << train_->err;
  for (const char* db : {"disjoint.db", "train.db"}) {
    CliRun r = Eval("gnn.pt", db, /*json=*/true);
    ASSERT_EQ(r.exit_code, 0) << db << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["disjointness"], "checked") << db;
    EXPECT_EQ(j["disjointness_compared"]["test_samples"], 20) << db;
    EXPECT_EQ(j["disjointness_compared"]["checkpoint_samples"], 140) << db;
    EXPECT_EQ(j["sets"]["all"]["gnn"]["n"], 20) << db;
    EXPECT_THAT(r.err, Not(HasSubstr("cannot check")));
  }
  CliRun text = Eval("gnn.pt", "disjoint.db", /*json=*/false);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("disjointness: checked: none of the 20 test samples is among the "
                                  "140 training and validation samples the checkpoint records"));
}

TEST_F(CliGnnTest, EvalRefusesTestSamplesTheCheckpointWasTrainedOn) {
  ASSERT_EQ(train_->exit_code, 0) << train_->err;
  for (bool json : {true, false}) {
    CliRun r = Eval("gnn.pt", "overlap.db", json);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, HasSubstr("the checkpoint was trained on 5 of the 25 test samples"));
    EXPECT_THAT(r.err, HasSubstr(Path("gnn.pt")));
    EXPECT_THAT(r.err, HasSubstr(Path("overlap.db")));
  }
}

TEST_F(CliGnnTest, ACheckpointWithoutSampleHashesIsScoredUnchecked) {
  ASSERT_EQ(train_->exit_code, 0) << train_->err;
  absl::StatusOr<costmodel::gnn::LoadedCheckpoint> c =
      costmodel::gnn::LoadCheckpoint(Path("gnn.pt"), DeviceKind());
  ASSERT_TRUE(c.ok()) << c.status();
  c->info.sample_hashes.reset();  // as braid wrote checkpoints before recording them
  ASSERT_TRUE(costmodel::gnn::SaveCheckpoint(Path("no_hashes.pt"), c->net, c->info).ok());
  const std::string line =
      "braid: cannot check that the test set is disjoint from the training set: the checkpoint "
      "records no training-sample hashes (retrain with braid gnn train to record them)\n";
  CliRun r = Eval("no_hashes.pt", "overlap.db", /*json=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(line));
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["disjointness"], "unchecked");
  EXPECT_FALSE(j.contains("disjointness_compared"));
  EXPECT_EQ(j["sets"]["all"]["gnn"]["n"], 25);
  CliRun text = Eval("no_hashes.pt", "overlap.db", /*json=*/false);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.err, HasSubstr(line));
  EXPECT_THAT(text.out, HasSubstr("disjointness: unchecked: the checkpoint records no "
                                  "training-sample hashes"));
}

}  // namespace
}  // namespace braid
