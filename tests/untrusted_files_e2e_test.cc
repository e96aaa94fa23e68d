// Files braid reads from outside, against the real binaries:
//  - GNN checkpoints that are damaged or hostile (NaN weights, a zero
//    standard deviation in the normalisation statistics, a network that
//    predicts inf, a directory, a truncated file): braid-server started with
//    each one warns once naming the path, plans cpu-local jobs with the
//    corrected roofline (cost generation "estimator-none") and keeps serving;
//    a valid checkpoint, the control, is used. `braid plan` with a directory
//    as its checkpoint plans with the roofline instead of aborting.
//  - a plan file nested 100,000 levels deep: `braid simulate --plan` and
//    `braid run --plan` refuse it with exit code 2 and one line.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/strategy_client.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/gnn/gnn_model.h"
#include "costmodel/op_cost.h"
#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace braid {
namespace {

namespace v1 = braid::v1;
namespace gnn = costmodel::gnn;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "untrusted-client";
constexpr char kWorkerToken[] = "untrusted-worker";
// The CPU device kind the servers and the checkpoints agree on, whatever
// this machine's CPU.
constexpr char kDeviceKind[] = "cpu-1t:untrusted-files-test";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CliRun Braid(const std::string& dir, const std::string& args, const std::string& env = "") {
  const std::string err = dir + "/braid_stderr.txt";
  e2e::CommandResult c =
      e2e::RunCommand(absl::StrCat(env, " ", BRAID_BIN, " ", args, " 2>", err));
  return {c.exit_code, std::move(c.out), ReadAll(err)};
}

// ---- checkpoints -------------------------------------------------------------

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

// A checkpoint as `braid gnn train` writes it (statistics of a few fused
// groups, an untrained network), with `edit` applied before it is saved.
std::string WriteCheckpoint(const std::string& path,
                            const std::function<void(gnn::CheckpointInfo&, gnn::GnnNet&)>& edit) {
  graph::Graph g = *graph::ParseText(kGraph);
  const gnn::OpVocabulary vocab = gnn::OpVocabulary::Build({"MatMul", "Relu", "Add"});
  costmodel::ClusterSpec c = *costmodel::ClusterPreset("cpu-local");
  costmodel::ClusterCostModel m(c, nullptr, nullptr, costmodel::CommModel(c));
  std::vector<gnn::FeatureGraph> fs;
  for (std::vector<graph::OpId> ops : {std::vector<graph::OpId>{0, 1}, {1, 2}, {0, 1, 2}}) {
    fs.push_back(gnn::ExtractFeatures(g, ops, gnn::MemberTimes(m, g, ops), vocab));
  }
  gnn::CheckpointInfo info;
  info.device_kind = kDeviceKind;
  info.vocabulary = vocab.names();
  info.stats = gnn::ComputeStats(fs);
  info.hp = {.layers = 1, .heads = 2, .width = 8, .type_embedding = 4};
  torch::manual_seed(3);
  gnn::GnnNet net(vocab.size(), info.hp);
  edit(info, net);
  absl::Status s = gnn::SaveCheckpoint(path, net, info);
  CHECK(s.ok()) << s;
  return path;
}

void Fill(gnn::GnnNet& net, const std::string& name, double v) {
  torch::NoGradGuard no_grad;
  net->named_parameters().find(name)->fill_(v);
}

struct BadCheckpoint {
  std::string name;
  std::string path;
  std::string reason;  // in the warning
};

std::vector<BadCheckpoint> MakeBadCheckpoints(const std::string& dir) {
  std::vector<BadCheckpoint> out;
  out.push_back({"nan_weights",
                 WriteCheckpoint(dir + "/nan_weights.pt",
                                 [](gnn::CheckpointInfo&, gnn::GnnNet& net) {
                                   Fill(net, "fc2.weight", std::nan(""));
                                 }),
                 "weight tensor 'fc2.weight' holds"});
  out.push_back({"zero_std",
                 WriteCheckpoint(dir + "/zero_std.pt",
                                 [](gnn::CheckpointInfo& info, gnn::GnnNet&) {
                                   info.stats.group_std[0] = 0;
                                 }),
                 "group_std[0] is 0"});
  out.push_back({"inf_output",
                 WriteCheckpoint(dir + "/inf_output.pt",
                                 [](gnn::CheckpointInfo&, gnn::GnnNet& net) {
                                   Fill(net, "fc3.weight", 0);
                                   Fill(net, "fc3.bias", 1e4);  // exp(1e4) s
                                 }),
                 "the network predicts inf s"});
  const std::string directory = dir + "/directory.pt";
  std::filesystem::create_directories(directory);
  out.push_back({"directory", directory, "is a directory"});
  const std::string whole =
      WriteCheckpoint(dir + "/whole.pt", [](gnn::CheckpointInfo&, gnn::GnnNet&) {});
  const std::string bytes = ReadAll(whole);
  const std::string truncated = dir + "/truncated.pt";
  std::ofstream(truncated, std::ios::binary).write(bytes.data(), bytes.size() / 2);
  out.push_back({"truncated", truncated, "not a readable braid GNN checkpoint"});
  return out;
}

// ---- the server ---------------------------------------------------------------

std::unique_ptr<client::StrategyClient> Client(int port) {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = kClientToken;
  o.rpc_timeout_s = 30;
  return *client::StrategyClient::Create(o);
}

// braid-server with its fused-op estimator checkpoint at `checkpoint`.
struct Server {
  Server(const std::string& dir, const std::string& checkpoint) : log(dir + "/server.log") {
    port = e2e::FreePort();
    // The child inherits the environment of the fork.
    setenv("BRAID_GNN_CHECKPOINT", checkpoint.c_str(), 1);
    setenv("BRAID_CPU_DEVICE_KIND", kDeviceKind, 1);
    proc = std::make_unique<e2e::Process>(
        std::vector<std::string>{BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port),
                                 "--db", dir + "/service.db", "--client-token", kClientToken,
                                 "--worker-token", kWorkerToken},
        log);
    unsetenv("BRAID_GNN_CHECKPOINT");
    unsetenv("BRAID_CPU_DEVICE_KIND");
  }

