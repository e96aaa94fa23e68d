// Measured feedback end to end, against real braid-server processes on
// loopback: who may report a job's times, what a losing run changes, how an
// operator lists and undoes rollbacks, what calibrates a cluster, and what
// a flood of reports costs.
//  1. A forged or foreign report (another job's credential, none, a world
//     of one, a second report of a rank) is refused and the shared plan
//     entry is untouched; a genuine losing run rolls back its own job only;
//     `braid plan rollbacks` lists it and `braid plan restore` (admin token)
//     undoes it, the client token cannot.
//  2. An implausible report is refused (a denormal time) or kept for its job
//     only (3600 s against a millisecond prediction): the cluster's
//     calibration does not move.
//  3. Over 1,000 reports, the later reports take no longer than the first
//     (each folds into one run aggregate), the database stays small, and a
//     client past its report rate gets RESOURCE_EXHAUSTED.
//  8. Invalid UTF-8 in a report's text fields is INVALID_ARGUMENT naming the
//     field, not a request the RPC layer drops.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "proto/strategy_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace braid {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "feedback-client";
constexpr char kWorkerToken[] = "feedback-worker";
constexpr char kAdminToken[] = "feedback-admin";

std::unique_ptr<client::StrategyClient> Client(int port, const std::string& token = kClientToken) {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = token;
  o.rpc_timeout_s = 30;
  return *client::StrategyClient::Create(o);
}

class Server {
 public:
  Server(const std::string& dir, std::vector<std::string> extra) : dir_(dir) {
    port_ = e2e::FreePort();
    std::vector<std::string> argv = {BRAID_SERVER_BIN, "--listen",
                                     absl::StrCat("127.0.0.1:", port_), "--db",
                                     dir + "/service.db", "--client-token", kClientToken,
                                     "--worker-token", kWorkerToken, "--admin-token", kAdminToken};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<e2e::Process>(argv, dir + "/server.log");
    client_ = Client(port_);
    // Readiness, not a short deadline: a loaded machine starts slowly.
    EXPECT_TRUE(e2e::WaitFor([&] { return !proc_->Alive() || client_->ListJobs(1).ok(); }, 120));
    EXPECT_TRUE(proc_->Alive()) << "braid-server exited; see " << dir;
  }
  int port() const { return port_; }
  client::StrategyClient& c() { return *client_; }
  bool alive() { return proc_->Alive(); }

 private:
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<e2e::Process> proc_;
  std::unique_ptr<client::StrategyClient> client_;
};

// zoo:mlp on 2 cpu-local ranks; `seed` makes a distinct plan-cache key.
v1::SubmitGraphResponse SubmitAndWait(client::StrategyClient& c, int seed) {
  v1::SubmitGraphRequest req;
  req.set_zoo_model("mlp");
  req.set_cluster_preset("cpu-local");
  req.mutable_options()->set_ranks(2);
  req.mutable_options()->set_seed(seed);
  req.mutable_options()->set_budget_s(10);
  req.mutable_options()->set_patience(4);
  absl::StatusOr<v1::SubmitGraphResponse> sub = c.Submit(req);
  EXPECT_TRUE(sub.ok()) << sub.status();
  if (!sub.ok()) return {};
  EXPECT_EQ(sub->report_credential().size(), 64u);
  absl::StatusOr<v1::JobStatus> done = c.Watch(sub->job_id(), [](const v1::JobStatus&) {});
  EXPECT_TRUE(done.ok() && done->phase() == v1::JOB_PHASE_DONE) << done.status();
  return *sub;
}

absl::StatusOr<std::string> StartRun(client::StrategyClient& c, const std::string& job,
                                     const std::string& credential, int world = 2) {
  v1::StartRunRequest r;
  r.set_job_id(job);
  r.set_report_credential(credential);
  r.set_world_size(world);
  r.set_source("feedback_e2e_test");
  ASSIGN_OR_RETURN(v1::StartRunResponse run, c.StartRun(r));
  return run.attempt_id();
}

