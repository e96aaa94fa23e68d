// The activator end to end: real `braid-worker activate` processes meet on a
// loopback rendezvous, rank 0 hands them a plan, every rank verifies it and
// runs training iterations with it (worker/activator.h).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "proto/strategy_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kClientToken[] = "activator-client-token";
constexpr char kWorkerToken[] = "activator-worker-token";
constexpr char kModel[] = "tests/data/mlp_with_initializers.onnx";  // 64-128-10 MLP, batch 2

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct RankRun {
  std::vector<int> exit_codes;
  std::vector<std::string> logs;
};

// Starts `world` activate ranks with per-rank extra arguments (default:
// kModel and the shared secret) and waits for all of them.
RankRun RunRanks(const std::string& dir, const std::string& secret, int world,
                 const std::vector<std::string>& common,
                 const std::function<std::vector<std::string>(int)>& per_rank = nullptr,
                 double timeout_s = 30) {
  const int port = e2e::FreePort();
  std::vector<std::unique_ptr<e2e::Process>> ranks;
  RankRun out;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {BRAID_WORKER_BIN, "activate", "--rank", absl::StrCat(r),
                                     "--world-size", absl::StrCat(world), "--rendezvous",
                                     absl::StrCat("127.0.0.1:", port), "--timeout-s",
                                     absl::StrCat(timeout_s)};
    argv.insert(argv.end(), common.begin(), common.end());
    std::vector<std::string> extra = per_rank ? per_rank(r) : std::vector<std::string>{};
    if (std::find(extra.begin(), extra.end(), "--model") == extra.end()) {
      extra.insert(extra.end(), {"--model", kModel});
    }
    if (!secret.empty() && std::find(extra.begin(), extra.end(), "--secret-file") == extra.end()) {
      extra.insert(extra.end(), {"--secret-file", secret});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    out.logs.push_back(absl::StrCat(dir, "/rank", r, ".log"));
    ranks.push_back(std::make_unique<e2e::Process>(argv, out.logs.back()));
  }
  for (auto& p : ranks) {
    EXPECT_TRUE(e2e::WaitFor([&] { return !p->Alive(); }, 60)) << "a rank did not finish";
    out.exit_codes.push_back(WIFEXITED(p->exit_status()) ? WEXITSTATUS(p->exit_status()) : -1);
  }
  for (std::string& l : out.logs) l = ReadAll(l);
  return out;
}

// Rank 0's text output judges the plan against each of `alternatives`
// ("plan - ddp", "plan - none", ...) on its line, and `summary` (the line's
// start) says "yes" exactly when no verdict found the plan slower.
void ExpectJudged(const std::string& out, const std::vector<std::string>& alternatives,
                  const std::string& summary) {
  bool slower = false;
  for (const std::string& alt : alternatives) {
    const size_t at = out.find("\n" + alt + " ");
    ASSERT_NE(at, std::string::npos) << "no line for " << alt << " in:\n" << out;
    const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    const bool is_slower = line.find("plan SLOWER beyond the interval") != std::string::npos;
    EXPECT_TRUE(is_slower || line.find("plan faster beyond the interval") != std::string::npos ||
                line.find("no difference beyond the interval") != std::string::npos)
        << "not judged: " << line;
    slower = slower || is_slower;
  }
  EXPECT_THAT(out, HasSubstr(absl::StrCat("\n", summary, slower ? "NO" : "yes", "\n"))) << out;
}

class ActivatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = e2e::TempDir("activator");
    secret_ = dir_ + "/secret";
    WriteAll(secret_, "braid-activator-test-secret-0123456789\n");
    plan_ = dir_ + "/plan.json";
    // `braid plan -o` signs the plan when a secret is configured.
    const e2e::CommandResult r = e2e::RunCommand(absl::StrCat(
        "BRAID_PLAN_SECRET_FILE=", secret_, " ", BRAID_BIN, " plan ", kModel,
        " --cluster cpu-local --ranks 3 --db none --budget-s 5 -o ", plan_, " 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    ASSERT_FALSE(ReadAll(plan_ + ".hmac").empty());
  }

  std::vector<std::string> Common(const std::string& plan) const {
    return {"--plan", plan, "--warmup", "1",
            "--iterations", "5"};
  }

  std::string dir_, secret_, plan_;
};

