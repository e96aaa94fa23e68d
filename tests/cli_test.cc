// End-to-end tests of the `braid` command line: exit codes, one-line errors on
// bad input, JSON outputs with the documented keys, and the service commands'
// tables (submit, status, plan get --summary) with measured feedback.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/service_session.h"
#include "graph/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CliRun Braid(const std::string& args, const std::string& env = "") {
  const std::string err_file = ::testing::TempDir() + "/braid_cli_stderr.txt";
  const std::string cmd = env + " " + std::string(BRAID_BIN) + " " + args + " 2>" + err_file;
  braid::e2e::CommandResult c = braid::e2e::RunCommand(cmd);
  CliRun r{c.exit_code, std::move(c.out), ""};
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

// `braid` starts without LibTorch or CUDA; the commands that need
// them run in braid-torch, which `braid` execs on the same arguments.
TEST(CliTest, BraidLinksNoLibTorchOrCuda) {
  CliRun r{};
  FILE* p = popen((std::string("ldd ") + BRAID_BIN).c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  ASSERT_EQ(pclose(p), 0);
  EXPECT_THAT(r.out, HasSubstr("libgrpc++"));  // ldd listed the libraries
  for (const char* lib : {"libtorch", "libc10", "libcuda", "libcudnn", "libcublas", "libnccl",
                          "libgloo"}) {
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr(lib))) << lib;
  }
}

TEST(CliTest, HelpListsTheLibTorchCommandsAndTheirOptions) {
  CliRun help = Braid("--help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const char* cmd : {"graph", "plan", "profile", "run", "submit", "status", "workers"}) {
    EXPECT_THAT(help.out, HasSubstr(std::string("\n  ") + cmd + " ")) << cmd;
  }
  // braid-torch answers `braid profile --help` with the real options.
  CliRun profile = Braid("profile --help");
  ASSERT_EQ(profile.exit_code, 0) << profile.err;
  EXPECT_THAT(profile.out, HasSubstr("--device"));
  EXPECT_THAT(profile.out, HasSubstr("comm-fit"));
  CliRun service = Braid("bench service --help");
  ASSERT_EQ(service.exit_code, 0) << service.err;
  EXPECT_THAT(service.out, HasSubstr("--calls"));
  // ... and rejects a bad flag of a LibTorch command as `braid` always did.
  EXPECT_EQ(Braid("run zoo:mlp --ranks 1").exit_code, 2);
}

TEST(CliTest, MissingBraidTorchIsOneLineNamingIt) {
  CliRun r = Braid("profile comm --help", "BRAID_TORCH_BIN=/nonexistent/braid-torch");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/braid-torch"));
  // The commands of `braid` itself do not need it.
  EXPECT_EQ(Braid("graph stats zoo:mlp", "BRAID_TORCH_BIN=/nonexistent/braid-torch").exit_code, 0);
}

// BRAID_PARSE_ONLY=1 (base/command_line.h): the command line is parsed as
// always and nothing runs -- no output, no plan file, no profile store. The
// check of BENCHMARKS.md's commands (tests/benchmarks_commands_test.py)
// rests on it.
TEST(CliTest, ParseOnlyParsesAndRunsNothing) {
  const std::string dir = ::testing::TempDir() + "/parse_only";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string env = "BRAID_PARSE_ONLY=1 BRAID_DB=" + dir + "/braid.db BRAID_SERVICE_DB=" +
                          dir + "/service.db";
  // Accepted: exit 0 having done nothing.
  const std::vector<std::string> accepted = {
      "plan zoo:mlp --cluster cpu-local",
      "plan zoo:mlp --cluster cpu-local --ranks 2 --json -o " + dir + "/plan.json",
      "simulate zoo:mlp --cluster cpu-local --trace " + dir + "/trace.json",
      "submit zoo:mlp --cluster cpu-local", "bench import --reps 10",
      // A command of braid-torch: `braid` hands it over, braid-torch parses.
      "run zoo:mlp --ranks 2 --iters 3"};
  for (const std::string& args : accepted) {
    CliRun r = Braid(args, env);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err, "") << args;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "parse-only wrote a file";
  // Refused as without it: exit 2, whether braid or braid-torch parses.
  for (const char* args :
       {"plan --bogus-flag", "plan zoo:mlp --cluster cpu-local --bogus-flag", "plan",
        "nosuchcommand", "graph export zoo:mlp --format yaml",
        "run zoo:mlp --ranks 2 --bogus-flag"}) {
    CliRun r = Braid(args, env);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.err, "") << args;
  }
  // A hand-over that cannot start braid-torch fails in parse-only mode too.
  EXPECT_EQ(Braid("profile comm --ranks 2", env + " BRAID_TORCH_BIN=/nonexistent/braid-torch")
                .exit_code,
            1);
  // Without the variable (or with 0) the same command runs.
  CliRun ran = Braid("graph stats zoo:mlp", "BRAID_PARSE_ONLY=0");
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_THAT(ran.out, HasSubstr("parameters"));
}

