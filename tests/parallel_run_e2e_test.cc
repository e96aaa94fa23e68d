// `braid run MODEL --plan P` of a parallel plan, end to end with the real
// binaries: braid-parallel-model writes the executor's transformer as a
// braid text graph, `braid plan --parallel` plans it for 2 cpu-local ranks,
// and `braid run` trains the chosen plan's per-device program on braid-rank
// processes, interleaved with the data_parallel row's program (--vs-plan),
// printing measured and predicted step times. The executor's MLP: braid's chosen plan for it runs too (at batch 32
// column, row, row, row: the row layers' outputs reduce-scattered on
// features into the next row layer), with the data-parallel baseline's loss.
// The ranks run unbound (--pin-cores false): bound ranks poll for their
// collectives, and spinning on both cores would starve the tests ctest runs
// beside these; what is checked here is that the plans run, not their speed.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace braid {
namespace {

e2e::CommandResult Shell(const std::string& cmd, const std::string& err_file) {
  return e2e::RunCommand(cmd + " 2>" + err_file);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ParallelRunE2eTest, BraidRunsItsTransformerPlanOnTwoRanks) {
  const std::string dir = e2e::TempDir("parallel_run");
  const std::string err = dir + "/stderr.txt";
  const std::string model = dir + "/transformer.txt";
  e2e::CommandResult w = Shell(std::string(BRAID_PARALLEL_MODEL_BIN) +
                               " --model transformer --batch 4 --write-model " + model,
                           err);
  ASSERT_EQ(w.exit_code, 0) << ReadFile(err);

  // --json output: the plan under "plan" and every strategy's predicted time.
  e2e::CommandResult plan = Shell(std::string(BRAID_BIN) + " plan " + model +
                                    " --parallel --cluster cpu-local --ranks 2 --db none "
                                    "--budget-s 2 --no-pipeline --json -o " + dir + "/plan_o.json",
                                err);
  ASSERT_EQ(plan.exit_code, 0) << ReadFile(err);
  {
    std::ofstream out(dir + "/plan.json");
    out << plan.out;
  }
  const nlohmann::json planned = nlohmann::json::parse(plan.out);
  const std::string chosen = planned["chosen"].get<std::string>();

  // The data_parallel row's plan: the baseline, with its own groups and buckets.
  ASSERT_EQ(Shell(std::string(BRAID_BIN) + " plan " + model +
                      " --parallel --cluster cpu-local --ranks 2 --db none --budget-s 2 "
                      "--strategy data_parallel -o " + dir + "/dp.json",
                  err)
                .exit_code,
            0)
      << ReadFile(err);
  const std::string vs = chosen == "data_parallel" ? "" : " --vs-plan " + dir + "/dp.json";
  e2e::CommandResult run = Shell(std::string(BRAID_BIN) + " run " + model + " --plan " + dir +
                                   "/plan.json" + vs + " --ranks 2 --pin-cores false --rounds 1 --iters 2 --warmup 0 --json",
                               err);
  ASSERT_EQ(run.exit_code, 0) << ReadFile(err) << run.out;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["plan_strategy"], chosen);
  EXPECT_EQ(j["runtime"], "braid-rank");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["global_batch"], 4);
  const nlohmann::json& rows = j["strategies"];
  ASSERT_GE(rows.size(), 1u);
  EXPECT_EQ(rows[0]["strategy"], "plan (" + chosen + ")");
  for (const nlohmann::json& r : rows) {
    EXPECT_GT(r["measured_ms"].get<double>(), 0) << r.dump();
    EXPECT_EQ(r["measured_all_ms"].size(), 2u) << r.dump();
    ASSERT_EQ(r["loss"].size(), 2u) << r.dump();
    // The table holds every row's prediction.
    ASSERT_FALSE(r["predicted_ms"].is_null()) << r.dump();
    EXPECT_GT(r["predicted_ms"].get<double>(), 0);
  }
  if (chosen != "data_parallel") {
    ASSERT_EQ(rows.size(), 2u) << run.out;
    EXPECT_EQ(rows[1]["strategy"], "vs-plan (data_parallel)");
    // Same model, seed, weights and data: the first step's loss does not
    // depend on how the step is parallelized.
    const double a = rows[0]["loss"][0].get<double>(), b = rows[1]["loss"][0].get<double>();
    EXPECT_NEAR(a, b, 1e-4 * std::abs(b)) << run.out;
    EXPECT_TRUE(j.contains("plan_minus_vs_plan")) << run.out;
  } else {
    EXPECT_EQ(rows.size(), 1u) << run.out;
  }

  // The -o file: the chosen plan's prediction only; text output.
  e2e::CommandResult text = Shell(std::string(BRAID_BIN) + " run " + model + " --plan " + dir +
                                    "/plan_o.json --ranks 2 --pin-cores false --rounds 1 --iters 2 --warmup 0",
                                err);
  ASSERT_EQ(text.exit_code, 0) << ReadFile(err) << text.out;
  EXPECT_NE(text.out.find("measured ms [95% CI or range]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("plan (" + chosen + ")"), std::string::npos) << text.out;

  // Other ranks than the plan's: refused, naming both.
  e2e::CommandResult three = Shell(std::string(BRAID_BIN) + " run " + model + " --plan " + dir +
                                     "/plan_o.json --ranks 3 --pin-cores false --rounds 1 --iters 1 --warmup 0",
                                 err);
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(ReadFile(err).find("planned for 2 devices, asked to run on 3 ranks"), std::string::npos)
      << ReadFile(err);
}

// The executor's MLP at batch 32 as a braid text graph; the exit code.
int WriteMlp(const std::string& model, const std::string& err) {
  return Shell(std::string(BRAID_PARALLEL_MODEL_BIN) + " --model mlp --batch 32 --write-model " +
                   model,
               err)
      .exit_code;
}

TEST(ParallelRunE2eTest, BraidRunsItsMlpPlanOnTwoRanks) {
  const std::string dir = e2e::TempDir("parallel_run_mlp");
  const std::string err = dir + "/stderr.txt";
  const std::string model = dir + "/mlp.txt";
  ASSERT_EQ(WriteMlp(model, err), 0) << ReadFile(err);
  ASSERT_EQ(Shell(std::string(BRAID_BIN) + " plan " + model +
                    " --parallel --cluster cpu-local --ranks 2 --db none --budget-s 2 "
                    "--no-pipeline -o " + dir + "/plan.json",
                err)
                .exit_code,
            0)
      << ReadFile(err);
  e2e::CommandResult run = Shell(std::string(BRAID_BIN) + " run " + model + " --plan " + dir +
                                   "/plan.json --ranks 2 --pin-cores false --rounds 1 --iters 2 --warmup 0 --json",
                               err);
  ASSERT_EQ(run.exit_code, 0) << ReadFile(err) << run.out;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  const nlohmann::json& rows = j["strategies"];
  ASSERT_GE(rows.size(), 1u);
  for (const nlohmann::json& r : rows) {
    EXPECT_GT(r["measured_ms"].get<double>(), 0) << r.dump();
    ASSERT_EQ(r["loss"].size(), 2u) << r.dump();
  }
  if (rows.size() == 2) {  // the same first-step loss as the data-parallel baseline
    const double a = rows[0]["loss"][0].get<double>(), b = rows[1]["loss"][0].get<double>();
    EXPECT_NEAR(a, b, 1e-4 * std::abs(b)) << run.out;
  }
}

// On cpu-local `braid plan --parallel` lowers every row to its program and
// chooses the fastest simulated one (a pipeline row, which has no program,
// is not chosen); the plan file carries that prediction; `braid run
// --profile` clocks the program's ops into the store, and the next plan
// prices its programs from those measurements.
TEST(ParallelRunE2eTest, PlanOnCpuLocalIsChosenByItsProgramsSimulation) {
  const std::string dir = e2e::TempDir("parallel_run_programs");
  const std::string err = dir + "/stderr.txt";
  const std::string model = dir + "/mlp.txt";
  const std::string db = dir + "/profiles.db";
  ASSERT_EQ(WriteMlp(model, err), 0) << ReadFile(err);
  auto plan_json = [&](const std::string& out) {
    e2e::CommandResult plan = Shell(std::string(BRAID_BIN) + " plan " + model +
                                        " --parallel --cluster cpu-local --ranks 2 --db " + db +
                                        " --budget-s 2 --json" + (out.empty() ? "" : " -o " + out),
                                    err);
    EXPECT_EQ(plan.exit_code, 0) << ReadFile(err) << plan.out;
    return plan.exit_code == 0 ? nlohmann::json::parse(plan.out) : nlohmann::json::object();
  };
  const nlohmann::json j = plan_json(dir + "/plan.json");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["chosen_by"], "program simulation") << j.dump();
  double chosen_ms = 0, least_ms = 1e30;
  int priced = 0;
  for (const nlohmann::json& r : j["strategies"]) {
    if (!r.contains("program_ms")) {
      EXPECT_TRUE(r.contains("no_program") || r["status"] != "ok") << r.dump();
      continue;
    }
    ++priced;
    const double ms = r["program_ms"].get<double>();
    EXPECT_GT(ms, 0) << r.dump();
    least_ms = std::min(least_ms, ms);
    if (r["strategy"] == j["chosen"]) chosen_ms = ms;
  }
  EXPECT_GE(priced, 2) << j.dump();  // data parallel and Megatron's pairs at least
  EXPECT_EQ(chosen_ms, least_ms) << j.dump();
  const nlohmann::json file = nlohmann::json::parse(ReadFile(dir + "/plan.json"));
  EXPECT_EQ(file["predicted_by"], "program simulation");
  EXPECT_NEAR(file["predicted_iteration_s"].get<double>() * 1e3, chosen_ms, 1e-6 * chosen_ms);
  ASSERT_TRUE(file.contains("program"));
  // --profile: the ranks clock their ops and the in-step times go into the
  // store, which the next plan prices its programs from.
  e2e::CommandResult run = Shell(std::string(BRAID_BIN) + " run " + model + " --plan " + dir +
                                     "/plan.json --ranks 2 --pin-cores false --rounds 1 --iters 2 "
                                     "--warmup 0 --json --profile --db " + db,
                                 err);
  ASSERT_EQ(run.exit_code, 0) << ReadFile(err) << run.out;
  const nlohmann::json ran = nlohmann::json::parse(run.out);
  ASSERT_TRUE(ran.contains("profiled")) << run.out;
  EXPECT_NE(ran["profiled"].get<std::string>().find("clocked inside the steps"),
            std::string::npos);
  const nlohmann::json again = plan_json("");
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again["chosen_by"], "program simulation");
  bool measured = false;
  for (const nlohmann::json& r : again["strategies"])
    if (r["strategy"] == j["chosen"] && r.contains("program_sources"))
      measured = r["program_sources"]["measured"].get<double>() > 0;
  EXPECT_TRUE(measured) << again.dump();
}

}  // namespace
}  // namespace braid