TEST_F(ActivatorTest, ThreeRanksVerifyTheSignedPlanAndTrainWithIt) {
  const nlohmann::json plan = nlohmann::json::parse(ReadAll(plan_));
  ASSERT_TRUE(plan.contains("graph_fingerprint"));
  ASSERT_TRUE(plan.contains("ddp_buckets"));
  std::vector<std::string> args = Common(plan_);
  args.push_back("--baseline");
  RankRun run = RunRanks(dir_, secret_, 3, args);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  const std::string& out = run.logs[0];
  EXPECT_THAT(out, HasSubstr("verified on every rank: HMAC-SHA256"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("graph ", plan["graph_fingerprint"].get<std::string>())));
  EXPECT_THAT(out, HasSubstr("\nplan "));
  EXPECT_THAT(out, HasSubstr("\nddp "));
  ExpectJudged(out, {"plan - ddp"}, "the plan is no slower than its DDP-bucket baseline: ");
  EXPECT_THAT(out, HasSubstr("5 timed iterations per rank"));
  // Every rank reduced every gradient exactly once in each of the 5 plan
  // iterations, and the allreduce results checked in warm-up were right.
  const size_t buckets = plan["buckets"].size();
  EXPECT_THAT(out, HasSubstr(absl::StrCat(3 * 5 * buckets, " bucket allreduces, every gradient reduced once")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("checked in warm-up: ", 3 * buckets, ", wrong: 0")));
  for (int r = 1; r < 3; ++r) EXPECT_THAT(run.logs[r], HasSubstr("verified and run"));
}

TEST_F(ActivatorTest, ATamperedPlanIsRefusedByEveryRank) {
  // Swap the bucket order, keep the tag: what an attacker without the secret can do.
  nlohmann::json plan = nlohmann::json::parse(ReadAll(plan_));
  plan["buckets"] = nlohmann::json::array({plan["buckets"][0]});
  plan["buckets"][0].erase(0);
  plan["buckets"].push_back(nlohmann::json::array({plan["ddp_buckets"][0][0]}));
  const std::string tampered = dir_ + "/tampered.json";
  WriteAll(tampered, plan.dump(1) + "\n");
  WriteAll(tampered + ".hmac", ReadAll(plan_ + ".hmac"));
  RankRun run = RunRanks(dir_, secret_, 3, Common(tampered));
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(run.exit_codes[r], 0) << "rank " << r << " ran a tampered plan";
    EXPECT_THAT(run.logs[r], HasSubstr("HMAC-SHA256 mismatch")) << "rank " << r;
  }
}