// A build of the target `braid` alone leaves braid-torch out: `braid` in a
// build tree says so and names the target that builds it.
TEST(CliTest, BraidTorchMissingFromABuildTreeNamesItsTarget) {
  const std::string build = braid::e2e::TempDir("cli_build_tree") + "/build";
  std::filesystem::create_directories(build + "/bin");
  std::ofstream(build + "/CMakeCache.txt") << "# a build tree\n";
  std::filesystem::copy_file(BRAID_BIN, build + "/bin/braid",
                             std::filesystem::copy_options::overwrite_existing);
  braid::e2e::CommandResult c = braid::e2e::RunCommand(
      "cd " + build + "/.. && BRAID_TORCH_BIN= build/bin/braid profile comm --help 2>&1");
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_EQ(Lines(c.out), 1) << c.out;
  EXPECT_THAT(c.out, HasSubstr("braid-torch is not built: cmake --build build --target braid-torch"));
}

// An embedded submit on a GPU cluster without a trained fused-op estimator
// for its device kind runs in `braid` itself: the CPU worker could not
// measure its kernels, so braid-torch is not needed, and the plan says its
// costs are simulated from priors.
TEST(CliTest, EmbeddedSubmitOnAGpuClusterNeedsNoBraidTorch) {
  const std::string dir = braid::e2e::TempDir("cli_gpu_submit");
  const std::string env = "BRAID_SERVER= BRAID_TORCH_BIN=/nonexistent/braid-torch BRAID_DB=" + dir +
                          "/profiles.db BRAID_SERVICE_DB=" + dir + "/service.db";
  CliRun sub = Braid("submit zoo:mlp --cluster disco-a --ranks 2 --seed 3 --budget-s 5", env);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_THAT(sub.out, HasSubstr("simulated, from priors"));
  EXPECT_THAT(sub.out, HasSubstr("cost sources"));
  // A CPU cluster's submit is braid-torch's (its worker measures this CPU).
  CliRun cpu = Braid("submit zoo:mlp --cluster cpu-local --ranks 2 --budget-s 5", env);
  EXPECT_EQ(cpu.exit_code, 1);
  EXPECT_THAT(cpu.err, HasSubstr("/nonexistent/braid-torch"));
}