v1::ReportMeasurementRequest Report(const std::string& job, const std::string& credential,
                                    const std::string& attempt, int rank,
                                    const std::vector<double>& plan_s,
                                    const std::vector<double>& baseline_s = {}) {
  v1::ReportMeasurementRequest r;
  r.set_job_id(job);
  r.set_report_credential(credential);
  r.set_attempt_id(attempt);
  r.set_rank(rank);
  r.set_world_size(2);
  r.set_source("feedback_e2e_test");
  for (double t : plan_s) r.add_plan_iteration_s(t);
  for (double t : baseline_s) r.add_baseline_iteration_s(t);
  return r;
}

// Eight interleaved pairs where the plan loses by about 2 ms.
std::vector<double> LosingPlan() { return {12e-3, 12.1e-3, 12.2e-3, 12e-3, 12.1e-3, 12.2e-3, 12e-3, 12.1e-3}; }
std::vector<double> LosingBaseline() { return {10e-3, 10.1e-3, 10e-3, 10.1e-3, 10e-3, 10.1e-3, 10e-3, 10.1e-3}; }

TEST(FeedbackE2eTest, ForeignReportsAreRefusedAndOnlyTheJobsOwnRunRollsItBack) {
  const std::string dir = e2e::TempDir("feedback_trust");
  Server s(dir, {});
  client::StrategyClient& c = s.c();
  const v1::SubmitGraphResponse a = SubmitAndWait(c, 11);
  const v1::SubmitGraphResponse b = SubmitAndWait(c, 11);  // the same cache entry
  ASSERT_TRUE(b.status().from_cache());
  const std::string searched = c.GetPlan(a.job_id())->plan_sha256();

  // Forged: another job's credential, none, a world of one, a made-up run.
  EXPECT_EQ(StartRun(c, a.job_id(), b.report_credential()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StartRun(c, a.job_id(), a.report_credential(), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> run = StartRun(c, a.job_id(), a.report_credential());
  ASSERT_TRUE(run.ok()) << run.status();
  v1::ReportMeasurementRequest forged = Report(a.job_id(), b.report_credential(), *run, 0,
                                               LosingPlan(), LosingBaseline());
  EXPECT_EQ(c.ReportMeasurement(forged).status().code(), absl::StatusCode::kPermissionDenied);
  forged.clear_report_credential();
  EXPECT_EQ(c.ReportMeasurement(forged).status().code(), absl::StatusCode::kUnauthenticated);
  forged = Report(a.job_id(), a.report_credential(), *run, 0, LosingPlan(), LosingBaseline());
  forged.set_world_size(1);
  forged.set_rank(0);
  EXPECT_EQ(c.ReportMeasurement(forged).status().code(), absl::StatusCode::kInvalidArgument);
  forged = Report(a.job_id(), a.report_credential(), "run-0123456789abcdef", 0, LosingPlan(),
                  LosingBaseline());
  EXPECT_EQ(c.ReportMeasurement(forged).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(c.GetPlan(a.job_id())->rolled_back());

  // A genuine run: rank 0 once, a second report of rank 0 refused, rank 1.
  ASSERT_TRUE(c.ReportMeasurement(Report(a.job_id(), a.report_credential(), *run, 0, LosingPlan(),
                                         LosingBaseline()))
                  .ok());
  EXPECT_EQ(c.ReportMeasurement(Report(a.job_id(), a.report_credential(), *run, 0,
                                       std::vector<double>(8, 1.0), LosingBaseline()))
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  absl::StatusOr<v1::ReportMeasurementResponse> last = c.ReportMeasurement(
      Report(a.job_id(), a.report_credential(), *run, 1, LosingPlan(), LosingBaseline()));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(last->rolled_back());
  EXPECT_NEAR(last->measured_iteration_s(), 12.1e-3, 1e-9);  // rank 0's real times, not 1 s
  // Only job a's plan: b, and a job submitted now, get the searched plan.
  EXPECT_TRUE(c.GetPlan(a.job_id())->rolled_back());
  EXPECT_FALSE(c.GetPlan(b.job_id())->rolled_back());
  EXPECT_EQ(c.GetPlan(b.job_id())->plan_sha256(), searched);
  const v1::SubmitGraphResponse d = SubmitAndWait(c, 11);
  EXPECT_FALSE(c.GetPlan(d.job_id())->rolled_back());

  // The operator's view and undo: listed with the audit log; the client
  // token cannot restore, the admin token can.
  const std::string server = absl::StrCat("127.0.0.1:", s.port());
  e2e::CommandResult listed = e2e::RunCommand(absl::StrCat(
      BRAID_BIN, " plan rollbacks --server ", server, " --token ", kClientToken, " 2>&1"));
  EXPECT_EQ(listed.exit_code, 0) << listed.out;
  EXPECT_THAT(listed.out, HasSubstr(absl::StrCat("job ", a.job_id(), "  job     in effect")));
  EXPECT_THAT(listed.out, HasSubstr("rollback:job"));
  EXPECT_THAT(listed.out, HasSubstr("by: ranks of job " + a.job_id() + " (credential "));
  std::unique_ptr<client::StrategyClient> as_client = Client(s.port());
  v1::RestorePlanRequest restore;
  restore.set_job_id(a.job_id());
  EXPECT_FALSE(as_client->RestorePlan(restore).ok());
  e2e::CommandResult undone = e2e::RunCommand(absl::StrCat(
      BRAID_BIN, " plan restore ", a.job_id(), " --reason 'noisy node' --server ", server,
      " --token ", kClientToken, " --admin-token ", kAdminToken, " 2>&1"));
  EXPECT_EQ(undone.exit_code, 0) << undone.out;
  EXPECT_THAT(undone.out, HasSubstr("is served its searched plan now"));
  EXPECT_EQ(c.GetPlan(a.job_id())->plan_sha256(), searched);
  absl::StatusOr<v1::ListRollbacksResponse> audit = c.ListRollbacks({});
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_GE(audit->audit_size(), 2);
  EXPECT_EQ(audit->audit(0).action(), "restore");
  EXPECT_THAT(audit->audit(0).actor(), HasSubstr("operator"));
  EXPECT_THAT(audit->audit(0).detail(), HasSubstr("noisy node"));
  EXPECT_EQ(audit->audit(1).action(), "rollback:job");
  EXPECT_THAT(audit->audit(1).actor(), HasSubstr("ranks of job " + a.job_id()));

  // A second job's losing run: now two jobs lost with the plan, and the
  // shared entry (every job of the key, new ones too) serves the baseline.
  absl::StatusOr<std::string> run_b = StartRun(c, b.job_id(), b.report_credential());
  ASSERT_TRUE(run_b.ok());
  absl::StatusOr<std::string> run_a2 = StartRun(c, a.job_id(), a.report_credential());
  ASSERT_TRUE(run_a2.ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(c.ReportMeasurement(Report(b.job_id(), b.report_credential(), *run_b, r,
                                           LosingPlan(), LosingBaseline()))
                    .ok());
  }
  EXPECT_TRUE(c.GetPlan(b.job_id())->rolled_back());
  EXPECT_FALSE(c.GetPlan(d.job_id())->rolled_back());  // a was restored: one job so far
  EXPECT_TRUE(s.alive());
}

TEST(FeedbackE2eTest, ImplausibleReportsDoNotMoveTheCalibration) {
  const std::string dir = e2e::TempDir("feedback_calibration");
  Server s(dir, {});
  client::StrategyClient& c = s.c();
  const v1::SubmitGraphResponse a = SubmitAndWait(c, 21);
  const double predicted = c.GetPlan(a.job_id())->plan().predicted_iteration_s();
  absl::StatusOr<std::string> run = StartRun(c, a.job_id(), a.report_credential());
  ASSERT_TRUE(run.ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(c.ReportMeasurement(Report(a.job_id(), a.report_credential(), *run, r,
                                           std::vector<double>(4, 1.08 * predicted)))
                    .ok());
  }
  const double calibration = c.GetPlan(a.job_id())->calibration();
  EXPECT_NEAR(calibration, 1.08, 1e-6);

  const v1::SubmitGraphResponse b = SubmitAndWait(c, 22);
  absl::StatusOr<std::string> run_b = StartRun(c, b.job_id(), b.report_credential());
  ASSERT_TRUE(run_b.ok());
  // A denormal is no time: refused, naming the field.
  absl::StatusOr<v1::ReportMeasurementResponse> denormal = c.ReportMeasurement(
      Report(b.job_id(), b.report_credential(), *run_b, 0, {5e-324, 5e-324}));
  EXPECT_EQ(denormal.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(denormal.status().message(), HasSubstr("plan_iteration_s[0]"));
  // An hour per iteration against milliseconds: kept for its job only.
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::ReportMeasurementResponse> far = c.ReportMeasurement(
        Report(b.job_id(), b.report_credential(), *run_b, r, {3600, 3600}));
    ASSERT_TRUE(far.ok()) << far.status();
    EXPECT_NEAR(far->calibration(), calibration, 1e-12);
  }
  EXPECT_NEAR(c.GetJob(b.job_id())->measured_iteration_s(), 3600, 1e-9);
  EXPECT_NEAR(c.GetPlan(a.job_id())->calibration(), calibration, 1e-12);
  EXPECT_NEAR(c.GetPlan(b.job_id())->calibration(), calibration, 1e-12);

  // Invalid UTF-8 and foreign ids: INVALID_ARGUMENT naming the field.
  v1::ReportMeasurementRequest bad = Report(b.job_id(), b.report_credential(), *run_b, 0, {0.01});
  bad.set_source(std::string("\xff\xfe\x1b[2J", 6));
  absl::StatusOr<v1::ReportMeasurementResponse> utf8 = c.ReportMeasurement(bad);
  EXPECT_EQ(utf8.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(utf8.status().message(), HasSubstr("source: not valid UTF-8"));
  bad = Report(std::string("job-\xff\x1b", 6), b.report_credential(), *run_b, 0, {0.01});
  EXPECT_THAT(c.ReportMeasurement(bad).status().message(), HasSubstr("job_id:"));
  EXPECT_EQ(c.GetJob(std::string("\xc3\x28", 2)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.alive());
}

TEST(FeedbackE2eTest, AThousandReportsCostWhatTheFirstDidAndARateLimitHolds) {
  const std::string dir = e2e::TempDir("feedback_flood");
  Server s(dir, {"--report-rate", "1000000", "--report-burst", "1000000", "--max-runs-per-job",
                 "1000"});
  client::StrategyClient& c = s.c();
  const v1::SubmitGraphResponse a = SubmitAndWait(c, 31);
  std::vector<double> times(100);
  for (size_t i = 0; i < times.size(); ++i) times[i] = 0.010 + 1e-5 * (i % 7);
  std::vector<double> latency_ms;
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<std::string> run = StartRun(c, a.job_id(), a.report_credential());
    ASSERT_TRUE(run.ok()) << run.status();
    for (int r = 0; r < 2; ++r) {
      const v1::ReportMeasurementRequest req =
          Report(a.job_id(), a.report_credential(), *run, r, times, times);
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<v1::ReportMeasurementResponse> rep = c.ReportMeasurement(req);
      latency_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      ASSERT_TRUE(rep.ok()) << rep.status();
    }
  }
  auto p50 = [&](size_t from, size_t to) {
    std::vector<double> v(latency_ms.begin() + from, latency_ms.begin() + to);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double first = p50(0, 100), late = p50(900, 1000);
  RecordProperty("report_p50_first_100_ms", absl::StrCat(first));
  RecordProperty("report_p50_900_1000_ms", absl::StrCat(late));
  std::cout << "report latency p50: reports 1-100 " << first << " ms, reports 900-1000 " << late
            << " ms\n";
  EXPECT_LE(late, 2 * first + 0.5) << "reports grew slower with the stored ones";
  // Storage: one aggregate per run and one summary per rank, no per-rank arrays.
  const double db_mb = static_cast<double>(std::filesystem::file_size(dir + "/service.db") +
                                           (std::filesystem::exists(dir + "/service.db-wal")
                                                ? std::filesystem::file_size(dir + "/service.db-wal")
                                                : 0)) /
                       (1 << 20);
  std::cout << "database after 1,000 reports of 100 iterations: " << db_mb << " MiB\n";
  EXPECT_LT(db_mb, 16);

  // A second server whose clients may send 3 at once, then 1 per second.
  const std::string dir2 = e2e::TempDir("feedback_rate");
  Server limited(dir2, {"--report-rate", "1", "--report-burst", "3"});
  const v1::SubmitGraphResponse b = SubmitAndWait(limited.c(), 32);
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<std::string> run = StartRun(limited.c(), b.job_id(), b.report_credential());
    if (run.status().code() == absl::StatusCode::kResourceExhausted) ++refused;
  }
  EXPECT_GE(refused, 2);
  EXPECT_TRUE(s.alive());
}

}  // namespace
}  // namespace braid