TEST_F(ActivatorTest, ARankWithAnotherSecretOrModelNamesItselfAndAllStop) {
  // The secret is also what the ranks prove to each other at the rendezvous:
  // rank 0 refuses rank 2's proof at once, and the others wait for a rank 2
  // with the secret until --timeout-s, then name it.
  const std::string other = dir_ + "/other-secret";
  WriteAll(other, "a-different-secret-of-enough-length\n");
  RankRun run = RunRanks(
      dir_, secret_, 3, Common(plan_),
      [&](int r) {
        return r == 2 ? std::vector<std::string>{"--secret-file", other} : std::vector<std::string>{};
      },
      /*timeout_s=*/5);
  EXPECT_NE(run.exit_codes[2], 0);
  EXPECT_THAT(run.logs[2], HasSubstr("refused this rank's key proof"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(run.exit_codes[r], 0) << "rank " << r;
    EXPECT_THAT(run.logs[r], HasSubstr("rank 2 of 3 did not join the rendezvous")) << run.logs[r];
    EXPECT_THAT(run.logs[r], HasSubstr("claiming rank 2 failed the key challenge")) << run.logs[r];
  }
  // Another model builds another training graph: the fingerprint check.
  run = RunRanks(dir_, secret_, 3, Common(plan_), [](int r) {
    return r == 1 ? std::vector<std::string>{"--model", "tests/data/multihead_attention_opset13.onnx"}
                  : std::vector<std::string>{};
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(run.exit_codes[r], 0) << "rank " << r;
    EXPECT_THAT(run.logs[r], HasSubstr("rank 1 refused the plan: the plan is for training graph"));
  }
  // An unsigned plan is refused before anything runs.
  const std::string unsigned_plan = dir_ + "/unsigned.json";
  WriteAll(unsigned_plan, ReadAll(plan_));
  run = RunRanks(dir_, secret_, 2, Common(unsigned_plan));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(run.exit_codes[r], 0);
    EXPECT_THAT(run.logs[r], HasSubstr("has no HMAC tag"));
  }
}

// An overlap (tensor-parallel) plan file: a tiny MLP whose pairs
// mix looped and none, signed with the ranks' secret, run on 2 ranks.
class OverlapActivatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = e2e::TempDir("activator_overlap");
    secret_ = dir_ + "/secret";
    WriteAll(secret_, "braid-activator-test-secret-0123456789\n");
  }

  // 1 block: 4 pairs (fc1.ag, fc2.rs, fc2.grad.ag, fc1.grad.rs).
  std::string WritePlan(const std::string& name, const std::vector<std::string>& methods) {
    const nlohmann::json plan = {
        {"format", "braid.plan.v1"},
        {"overlap_training",
         {{"model", "mlp"}, {"rows", 16}, {"d_model", 8}, {"d_ff", 16}, {"heads", 4},
          {"seq", 8}, {"blocks", 1}, {"ranks", 2}, {"lr", 0.05}, {"seed", 3},
          {"methods", methods},
          {"pairs", {"b0.fc1.ag", "b0.fc2.rs", "b0.fc2.grad.ag", "b0.fc1.grad.rs"}},
          {"predicted_step_s", 0.001}}}};
    const std::string path = dir_ + "/" + name;
    const std::string text = plan.dump(1) + "\n";
    WriteAll(path, text);
    WriteAll(path + ".hmac",
             HmacSha256Hex("braid-activator-test-secret-0123456789", text) + "\n");
    return path;
  }

  std::vector<std::string> Common(const std::string& plan) const {
    return {"--plan", plan, "--warmup", "1", "--iterations", "6"};
  }

  std::string dir_, secret_;
};

TEST_F(OverlapActivatorTest, TwoRanksVerifyAndTrainTheSignedOverlapPlan) {
  const std::string plan = WritePlan("overlap.json", {"looped", "none", "looped", "none"});
  std::vector<std::string> args = Common(plan);
  args.push_back("--baseline");
  RankRun run = RunRanks(dir_, secret_, 2, args);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  const std::string& out = run.logs[0];
  EXPECT_THAT(out, HasSubstr("overlap plan"));
  EXPECT_THAT(out, HasSubstr("4 pairs: looped,none,looped,none"));
  EXPECT_THAT(out, HasSubstr("verified on every rank: HMAC-SHA256"));
  EXPECT_THAT(out, HasSubstr("\nplan "));
  EXPECT_THAT(out, HasSubstr("\nnone "));
  // No overlap is an alternative like any fixed method: judged, and part of
  // the summary even when it is the only one measured.
  ExpectJudged(out, {"plan - none"},
               "the plan is no slower than no overlap and every fixed method measured: ");
  EXPECT_THAT(out, HasSubstr("6 timed steps per rank"));
  EXPECT_THAT(run.logs[1], HasSubstr("verified and run"));

  // Without --baseline, --compare-methods measures no overlap among the
  // fixed methods: every one of them judged, no overlap included.
  run = RunRanks(dir_, secret_, 2, {"--plan", plan, "--warmup", "1", "--iterations", "6",
                                    "--compare-methods"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  ExpectJudged(run.logs[0], {"plan - none", "plan - looped", "plan - unrolled", "plan - bidirectional"},
               "the plan is no slower than no overlap and every fixed method measured: ");

  // --json: six measured steps each, and the plan's methods train the same
  // model as no overlap (same initialization and batches): equal losses.
  // --compare-methods interleaves every fixed method too.
  args.push_back("--json");
  args.push_back("--compare-methods");
  run = RunRanks(dir_, secret_, 2, args);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  const std::string& log = run.logs[0];
  const size_t open = log.find('{'), close = log.rfind('}');
  ASSERT_NE(open, std::string::npos) << log;
  const nlohmann::json j = nlohmann::json::parse(log.substr(open, close - open + 1));
  EXPECT_EQ(j["kind"], "overlap_training");
  EXPECT_EQ(j["predicted_step_s"].get<double>(), 0.001);
  ASSERT_EQ(j["plan_step_s"].size(), 6u);
  ASSERT_EQ(j["baseline_loss"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_GT(j["plan_step_s"][i].get<double>(), 0);
    EXPECT_GT(j["baseline_step_s"][i].get<double>(), 0);
    const double a = j["plan_loss"][i].get<double>(), b = j["baseline_loss"][i].get<double>();
    EXPECT_GT(a, 0);
    EXPECT_NEAR(a, b, 1e-5 * b) << "step " << i;
  }
  // With --baseline the "none" variant is the baseline's; the others each once.
  ASSERT_TRUE(j.contains("compared")) << j.dump();
  EXPECT_EQ(j["compared"].size(), 3u);
  for (const char* m : {"looped", "unrolled", "bidirectional"}) {
    ASSERT_TRUE(j["compared"].contains(m)) << m;
    EXPECT_EQ(j["compared"][m].size(), 6u) << m;
  }
}

TEST_F(OverlapActivatorTest, ATamperedOverlapPlanIsRefusedByEveryRank) {
  const std::string plan = WritePlan("overlap.json", {"looped", "none", "looped", "none"});
  std::string text = ReadAll(plan);
  text.replace(text.find("\"looped\""), 8, "\"none\"  ");  // same length, other method
  WriteAll(plan, text);
  RankRun run = RunRanks(dir_, secret_, 2, Common(plan));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.exit_codes[r], 1) << "rank " << r << " ran a tampered plan: " << run.logs[r];
    EXPECT_THAT(run.logs[r], HasSubstr("HMAC-SHA256 mismatch")) << "rank " << r;
  }
}

TEST_F(OverlapActivatorTest, AWrongMethodsCountIsRefusedNamingIt) {
  const std::string plan = WritePlan("three.json", {"looped", "none", "looped"});
  RankRun run = RunRanks(dir_, secret_, 2, Common(plan));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.exit_codes[r], 1) << "rank " << r << ": " << run.logs[r];
    EXPECT_THAT(run.logs[r], HasSubstr("refused the plan"));
    EXPECT_THAT(run.logs[r], HasSubstr("\"methods\" lists 3 methods, the mlp spec has 4 pairs"));
  }
}