// The fused-op estimator the repository ships: `braid plan` (handed to
// braid-torch, which links the GNN) costs unmeasured fused kernels with it
// and reports its share; a checkpoint of another device kind is refused and
// the plan falls back to the corrected roofline. The CPU kind is pinned so
// the test does not depend on the machine's CPU.
TEST(CliTest, PlanUsesTheShippedGnnEstimatorForItsDeviceKindOnly) {
  const std::string ckpt = std::string(BRAID_SOURCE_DIR) +
                           "/costmodel/gnn/checkpoints/cpu-1t-x86-64-avx512-amd-epyc.pt";
  const std::string db = ::testing::TempDir() + "/cli_gnn_plan.db";
  std::remove(db.c_str());
  const std::string args = "plan tests/data/mlp8x1024_opset14.onnx --cluster cpu-local --ranks 2 "
                           "--budget-s 3 --seed 1 --json --db " + db;
  CliRun with = Braid(args, "BRAID_GNN_CHECKPOINT=" + ckpt +
                                " BRAID_CPU_DEVICE_KIND='cpu-1t:x86_64-avx512:AMD EPYC'");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  nlohmann::json j = nlohmann::json::parse(with.out);
  EXPECT_THAT(j["fused_estimator"].get<std::string>(), ::testing::StartsWith("gnn-"));
  EXPECT_GT(j["cost_sources"]["braid"]["gnn"].get<double>(), 0) << j["cost_sources"].dump();
  EXPECT_GT(j["cost_sources"]["braid"]["kernels"]["gnn"].get<int>(), 0);
  EXPECT_GT(j["cost_sources"]["xla_op_fusion"]["gnn"].get<double>(), 0);  // baselines too

  CliRun other = Braid(args, "BRAID_GNN_CHECKPOINT=" + ckpt + " BRAID_CPU_DEVICE_KIND=cpu-1t:other");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  nlohmann::json o = nlohmann::json::parse(other.out);
  EXPECT_EQ(o["fused_estimator"], "none");
  EXPECT_EQ(o["cost_sources"]["braid"]["gnn"].get<double>(), 0);
  EXPECT_THAT(other.err, HasSubstr("was trained for device kind"));

  // --estimator none: the corrected roofline even where the GNN applies.
  CliRun none = Braid(args + " --estimator none", "BRAID_GNN_CHECKPOINT=" + ckpt +
                          " BRAID_CPU_DEVICE_KIND='cpu-1t:x86_64-avx512:AMD EPYC'");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out)["fused_estimator"], "none");
}

// `braid plan --op-fusion off`: buckets only, baselines that fuse ops left
// out; `-o` writes what the activator and braid.torch need, signed when a
// plan secret is set, and `braid plan sign` signs an unsigned file alike.
TEST(CliTest, PlanOpFusionOffWritesASignedBucketsOnlyPlan) {
  const std::string out = ::testing::TempDir() + "/cli_buckets_plan.json";
  const std::string secret = "BRAID_PLAN_SECRET=cli-test-plan-secret-0123";
  std::remove((out + ".hmac").c_str());
  CliRun r = Braid("plan tests/data/mlp8x1024_opset14.onnx --cluster cpu-local --ranks 2 --db none "
                   "--budget-s 3 --json --op-fusion off -o " + out, secret);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["iteration_ms"].contains("ddp"));
  EXPECT_FALSE(j["iteration_ms"].contains("xla_op_fusion"));
  EXPECT_FALSE(j["iteration_ms"].contains("jax_default"));
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json plan = nlohmann::json::parse(text.str());
  EXPECT_TRUE(plan["groups"].empty());
  EXPECT_EQ(plan["format"], "braid.plan.v1");
  EXPECT_EQ(plan["graph_fingerprint"].get<std::string>().size(), 16u);
  EXPECT_FALSE(plan["ddp_buckets"].empty());
  std::ifstream tag_in(out + ".hmac");
  std::string tag;
  tag_in >> tag;
  EXPECT_EQ(tag.size(), 64u);
  // The same tag from `braid plan sign`; another secret gives another.
  CliRun sign = Braid("plan sign " + out, secret);
  ASSERT_EQ(sign.exit_code, 0) << sign.err;
  EXPECT_THAT(sign.out, ::testing::StartsWith(tag));
  CliRun other = Braid("plan sign " + out, "BRAID_PLAN_SECRET=another-plan-secret-4567");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_THAT(other.out, ::testing::Not(::testing::StartsWith(tag)));
  CliRun none = Braid("plan sign " + out, "BRAID_PLAN_SECRET=");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_THAT(none.err, HasSubstr("no plan secret"));
}