  bool WaitUp() {
    std::unique_ptr<client::StrategyClient> c = Client(port);
    return e2e::WaitFor([&] { return c->ListJobs(1).ok() || !proc->Alive(); }, 60) &&
           proc->Alive();
  }

  std::string log;
  int port = 0;
  std::unique_ptr<e2e::Process> proc;
};

absl::StatusOr<std::string> Submit(client::StrategyClient& c, uint64_t seed) {
  v1::SubmitGraphRequest req;
  req.set_zoo_model("mlp");
  req.set_cluster_preset("cpu-local");
  req.mutable_options()->set_seed(seed);
  req.mutable_options()->set_budget_s(1);
  req.mutable_options()->set_patience(20);
  req.set_name(absl::StrCat("untrusted-", seed));
  absl::StatusOr<v1::SubmitGraphResponse> r = c.Submit(req);
  if (!r.ok()) return r.status();
  return r->job_id();
}

absl::StatusOr<v1::GetPlanResponse> WaitForPlan(client::StrategyClient& c, const std::string& id) {
  absl::StatusOr<v1::JobStatus> done = c.Watch(id, [](const v1::JobStatus&) {});
  if (!done.ok()) return done.status();
  if (done->phase() != v1::JOB_PHASE_DONE) {
    return absl::AbortedError(absl::StrCat(id, " ended in phase ", done->phase(), ": ",
                                           done->error()));
  }
  return c.GetPlan(id);
}

// On every server, a cpu-local job, then another with another seed (not a
// plan-cache hit): each server's plans' cost generations.
std::vector<std::vector<std::string>> PlanTwoJobsEach(const std::vector<Server*>& servers) {
  std::vector<std::vector<std::string>> generations(servers.size());
  for (uint64_t seed : {1, 2}) {
    std::vector<std::string> ids(servers.size());
    for (size_t i = 0; i < servers.size(); ++i) {
      absl::StatusOr<std::string> id = Submit(*Client(servers[i]->port), seed);
      EXPECT_TRUE(id.ok()) << id.status() << "; see " << servers[i]->log;
      if (id.ok()) ids[i] = *id;
    }
    for (size_t i = 0; i < servers.size(); ++i) {
      if (ids[i].empty()) continue;
      absl::StatusOr<v1::GetPlanResponse> plan = WaitForPlan(*Client(servers[i]->port), ids[i]);
      EXPECT_TRUE(plan.ok()) << plan.status() << "; see " << servers[i]->log;
      if (!plan.ok()) continue;
      const double t = plan->plan().predicted_iteration_s();
      EXPECT_TRUE(std::isfinite(t) && t > 0) << "predicted " << t << "; see " << servers[i]->log;
      generations[i].push_back(plan->plan().cost_generation());
    }
  }
  return generations;
}