// braid-server on `addr` with its database in `dir`, and a client once it
// answers.
std::unique_ptr<e2e::Process> StartServer(const std::string& dir, const std::string& addr,
                                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {BRAID_SERVER_BIN, "--listen", addr, "--db", dir + "/service.db",
                                   "--client-token", kClientToken, "--worker-token", kWorkerToken};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<e2e::Process>(argv, dir + "/server.log");
}

std::unique_ptr<client::StrategyClient> ClientOf(const std::string& addr) {
  client::ClientOptions co;
  co.address = addr;
  co.token = kClientToken;
  co.rpc_timeout_s = 5;
  return *client::StrategyClient::Create(co);
}

// A cpu-local plan for kModel on 3 ranks, searched to the end.
absl::StatusOr<v1::SubmitGraphResponse> SubmitAndWait(client::StrategyClient& c) {
  v1::SubmitGraphRequest req;
  req.set_onnx(ReadAll(kModel));
  req.set_cluster_preset("cpu-local");
  req.mutable_options()->set_ranks(3);
  req.mutable_options()->set_budget_s(5);
  absl::StatusOr<v1::SubmitGraphResponse> sub = c.Submit(req);
  if (!sub.ok()) return sub.status();
  absl::StatusOr<v1::JobStatus> done = c.Watch(sub->job_id(), [](const v1::JobStatus&) {});
  if (!done.ok()) return done.status();
  if (done->phase() != v1::JOB_PHASE_DONE) {
    return absl::AbortedError(absl::StrCat(sub->job_id(), " ended ", done->phase(), ": ", done->error()));
  }
  return sub;
}