// `braid plan --parallel`: the strategy table with the data-parallel
// baseline and braid's parallelization, every row fused on its per-device
// graph; the plan file carries the per-op configs.
TEST(CliTest, PlanParallelWritesPerOpConfigsAndTheTable) {
  const std::string out = ::testing::TempDir() + "/cli_parallel_plan.json";
  CliRun r = Braid("plan zoo:mlp --parallel --cluster dgx-h100 --ranks 8 --db none --budget-s 4 "
                   "--json -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const nlohmann::json& row : j["strategies"]) names.push_back(row["strategy"]);
  EXPECT_THAT(names, ::testing::Contains("data_parallel"));
  EXPECT_THAT(names, ::testing::Contains("braid"));
  EXPECT_THAT(names, ::testing::Contains("pipeline:2"));
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json plan = nlohmann::json::parse(text.str());
  EXPECT_EQ(plan["format"], "braid.plan.v1");
  ASSERT_TRUE(plan.contains("parallel"));
  EXPECT_EQ(plan["parallel"]["strategy"], j["chosen"]);
  EXPECT_GT(plan["predicted_iteration_s"].get<double>(), 0);
  // The text table names every strategy and the chosen one.
  CliRun t = Braid("plan zoo:mlp --parallel --cluster dgx-h100 --ranks 8 --db none --budget-s 4");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("data_parallel"));
  EXPECT_THAT(t.out, HasSubstr("chosen"));
}

// `braid plan --parallel --strategy ROW`: the plan file is that row's, the
// table still lists every row with the requested one marked.
TEST(CliTest, PlanParallelStrategyWritesTheRequestedRow) {
  const std::string common =
      "plan zoo:mlp --parallel --cluster cpu-local --ranks 2 --db none --budget-s 2 --no-pipeline ";
  for (const std::string row : {"data_parallel", "expert:megatron", "braid"}) {
    const std::string out = ::testing::TempDir() + "/cli_strategy_row.json";
    std::filesystem::remove(out);
    CliRun r = Braid(common + "--strategy " + row + " --json -o " + out);
    ASSERT_EQ(r.exit_code, 0) << row << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["chosen"], row);
    EXPECT_EQ(j["chosen_by"], "request");
    EXPECT_GE(j["strategies"].size(), 3u) << r.out;
    EXPECT_EQ(j["plan"]["parallel"]["strategy"], row);
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json file = nlohmann::json::parse(text.str());
    EXPECT_EQ(file["parallel"]["strategy"], row);
    if (row == "data_parallel") EXPECT_EQ(file["parallel"]["model_degree"], 1);
    if (row == "expert:megatron") EXPECT_EQ(file["parallel"]["model_degree"], 2);
  }
  CliRun t = Braid(common + "--strategy data_parallel");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, ContainsRegex("\ndata_parallel [^\n]*chosen [(]--strategy[)]"));
  EXPECT_THAT(t.out, HasSubstr("chosen               data_parallel (--strategy)"));
}

TEST(CliTest, PlanParallelStrategyErrorsNameTheRows) {
  const std::string common =
      "plan zoo:mlp --parallel --cluster cpu-local --ranks 2 --db none --budget-s 2 ";
  // A name of no row: refused before the search, with the row forms.
  CliRun bogus = Braid(common + "--strategy tensor");
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_THAT(bogus.err, HasSubstr("--strategy: unknown strategy row 'tensor'"));
  EXPECT_THAT(bogus.err, HasSubstr("expert:megatron"));
  // A row this model's table lacks (no embedding tables): the rows it has.
  CliRun dlrm = Braid(common + "--strategy expert:dlrm");
  EXPECT_EQ(dlrm.exit_code, 2);
  EXPECT_EQ(Lines(dlrm.err), 1) << dlrm.err;
  EXPECT_THAT(dlrm.err, HasSubstr("strategy row 'expert:dlrm' is not in the table of mlp"));
  EXPECT_THAT(dlrm.err, HasSubstr("its rows: data_parallel, expert:megatron"));
  // Without --parallel, and a pipeline row without pipelines.
  CliRun plain = Braid("plan zoo:mlp --db none --strategy braid");
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_THAT(plain.err, HasSubstr("add --parallel"));
  CliRun both = Braid(common + "--strategy pipeline:2 --no-pipeline");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("--no-pipeline leaves those out"));
}