TEST(UntrustedFilesE2eTest, BadCheckpointsGiveRooflineCostsAndTheServerStaysUp) {
  const std::string dir = e2e::TempDir("untrusted_checkpoints");
  const std::vector<BadCheckpoint> bad = MakeBadCheckpoints(dir);
  const std::string good =
      WriteCheckpoint(dir + "/good.pt", [](gnn::CheckpointInfo&, gnn::GnnNet&) {});
  // One server per checkpoint, all at once (the estimator is loaded once
  // per process).
  std::vector<std::unique_ptr<Server>> servers;
  for (const BadCheckpoint& b : bad) {
    std::filesystem::create_directories(dir + "/" + b.name);
    servers.push_back(std::make_unique<Server>(dir + "/" + b.name, b.path));
  }
  std::filesystem::create_directories(dir + "/good");
  Server control(dir + "/good", good);
  for (size_t i = 0; i < bad.size(); ++i) {
    ASSERT_TRUE(servers[i]->WaitUp()) << bad[i].name << ": see " << servers[i]->log;
  }
  ASSERT_TRUE(control.WaitUp()) << "see " << control.log;

  std::vector<Server*> all;
  for (const std::unique_ptr<Server>& s : servers) all.push_back(s.get());
  all.push_back(&control);
  const std::vector<std::vector<std::string>> gens = PlanTwoJobsEach(all);

  for (size_t i = 0; i < bad.size(); ++i) {
    Server& s = *servers[i];
    ASSERT_EQ(gens[i].size(), 2u) << bad[i].name;
    for (const std::string& g : gens[i]) {
      EXPECT_THAT(g, HasSubstr("/estimator-none")) << bad[i].name;
    }
    EXPECT_TRUE(s.proc->Alive()) << bad[i].name << ": see " << s.log;
    // One warning naming the checkpoint and why it is not used.
    const std::string log = ReadAll(s.log);
    int warnings = 0;
    for (size_t at = log.find("fused-op estimator "); at != std::string::npos;
         at = log.find("fused-op estimator ", at + 1)) {
      ++warnings;
    }
    EXPECT_EQ(warnings, 1) << bad[i].name << ": " << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("fused-op estimator ", bad[i].path, " not used")))
        << bad[i].name;
    EXPECT_THAT(log, HasSubstr(bad[i].reason)) << bad[i].name;
    EXPECT_THAT(log, HasSubstr("unmeasured fused ops get the corrected roofline")) << bad[i].name;
  }
  // The control: the same jobs with a valid checkpoint use the estimator,
  // so the checks above would see it.
  ASSERT_EQ(gens.back().size(), 2u);
  for (const std::string& g : gens.back()) EXPECT_THAT(g, HasSubstr("/estimator-gnn-"));
  EXPECT_TRUE(control.proc->Alive());
}

// `braid plan` (handed to braid-torch, which links the estimator) with a
// directory where the checkpoint should be.
TEST(UntrustedFilesE2eTest, PlanWithADirectoryAsCheckpointUsesTheRoofline) {
  const std::string dir = e2e::TempDir("untrusted_plan_dir");
  const std::string ckpt = dir + "/checkpoint.pt";
  std::filesystem::create_directories(ckpt);
  CliRun r = Braid(dir,
                   absl::StrCat("plan zoo:mlp --cluster cpu-local --ranks 2 --budget-s 1 --json "
                                "--db ",
                                dir, "/profiles.db"),
                   absl::StrCat("BRAID_GNN_CHECKPOINT=", ckpt, " BRAID_CPU_DEVICE_KIND=",
                                kDeviceKind));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["fused_estimator"], "none");
  EXPECT_THAT(r.err, HasSubstr(ckpt + ": is a directory"));
}

// ---- plan files ----------------------------------------------------------------

TEST(UntrustedFilesE2eTest, ADeeplyNestedPlanFileIsExitCodeTwoWithOneLine) {
  const std::string dir = e2e::TempDir("untrusted_nested_plan");
  const std::string path = dir + "/nested.json";
  {
    std::ofstream out(path);
    for (int i = 0; i < 100000; ++i) out << "{\"plan\": ";
    out << "{}";
    for (int i = 0; i < 100000; ++i) out << "}";
  }
  ASSERT_GE(std::filesystem::file_size(path), 1000000u);
  for (const std::string cmd : {"simulate zoo:mlp --cluster cpu-local --ranks 2 --db none",
                                "run zoo:mlp --estimator none"}) {
    CliRun r = Braid(dir, absl::StrCat(cmd, " --plan ", path));
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << cmd << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(path + ": JSON nested more than 64 levels deep")) << cmd;
  }
}

}  // namespace
}  // namespace braid