// One run of the job's `plan_sha256` in which the plan lost clearly to its
// DDP-bucket baseline on every one of 3 ranks: the server rolls it back.
void ReportPlanSlower(client::StrategyClient& c, const v1::SubmitGraphResponse& sub,
                      const std::string& plan_sha256) {
  v1::StartRunRequest start;
  start.set_job_id(sub.job_id());
  start.set_report_credential(sub.report_credential());
  start.set_world_size(3);
  absl::StatusOr<v1::StartRunResponse> run_id = c.StartRun(start);
  ASSERT_TRUE(run_id.ok()) << run_id.status();
  for (int r = 0; r < 3; ++r) {
    v1::ReportMeasurementRequest m;
    m.set_report_credential(sub.report_credential());
    m.set_attempt_id(run_id->attempt_id());
    m.set_job_id(sub.job_id());
    m.set_rank(r);
    m.set_world_size(3);
    m.set_plan_sha256(plan_sha256);
    m.set_source("activator_e2e_test");
    for (int i = 0; i < 8; ++i) {
      m.add_plan_iteration_s(0.020 + 0.0001 * i);
      m.add_baseline_iteration_s(0.010 + 0.0001 * i);
    }
    ASSERT_TRUE(c.ReportMeasurement(m).ok());
  }
}

// The plan from a braid-server job: every rank verifies it against the
// digest its own GetPlan returns, the ranks report their times, and a plan
// that then loses against its DDP-bucket baseline is rolled back: the next
// activation runs the baseline.
TEST(ActivatorServerTest, ServerPlanVerifiedReportedAndRolledBack) {
  const std::string dir = e2e::TempDir("activator_server");
  const std::string addr = absl::StrCat("127.0.0.1:", e2e::FreePort());
  std::unique_ptr<e2e::Process> server = StartServer(dir, addr);
  std::unique_ptr<client::StrategyClient> c = ClientOf(addr);
  ASSERT_TRUE(e2e::WaitFor([&] { return c->ListJobs(1).ok(); }, 10)) << ReadAll(dir + "/server.log");
  absl::StatusOr<v1::SubmitGraphResponse> sub = SubmitAndWait(*c);
  ASSERT_TRUE(sub.ok()) << sub.status();
  const std::string job = sub->job_id();
  const std::string credential_file = dir + "/credential";
  std::ofstream(credential_file) << sub->report_credential() << "\n";
  absl::StatusOr<v1::GetPlanResponse> plan = c->GetPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->plan().ddp_buckets_size(), 0);

  auto activate = [&](const std::string& tag) {
    const std::string d = absl::StrCat(dir, "/", tag);
    std::filesystem::create_directories(d);
    return RunRanks(d, "", 3, {"--job", job, "--server", addr, "--token", kClientToken,
                               "--cache-dir", d + "/plans", "--warmup", "1", "--iterations", "6",
                               "--baseline", "--report-credential-file", credential_file});
  };
  RankRun run = activate("first");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  EXPECT_THAT(run.logs[0], HasSubstr("verified on every rank: SHA-256 against the server's digest"));
  EXPECT_THAT(run.logs[0], HasSubstr(absl::StrCat("reported to ", addr, ": 3 ranks")));
  absl::StatusOr<v1::JobStatus> status = c->GetJob(job);
  ASSERT_TRUE(status.ok());
  EXPECT_GT(status->measured_iteration_s(), 0);
  EXPECT_GT(status->measured_baseline_s(), 0);

  // A run where the plan lost clearly, on every rank: rolled back.
  if (!plan->rolled_back()) ReportPlanSlower(*c, *sub, plan->plan_sha256());
  absl::StatusOr<v1::GetPlanResponse> after = c->GetPlan(job);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->rolled_back());
  EXPECT_EQ(after->origin(), "baseline:ddp");
  EXPECT_THAT(after->rollback_reason(), HasSubstr("slower"));
  EXPECT_NE(after->plan_sha256(), plan->plan_sha256());
  // The next start runs the baseline: its digest, no fusion groups.
  run = activate("second");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.logs[r];
  EXPECT_THAT(run.logs[0], HasSubstr(absl::StrCat("plan ", after->plan_sha256().substr(0, 12), " (0 fusion groups")));
}