// --no-pipeline: the table has no pipeline rows, so none is chosen.
TEST(CliTest, PlanParallelNoPipelineLeavesPipelineRowsOut) {
  const std::string common =
      "plan zoo:mlp --parallel --cluster cpu-local --ranks 2 --db none --budget-s 2 --json ";
  auto names = [](const nlohmann::json& j) {
    std::vector<std::string> n;
    for (const nlohmann::json& row : j["strategies"]) n.push_back(row["strategy"]);
    return n;
  };
  CliRun with = Braid(common);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  EXPECT_THAT(names(nlohmann::json::parse(with.out)), ::testing::Contains("pipeline:2"));
  CliRun without = Braid(common + "--no-pipeline");
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const nlohmann::json j = nlohmann::json::parse(without.out);
  for (const std::string& n : names(j)) EXPECT_THAT(n, Not(::testing::StartsWith("pipeline")));
  EXPECT_THAT(j["chosen"].get<std::string>(), Not(::testing::StartsWith("pipeline")));
  EXPECT_FALSE(j["plan"]["parallel"].contains("stage_plan"));
}

// `braid run` refuses a pipeline plan by its row, naming the way out; the
// model is not even loaded.
TEST(CliTest, RunRefusesAPipelinePlan) {
  const std::string out = ::testing::TempDir() + "/cli_pipeline_plan.json";
  CliRun plan = Braid("plan zoo:mlp --parallel --cluster cpu-local --ranks 2 --db none "
                      "--budget-s 2 --strategy pipeline:2 -o " + out);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("chosen               pipeline:2 (--strategy)"));
  CliRun run = Braid("run zoo:mlp --plan " + out + " --ranks 2 --rounds 1 --iters 1 --warmup 0");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(Lines(run.err), 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("plan row 'pipeline:2' is a pipeline plan; braid run executes "
                                 "data- and tensor-parallel plans only"));
  EXPECT_THAT(run.err, HasSubstr("--strategy ROW or --no-pipeline"));
}

