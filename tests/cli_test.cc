// End-to-end tests of the `braid` command line: exit codes, one-line errors on
// bad input, and JSON outputs with the documented keys.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;

struct CliRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CliRun Braid(const std::string& args) {
  const std::string err_file = ::testing::TempDir() + "/braid_cli_stderr.txt";
  const std::string cmd = std::string(BRAID_BIN) + " " + args + " 2>" + err_file;
  CliRun r{};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliTest, MissingFileIsExitCodeTwoWithOneLine) {
  CliRun r = Braid("graph stats /nonexistent/model.onnx");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model.onnx: no such file"));
}

TEST(CliTest, CorruptOnnxIsExitCodeTwoNamingTheFile) {
  const std::string path = ::testing::TempDir() + "/corrupt.onnx";
  std::ofstream(path) << "this is not a protobuf \x01\x02\x03";
  CliRun r = Braid("graph stats " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path));
}

TEST(CliTest, CyclicTextGraphIsRejected) {
  const std::string path = ::testing::TempDir() + "/cycle.braid";
  std::ofstream(path) << "graph \"c\"\ntensor a f32[1] activation\ntensor b f32[1] activation\n"
                         "op f Relu (a) -> (b)\nop g Relu (b) -> (a)\n";
  CliRun r = Braid("graph stats " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cycle"));
}

TEST(CliTest, UnknownZooModelListsKnownOnes) {
  CliRun r = Braid("graph stats zoo:nosuchmodel");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("resnet50"));
}

TEST(CliTest, StatsJsonHasDocumentedKeys) {
  CliRun r = Braid("graph stats zoo:bert_large --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"ops", "op_types", "parameters", "gradients", "gradient_bytes", "forward_flops"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // BERT-Large: 335 M parameters within 2%.
  EXPECT_NEAR(j["parameters"].get<double>(), 335e6, 0.02 * 335e6);
  EXPECT_EQ(j["gradient_bytes"].get<int64_t>(), 4 * j["parameters"].get<int64_t>());
}

TEST(CliTest, ResNet50OnnxStats) {
  CliRun r = Braid("graph stats tests/data/resnet50_opset17.onnx --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["op_types"]["Conv"].get<int>(), 53);
  EXPECT_NEAR(j["parameters"].get<double>(), 25.6e6, 0.01 * 25.6e6);
}

TEST(CliTest, ExportTrainingGraphJson) {
  CliRun r = Braid("graph export zoo:mlp --training --ranks 4 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  int allreduce = 0, params = 0;
  for (const auto& op : j["ops"]) {
    allreduce += op["type"] == "AllReduce";
    EXPECT_TRUE(op.contains("flops"));
    EXPECT_TRUE(op.contains("bytes_read"));
  }
  for (const auto& t : j["tensors"]) params += t["role"] == "parameter";
  EXPECT_GT(params, 0);
  EXPECT_EQ(allreduce, params);
}

TEST(CliTest, BadFlagValueIsExitCodeTwo) {
  CliRun r = Braid("graph export zoo:mlp --format yaml");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