// The ranks' servers disagree about the job's plan: rank 0 fetches it from
// a server that still has the searched plan, while the server ranks 1 and 2
// ask for the digest (a copy of the same database) has rolled it back since.
// Ranks 1 and 2 find that the bytes rank 0 handed them are not the plan
// their server vouches for, every rank stops with that reason, and none
// trains or begins a run.
TEST(ActivatorServerTest, APlanTheServerNoLongerVouchesForIsRefusedByEveryRank) {
  const std::string dir = e2e::TempDir("activator_digest");
  const std::string dir_a = dir + "/a", dir_b = dir + "/b";
  std::filesystem::create_directories(dir_a);
  const std::string addr_a = absl::StrCat("127.0.0.1:", e2e::FreePort());
  std::unique_ptr<e2e::Process> server_a = StartServer(dir_a, addr_a);
  std::unique_ptr<client::StrategyClient> a = ClientOf(addr_a);
  ASSERT_TRUE(e2e::WaitFor([&] { return a->ListJobs(1).ok(); }, 10)) << ReadAll(dir_a + "/server.log");
  absl::StatusOr<v1::SubmitGraphResponse> sub = SubmitAndWait(*a);
  ASSERT_TRUE(sub.ok()) << sub.status();
  const std::string job = sub->job_id();
  absl::StatusOr<v1::GetPlanResponse> plan = a->GetPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->rolled_back());

  // A second server on a copy of the database (taken while the first is
  // stopped), where the plan is then rolled back. Each server allows one
  // run of the job beyond the rollback's: a run the ranks began would use it.
  server_a->Kill(SIGTERM);
  std::filesystem::copy(dir_a, dir_b, std::filesystem::copy_options::recursive);
  server_a = StartServer(dir_a, addr_a, {"--max-runs-per-job", "1"});
  const std::string addr_b = absl::StrCat("127.0.0.1:", e2e::FreePort());
  std::unique_ptr<e2e::Process> server_b = StartServer(dir_b, addr_b, {"--max-runs-per-job", "2"});
  std::unique_ptr<client::StrategyClient> b = ClientOf(addr_b);
  ASSERT_TRUE(e2e::WaitFor([&] { return a->ListJobs(1).ok() && b->ListJobs(1).ok(); }, 20))
      << ReadAll(dir_a + "/server.log") << ReadAll(dir_b + "/server.log");
  ReportPlanSlower(*b, *sub, plan->plan_sha256());
  absl::StatusOr<v1::GetPlanResponse> rolled = b->GetPlan(job);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  ASSERT_TRUE(rolled->rolled_back());
  ASSERT_NE(rolled->plan_sha256(), plan->plan_sha256());
  absl::StatusOr<v1::GetPlanResponse> still = a->GetPlan(job);
  ASSERT_TRUE(still.ok()) << still.status();
  ASSERT_EQ(still->plan_sha256(), plan->plan_sha256());

  const std::string credential_file = dir + "/credential";
  std::ofstream(credential_file) << sub->report_credential() << "\n";
  RankRun run = RunRanks(
      dir, "", 3,
      {"--job", job, "--token", kClientToken, "--warmup", "1", "--iterations", "3",
       "--report-credential-file", credential_file},
      [&](int r) {
        return std::vector<std::string>{"--server", r == 0 ? addr_a : addr_b, "--cache-dir",
                                        absl::StrCat(dir, "/plans", r)};
      });
  const std::string why =
      absl::StrCat("rank 1 refused the plan: plan of ", job, ": its SHA-256 ",
                   plan->plan_sha256().substr(0, 16), "... is not the server's ",
                   rolled->plan_sha256().substr(0, 16), "...: the plan was changed after the "
                   "server sent it");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.exit_codes[r], 1) << "rank " << r << ": " << run.logs[r];
    EXPECT_THAT(run.logs[r], HasSubstr(why)) << "rank " << r;
    EXPECT_THAT(run.logs[r], Not(HasSubstr("verified and run"))) << "rank " << r;
    EXPECT_THAT(run.logs[r], Not(HasSubstr("timed iterations"))) << "rank " << r;
  }
  // No rank reported a time or began a run, on either server: each still
  // has its one run left.
  absl::StatusOr<v1::JobStatus> status = a->GetJob(job);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->measured_iteration_s(), 0);
  for (client::StrategyClient* c : {a.get(), b.get()}) {
    v1::StartRunRequest start;
    start.set_job_id(job);
    start.set_report_credential(sub->report_credential());
    start.set_world_size(3);
    absl::StatusOr<v1::StartRunResponse> left = c->StartRun(start);
    EXPECT_TRUE(left.ok()) << left.status();
  }
}

}  // namespace
}  // namespace braid