// `braid run --check`: the plan's per-device program trained on the ranks
// against a world-1 run of the same model; a plan whose program was altered,
// or run on the wrong rank count, is refused.
TEST(CliTest, RunCheckTrainsThePlansProgramAgainstWorldOne) {
  const std::string model = std::string(BRAID_SOURCE_DIR) + "/tests/data/mlp_with_initializers.onnx";
  const std::string out = ::testing::TempDir() + "/cli_check_plan.json";
  std::filesystem::remove(out);
  CliRun plan = Braid("plan " + model + " --parallel --cluster cpu-local --ranks 2 --db none "
                      "--budget-s 5 --no-pipeline -o " + out);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  nlohmann::json file;
  {
    std::ifstream in(out);
    file = nlohmann::json::parse(in);
  }
  ASSERT_TRUE(file.contains("program")) << file.value("program_error", std::string("?"));
  EXPECT_EQ(file["program"]["format"], "braid-program/1");
  CliRun run = Braid("run " + model + " --plan " + out + " --ranks 2 --check --steps 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["numerics"]["reference"], "world-1");
  EXPECT_EQ(j["numerics"]["steps"], 2);
  EXPECT_TRUE(j["numerics"]["ok"].get<bool>()) << run.out;
  EXPECT_LE(j["numerics"]["max_rel_error"].get<double>(), 1e-4);
  EXPECT_EQ(j["losses"].size(), 2u);
  // The wrong rank count, and a program altered after planning.
  CliRun four = Braid("run " + model + " --plan " + out + " --ranks 4 --check --steps 1");
  EXPECT_NE(four.exit_code, 0);
  EXPECT_THAT(four.err, HasSubstr("pass --ranks 2"));
  file["program"]["seed"] = 99;
  std::ofstream(out, std::ios::trunc) << file.dump();
  CliRun forged = Braid("run " + model + " --plan " + out + " --ranks 2 --check --steps 1");
  EXPECT_NE(forged.exit_code, 0);
  EXPECT_THAT(forged.err, HasSubstr("program_fingerprint does not match"));
}

// `braid plan get JOB -o FILE` of a parallel job on the embedded service:
// the plan file `braid plan MODEL --parallel -o` writes, its "program" the
// chosen row's per-device program, which `braid run --check` trains against
// world 1; `plan get --summary` shows the program's row, mesh and
// fingerprints.
TEST(CliTest, PlanGetWritesTheServicePlansProgramToAPlanFile) {
  const std::string dir = braid::e2e::TempDir("cli_plan_get_program");
  const std::string env = "BRAID_SERVER= BRAID_DB=" + dir + "/profiles.db BRAID_SERVICE_DB=" +
                          dir + "/service.db";
  const std::string model = std::string(BRAID_SOURCE_DIR) + "/tests/data/mlp_with_initializers.onnx";
  CliRun sub = Braid("submit " + model + " --cluster cpu-local --ranks 2 --parallel "
                     "--strategy expert:megatron --budget-s 5 --no-worker",
                     env);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_THAT(sub.out, ContainsRegex("\nprogram +row expert:megatron on mesh 2, model "
                                     "[0-9a-f]{16}, program [0-9a-f]{64}\n"));
  CliRun jobs = Braid("jobs --json", env);
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  const std::string id = nlohmann::json::parse(jobs.out)["jobs"][0]["job_id"];
  const std::string out = dir + "/plan.json";
  CliRun get = Braid("plan get " + id + " -o " + out, env);
  ASSERT_EQ(get.exit_code, 0) << get.err;
  nlohmann::json file;
  {
    std::ifstream in(out);
    file = nlohmann::json::parse(in);
  }
  ASSERT_TRUE(file.contains("program")) << file.value("program_error", std::string("?"));
  absl::StatusOr<braid::graph::Program> program = braid::graph::ProgramFromJson(file["program"]);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->row, "expert:megatron");
  EXPECT_EQ(program->World(), 2);
  EXPECT_EQ(file["parallel"]["strategy"], "expert:megatron");
  EXPECT_GT(file["parallel"]["memory_per_device_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(file["format"], "braid.plan.v1");
  // The JSON output carries the same program, header and text.
  const nlohmann::json j = nlohmann::json::parse(get.out);
  const nlohmann::json& dp = j["plan"]["parallel"]["program"];
  EXPECT_EQ(dp["program_fingerprint"], program->program_fingerprint);
  EXPECT_EQ(dp["model_fingerprint"], program->model_fingerprint);
  EXPECT_EQ(nlohmann::json::parse(dp["json"].get<std::string>()), file["program"]);
  CliRun run = Braid("run " + model + " --plan " + out + " --ranks 2 --check --steps 1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const nlohmann::json checked = nlohmann::json::parse(run.out);
  EXPECT_EQ(checked["program_fingerprint"], program->program_fingerprint);
  EXPECT_TRUE(checked["numerics"]["ok"].get<bool>()) << run.out;
}

// `braid gnn sample`: draws fused ops, has a CPU worker measure them, and a
// second run resumes (nothing new drawn, nothing left to measure). A GPU
// cluster is refused: this command measures with the CPU worker.
TEST(CliTest, GnnSampleMeasuresAndResumes) {
  const std::string db = ::testing::TempDir() + "/cli_gnn_sample.db";
  for (const char* ext : {"", "-wal", "-shm", ".gnn-tasks", ".gnn-tasks-wal", ".gnn-tasks-shm"}) {
    std::remove((db + ext).c_str());
  }
  const std::string args = "gnn sample --models zoo:mlp@sample --batches 1 --per-model 5 --db " + db;
  CliRun first = Braid(args + " --noise-kernels 1 --noise-runs 1");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("fused-op samples measured"));
  EXPECT_THAT(first.out, HasSubstr("(0 not measured)"));
  EXPECT_THAT(first.out, HasSubstr("noise floor"));
  EXPECT_THAT(first.err, ::testing::Not(HasSubstr(" (0 new)")));
  CliRun again = Braid(args + " --noise-kernels 0");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr(" (0 new)"));
  EXPECT_THAT(again.err, HasSubstr("braid: 0 profiling tasks queued"));

  CliRun gpu = Braid("gnn sample --models zoo:mlp@sample --cluster disco-a --db " + db);
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_THAT(gpu.err, HasSubstr("is not this machine's CPU"));
}

// The service commands on the embedded service: `braid submit`'s braid row
// has its compute, comm and overlap figures; after the training ranks report
// the plan measured slower than the DDP baseline (ServiceApi
// ReportMeasurement), `braid status` shows predicted vs measured and the
// rollback, and `braid plan get --summary` a rollback line and, once the
// baseline itself was measured, the calibrated prediction.
TEST(CliTest, ServiceTablesShowBraidFiguresMeasurementsAndRollback) {
  const std::string dir = braid::e2e::TempDir("cli_feedback");
  const std::string env = "BRAID_SERVER= BRAID_DB=" + dir + "/profiles.db BRAID_SERVICE_DB=" +
                          dir + "/service.db";
  const std::string cred_file = dir + "/credential";
  CliRun sub = Braid("submit zoo:mlp --cluster cpu-local --ranks 2 --seed 11 --patience 4 "
                     "--budget-s 20 --no-worker --credential-out " + cred_file,
                     env);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  std::string credential;
  {
    std::ifstream in(cred_file);
    in >> credential;
  }
  ASSERT_EQ(credential.size(), 64u);
  EXPECT_EQ(std::filesystem::status(cred_file).permissions() & std::filesystem::perms::group_read,
            std::filesystem::perms::none);
  // strategy, iteration, compute, comm and overlap: no "-" for a new plan.
  EXPECT_THAT(sub.out, ContainsRegex("\nbraid +[0-9]+\\.[0-9]+ +[0-9]+\\.[0-9]+ +[0-9]+\\.[0-9]+ "
                                     "+[0-9]+\\.[0-9]+\n"));
  CliRun jobs = Braid("jobs --json", env);
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  const std::string id = nlohmann::json::parse(jobs.out)["jobs"][0]["job_id"];
  CliRun before = Braid("status " + id, env);
  EXPECT_THAT(before.out, Not(HasSubstr("measured")));

  braid::client::ServiceArgs args;
  args.service_db = dir + "/service.db";
  args.profile_db = dir + "/profiles.db";
  std::string baseline_digest;
  {
    absl::StatusOr<std::unique_ptr<braid::client::ServiceApi>> api = braid::client::OpenService(args);
    ASSERT_TRUE(api.ok()) << api.status();
    absl::StatusOr<braid::v1::GetPlanResponse> plan = (*api)->GetPlan(id);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_NE(plan->origin(), "baseline:ddp");
    braid::v1::ReportMeasurementResponse last;
    braid::v1::StartRunRequest run;
    run.set_job_id(id);
    run.set_report_credential(credential);
    run.set_world_size(2);
    absl::StatusOr<braid::v1::StartRunResponse> started = (*api)->StartRun(run);
    ASSERT_TRUE(started.ok()) << started.status();
    for (int rank = 0; rank < 2; ++rank) {
      braid::v1::ReportMeasurementRequest r;
      r.set_report_credential(credential);
      r.set_attempt_id(started->attempt_id());
      r.set_job_id(id);
      r.set_rank(rank);
      r.set_world_size(2);
      r.set_plan_sha256(plan->plan_sha256());
      r.set_source("braid.torch");
      for (int i = 0; i < 8; ++i) {
        r.add_plan_iteration_s(12e-3 + 1e-4 * ((i + rank) % 3));
        r.add_baseline_iteration_s(10e-3 + 1e-4 * (i % 2));
      }
      absl::StatusOr<braid::v1::ReportMeasurementResponse> rep = (*api)->ReportMeasurement(r);
      ASSERT_TRUE(rep.ok()) << rep.status();
      last = *rep;
    }
    ASSERT_TRUE(last.rolled_back());
    absl::StatusOr<braid::v1::GetPlanResponse> rolled = (*api)->GetPlan(id);
    ASSERT_TRUE(rolled.ok()) << rolled.status();
    EXPECT_EQ(rolled->calibration(), 0);  // the rolled-back plan is no sample
    baseline_digest = rolled->plan_sha256();
  }
  CliRun status = Braid("status " + id, env);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, ContainsRegex("\npredicted   [0-9]+\\.[0-9]{3} ms\n"));
  EXPECT_THAT(status.out, HasSubstr("\nmeasured    12.200 ms ("));
  EXPECT_THAT(status.out, HasSubstr("\nbaseline    10.050 ms (DDP buckets, measured)\n"));
  EXPECT_THAT(status.out, HasSubstr("\nrolled back yes: measured 12.20 ms vs ddp 10.05 ms on 2 "
                                    "ranks: slower by "));
  CliRun summary = Braid("plan get " + id + " --summary", env);
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_THAT(summary.out, ContainsRegex("\nbraid \\(rolled back\\) +[0-9]+\\.[0-9]+ +[0-9]"));
  EXPECT_THAT(summary.out, HasSubstr("plan origin baseline:ddp"));
  EXPECT_THAT(summary.out, HasSubstr("\nrolled back          serving the DDP-bucket baseline: "
                                     "measured 12.20 ms vs ddp"));
  EXPECT_THAT(summary.out, Not(HasSubstr("calibrated")));

  // The baseline measured at 1.5x its prediction: the cluster's calibration.
  {
    absl::StatusOr<std::unique_ptr<braid::client::ServiceApi>> api = braid::client::OpenService(args);
    ASSERT_TRUE(api.ok()) << api.status();
    absl::StatusOr<braid::v1::GetPlanResponse> plan = (*api)->GetPlan(id);
    ASSERT_TRUE(plan.ok()) << plan.status();
    braid::v1::StartRunRequest run;
    run.set_job_id(id);
    run.set_report_credential(credential);
    run.set_world_size(2);
    absl::StatusOr<braid::v1::StartRunResponse> started = (*api)->StartRun(run);
    ASSERT_TRUE(started.ok()) << started.status();
    absl::StatusOr<braid::v1::ReportMeasurementResponse> rep;
    for (int rank = 0; rank < 2; ++rank) {
      braid::v1::ReportMeasurementRequest r;
      r.set_job_id(id);
      r.set_rank(rank);
      r.set_world_size(2);
      r.set_plan_sha256(baseline_digest);
      r.set_report_credential(credential);
      r.set_attempt_id(started->attempt_id());
      for (int i = 0; i < 4; ++i) r.add_plan_iteration_s(1.5 * plan->plan().predicted_iteration_s());
      rep = (*api)->ReportMeasurement(r);
      ASSERT_TRUE(rep.ok()) << rep.status();
    }
    EXPECT_NEAR(rep->calibration(), 1.5, 1e-9);
  }
  CliRun calibrated = Braid("plan get " + id + " --summary", env);
  EXPECT_THAT(calibrated.out, HasSubstr("(predicted x 1.500: measured / predicted on this cluster)"));

  // The operator's view: the job's rollback with its audit entry; a restore
  // serves the searched plan again.
  CliRun listed = Braid("plan rollbacks " + id, env);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("job " + id + "  job     in effect"));
  EXPECT_THAT(listed.out, HasSubstr("rollback:job"));
  CliRun restored = Braid("plan restore " + id + " --reason checked", env);
  ASSERT_EQ(restored.exit_code, 0) << restored.err;
  EXPECT_THAT(restored.out, HasSubstr("is served its searched plan now"));
  CliRun after = Braid("status " + id, env);
  EXPECT_THAT(after.out, Not(HasSubstr("rolled back yes")));
  CliRun again = Braid("plan restore " + id, env);
  EXPECT_EQ(again.exit_code, 2) << again.err;
}

}  // namespace
