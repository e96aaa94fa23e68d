// braid-worker: a profiling worker for braid-server, and the node-local plan
// cache for training jobs. See worker/worker_agent.h and worker/plan_cache.h.
//
//   braid-worker --server braid:50051 --token $BRAID_WORKER_TOKEN --device cpu   # or cuda, auto
//   braid-worker plan get --job job-0123456789abcdef --server braid:50051 \
//       --token $BRAID_CLIENT_TOKEN --cache-dir /var/cache/braid/plans -o plan.json
//   braid-worker activate --rank R --world-size W --rendezvous HOST:PORT \
//       (--job JOB --server ADDR --token T | --plan plan.json) --model M   # worker/activator.h
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "proto/strategy_client.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "worker/activator.h"
#include "worker/plan_cache.h"
#include "worker/timing.h"
#include "worker/worker_agent.h"

namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

struct Connection {
  std::string server;
  std::string token;
  std::string tls_ca;  // PEM roots; set: TLS
};

std::shared_ptr<grpc::Channel> MakeChannel(const Connection& c, std::string* error) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!c.tls_ca.empty()) {
    std::ifstream in(c.tls_ca);
    if (!in) {
      *error = "--tls-ca: cannot read " + c.tls_ca;
      return nullptr;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ss.str();
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(c.server, creds, args);
}

int Fail(const absl::Status& s) {
  std::cerr << "braid-worker: " << s << "\n";
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int RunPlanGet(const Connection& c, const std::string& job, const std::string& cache_dir,
               const std::string& out_path, double timeout_s) {
  std::string error;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(c, &error);
  if (channel == nullptr) return Fail(absl::InvalidArgumentError(error));
  std::unique_ptr<braid::client::StrategyClient> client;
  if (!c.token.empty()) {
    braid::client::ClientOptions o;
    o.token = c.token;
    o.channel = channel;
    o.rpc_timeout_s = timeout_s;
    absl::StatusOr<std::unique_ptr<braid::client::StrategyClient>> made =
        braid::client::StrategyClient::Create(o);
    if (!made.ok()) return Fail(made.status());
    client = *std::move(made);
  }
  braid::worker::PlanFetcher fetch =
      [&](const std::string& id) -> absl::StatusOr<braid::v1::GetPlanResponse> {
    if (client == nullptr) return absl::UnavailableError("no --token: not asking the server");
    return client->GetPlan(id);
  };
  braid::worker::LocalPlanCache cache(cache_dir);
  absl::StatusOr<braid::worker::FetchedPlan> p = braid::worker::FetchPlanCached(fetch, cache, job);
  if (!p.ok()) return Fail(p.status());
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(p->plan, &json, o);
  if (p->from_local_cache) {
    std::cerr << "braid-worker: plan of " << job << " served from the local cache " << p->path
              << "\n";
  } else if (!p->cache_error.empty()) {
    std::cerr << "braid-worker: warning: plan of " << job << " fetched but not cached ("
              << p->cache_error << ")\n";
  } else {
    std::cerr << "braid-worker: plan of " << job << " fetched and cached at " << p->path << "\n";
  }
  if (out_path.empty()) {
    std::cout << json;
  } else {
    std::ofstream out(out_path, std::ios::trunc);
    out << json;
    if (!out) return Fail(absl::InternalError(out_path + ": write failed"));
  }
  return 0;
}

std::string CiMs(const std::vector<double>& s) {
  const braid::worker::MedianInterval ci = braid::worker::MedianConfidenceInterval(s);
  return absl::StrFormat("%10.3f  %s", ci.median * 1e3, braid::FormatInterval(ci, 1e3, 3));
}

// The verdict on the plan against one alternative interleaved with it, from
// the paired per-step differences `plan - other`: slower (or faster) only
// when the median's interval lies wholly above (below) 0. Clears
// `*no_slower` when the plan is slower.
const char* PairedVerdict(const std::vector<double>& plan_minus_other, bool* no_slower) {
  const braid::worker::MedianInterval ci =
      braid::worker::MedianConfidenceInterval(plan_minus_other);
  if (ci.low > 0) *no_slower = false;
  return ci.low > 0    ? "plan SLOWER beyond the interval"
         : ci.high < 0 ? "plan faster beyond the interval"
                       : "no difference beyond the interval";
}

// plan[i] - other[i] for the steps both have.
std::vector<double> PairedDifferences(const std::vector<double>& plan,
                                      const std::vector<double>& other) {
  std::vector<double> d;
  for (size_t i = 0; i < plan.size() && i < other.size(); ++i) d.push_back(plan[i] - other[i]);
  return d;
}

// Rank 0's report of an overlap plan (worker/activator.h): the plan's
// median step with its 95% CI beside predicted_step_s, and with --baseline
// the all-"none" steps and the paired difference.
int PrintOverlapActivation(const braid::worker::ActivateOptions& o,
                           const braid::worker::ActivationResult& r, bool json) {
  namespace w = braid::worker;
  std::string methods;
  for (w::DecomposeMethod m : r.overlap_methods) {
    absl::StrAppend(&methods, methods.empty() ? "" : ",", std::string(w::DecomposeMethodName(m)));
  }
  const w::OverlapTrainSpec& s = r.overlap_spec;
  if (json) {
    nlohmann::json j = {{"plan_sha256", r.plan_sha256},
                        {"verified_by", r.verified_by},
                        {"kind", "overlap_training"},
                        {"model", std::string(w::OverlapModelName(s.model))},
                        {"ranks", o.world},
                        {"methods", methods},
                        {"predicted_step_s", r.predicted_iteration_s},
                        {"plan_step_s", r.plan_iteration_s},
                        {"plan_loss", r.plan_loss},
                        {"baseline_step_s", r.baseline_iteration_s},
                        {"baseline_loss", r.baseline_loss}};
    for (size_t i = 0; i < r.compared_names.size(); ++i) {
      j["compared"][r.compared_names[i]] = r.compared_iteration_s[i];
    }
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "braid-worker activate: %d ranks, overlap plan %s (%s, rows=%d d_model=%d d_ff=%d blocks=%d; "
      "%d pairs: %s)\nverified on every rank: %s\n\n",
      o.world, r.plan_sha256.substr(0, 12), std::string(w::OverlapModelName(s.model)), s.rows,
      s.d_model, s.d_ff, s.blocks, r.overlap_methods.size(), methods, r.verified_by);
  std::cout << absl::StrFormat("%-10s %10s  %-20s %14s\n", "strategy", "median step ms",
                               "95% CI (or range)", "predicted ms");
  const w::MedianInterval m = w::MedianConfidenceInterval(r.plan_iteration_s);
  std::cout << absl::StrFormat("%-10s %s  %14.3f  (measured %+.1f%%)\n", "plan",
                               CiMs(r.plan_iteration_s), r.predicted_iteration_s * 1e3,
                               r.predicted_iteration_s > 0
                                   ? 100 * (m.median / r.predicted_iteration_s - 1)
                                   : 0.0);
  // Every alternative (no overlap, then every fixed method), interleaved
  // step by step with the plan, is judged the same way.
  bool no_slower = true;
  if (!r.baseline_iteration_s.empty()) {
    std::cout << absl::StrFormat("%-10s %s\n", "none", CiMs(r.baseline_iteration_s));
    const std::vector<double> d = PairedDifferences(r.plan_iteration_s, r.baseline_iteration_s);
    std::cout << absl::StrFormat("%-10s %s  %s (per interleaved step)\n", "plan - none", CiMs(d),
                                 PairedVerdict(d, &no_slower));
  }
  for (size_t k = 0; k < r.compared_names.size(); ++k) {
    const std::vector<double>& v = r.compared_iteration_s[k];
    std::cout << absl::StrFormat("%-10s %s\n", r.compared_names[k], CiMs(v));
    const std::vector<double> d = PairedDifferences(r.plan_iteration_s, v);
    std::cout << absl::StrFormat("%-10s %s  %s\n", "plan - " + r.compared_names[k], CiMs(d),
                                 PairedVerdict(d, &no_slower));
  }
  if (!r.compared_names.empty() || !r.baseline_iteration_s.empty()) {
    std::cout << absl::StrFormat(
        "\nthe plan is no slower than no overlap and every fixed method measured: %s\n",
        no_slower ? "yes" : "NO");
  }
  std::cout << absl::StrFormat("\n%d timed steps per rank (slowest rank per step); plan loss %.6g -> %.6g\n",
                               o.iterations, r.plan_loss.front(), r.plan_loss.back());
  return 0;
}

int RunActivate(const braid::worker::ActivateOptions& o, bool json) {
  absl::StatusOr<braid::worker::ActivationResult> r = braid::worker::Activate(o);
  if (!r.ok()) return Fail(r.status());
  if (o.rank != 0) {
    std::cerr << "braid-worker: rank " << o.rank << ": plan " << r->plan_sha256.substr(0, 12)
              << " verified and run\n";
    return 0;
  }
  if (r->overlap) return PrintOverlapActivation(o, *r, json);
  if (json) {
    nlohmann::json j = {{"plan_sha256", r->plan_sha256},
                        {"verified_by", r->verified_by},
                        {"graph_fingerprint", r->graph_fingerprint},
                        {"ranks", o.world},
                        {"fusion_groups", r->fusion_groups},
                        {"buckets", r->buckets},
                        {"predicted_iteration_s", r->predicted_iteration_s},
                        {"plan_iteration_s", r->plan_iteration_s},
                        {"baseline_iteration_s", r->baseline_iteration_s},
                        {"allreduce_results_wrong", r->plan_book.verify_failures},
                        {"gradients_not_reduced_once", r->plan_book.gradients_not_once}};
    if (r->report.has_value()) {
      j["report"] = {{"ranks_reported", r->report->ranks_reported()},
                     {"measured_iteration_s", r->report->measured_iteration_s()},
                     {"rolled_back", r->report->rolled_back()},
                     {"calibration", r->report->calibration()}};
    }
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  const braid::worker::ExecBookkeeping& b = r->plan_book;
  std::cout << absl::StrFormat(
      "braid-worker activate: %d ranks, plan %s (%d fusion groups, %d buckets), graph %s\n"
      "verified on every rank: %s\n\n",
      o.world, r->plan_sha256.substr(0, 12), r->fusion_groups, r->buckets, r->graph_fingerprint,
      r->verified_by);
  std::cout << absl::StrFormat("%-10s %10s  %-20s %14s\n", "strategy", "median ms", "95% CI (or range)",
                               "predicted ms");
  const braid::worker::MedianInterval m = braid::worker::MedianConfidenceInterval(r->plan_iteration_s);
  std::cout << absl::StrFormat("%-10s %s  %14.3f  (simulated; measured %+.1f%%)\n", "plan",
                               CiMs(r->plan_iteration_s), r->predicted_iteration_s * 1e3,
                               r->predicted_iteration_s > 0
                                   ? 100 * (m.median / r->predicted_iteration_s - 1)
                                   : 0.0);
  if (!r->baseline_iteration_s.empty()) {
    // The DDP-bucket baseline, interleaved iteration by iteration, is judged
    // as an overlap plan's alternatives are.
    bool no_slower = true;
    std::cout << absl::StrFormat("%-10s %s\n", "ddp", CiMs(r->baseline_iteration_s));
    const std::vector<double> d = PairedDifferences(r->plan_iteration_s, r->baseline_iteration_s);
    std::cout << absl::StrFormat("%-10s %s  %s (per interleaved iteration)\n", "plan - ddp",
                                 CiMs(d), PairedVerdict(d, &no_slower));
    std::cout << absl::StrFormat("\nthe plan is no slower than its DDP-bucket baseline: %s\n",
                                 no_slower ? "yes" : "NO");
  }
  std::cout << absl::StrFormat(
      "\n%d timed iterations per rank; %lld bucket allreduces, %s; allreduce results checked in "
      "warm-up: %lld, wrong: %lld\n",
      o.iterations, static_cast<long long>(b.allreduces_started),
      b.gradients_not_once == 0 ? "every gradient reduced once per iteration"
                                : absl::StrCat(b.gradients_not_once, " gradients NOT reduced once"),
      static_cast<long long>(b.buckets_verified), static_cast<long long>(b.verify_failures));
  if (r->report.has_value()) {
    const braid::v1::ReportMeasurementResponse& rep = *r->report;
    std::cout << absl::StrFormat("reported to %s: %d ranks, measured %.3f ms vs predicted %.3f ms",
                                 o.server, rep.ranks_reported(), rep.measured_iteration_s() * 1e3,
                                 rep.predicted_iteration_s() * 1e3);
    if (rep.calibration() > 0) std::cout << absl::StrFormat(", cluster calibration %.3f", rep.calibration());
    std::cout << "\n";
    if (rep.rolled_back()) std::cout << "ROLLED BACK: " << rep.rollback_reason() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  Connection conn;
  conn.server = EnvOr("BRAID_SERVER", "127.0.0.1:50051");
  braid::worker::WorkerAgentOptions o;
  // A worker on a GPU node measures the GPU unless told otherwise.
  o.device = "auto";
  std::string cache_dir = braid::worker::DefaultPlanCacheDir();
  CLI::App app{"braid-worker: profiling worker and node-local plan cache for braid-server"};
  app.fallthrough();
  app.add_option("--server", conn.server, "braid-server host:port (env BRAID_SERVER)")
      ->capture_default_str();
  app.add_option("--token", conn.token,
                 "bearer token: the worker token (env BRAID_WORKER_TOKEN); for `plan get` the "
                 "client token (env BRAID_CLIENT_TOKEN)");
  app.add_option("--tls-ca", conn.tls_ca, "PEM root certificates: use TLS");
  app.add_option("--cache-dir", cache_dir, "local plan cache directory (env BRAID_PLAN_CACHE)")
      ->capture_default_str();
  app.add_option("--device", o.device,
                 "profiler backend: cpu, cuda (GPU 0), cuda:N, or auto (a GPU when there is one, "
                 "else cpu); cuda needs a build with the CUDA toolkit")
      ->capture_default_str();
  app.add_option("--name", o.name, "worker name shown to operators (default: host name)");
  app.add_option("--slots", o.slots, "tasks per lease")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--lease-s", o.lease_s, "lease length asked for, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--idle-poll-s", o.idle_poll_s, "wait after an empty lease, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--backoff-max-s", o.backoff_max_s, "longest retry wait, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--repetitions", o.profile.repetitions, "timed samples per op")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--max-seconds-per-op", o.profile.max_seconds_per_op,
                 "stop sampling an op after this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  CLI::App* plan = app.add_subcommand("plan", "the node-local plan cache");
  CLI::App* get = plan->add_subcommand(
      "get", "fetch a job's plan from the server into the cache; serve the cached copy when the "
             "server is unreachable");
  std::string job, out_path;
  double timeout_s = 5;
  get->add_option("--job", job, "job id")->required();
  get->add_option("-o,--output", out_path, "write the plan JSON here (default: stdout)");
  get->add_option("--timeout-s", timeout_s, "server call deadline")->check(CLI::PositiveNumber);
  plan->require_subcommand(1);

  braid::worker::ActivateOptions act;
  CLI::App* activate = app.add_subcommand(
      "activate",
      "one training rank: meet the other ranks, receive the plan from rank 0, verify it, run "
      "training iterations with it and report their times (worker/activator.h)");
  activate->add_option("--rank", act.rank, "this rank")->required();
  activate->add_option("--world-size", act.world, "number of ranks")->required()->check(CLI::Range(1, 65536));
  activate->add_option("--rendezvous", act.rendezvous,
                       "HOST:PORT of the store rank 0 serves, on that address only; ranks join it "
                       "by proving to each other the plan secret (--plan) or, for --job, the "
                       "report credential, else the token")
      ->required();
  activate->add_option("--bind-host", act.bind_host,
                       "address for this rank's Gloo device (default: 127.0.0.1 for a loopback "
                       "rendezvous, else the host name's address)");
  activate->add_option("--job", act.job, "the server job whose plan to run (with --server, --token)");
  activate->add_option("--plan", act.plan_path, "a plan file instead (verified by its HMAC)");
  activate->add_option("--plan-hmac", act.plan_hmac, "the plan file's HMAC-SHA256 (default: <plan>.hmac)");
  activate->add_option("--secret-file", act.secret_file,
                       "the ranks' shared plan secret (default: $BRAID_PLAN_SECRET_FILE, $BRAID_PLAN_SECRET)");
  activate->add_option("--model", act.model, "the model: ONNX file, braid text graph or zoo:NAME (data-parallel plans; an overlap "
                       "plan carries its own)");
  activate->add_option("--batch", act.batch, "per-rank batch (the plan's)");
  activate->add_option("--optimizer", act.optimizer, "sgd or adam (the plan's)")->capture_default_str();
  activate->add_option("--warmup", act.warmup, "untimed iterations")->capture_default_str();
  activate->add_option("--iterations", act.iterations, "timed iterations")->capture_default_str();
  activate->add_flag("--baseline", act.baseline,
                     "interleave the plan's DDP-bucket baseline on the same ranks (reported too)");
  activate->add_flag("--compare-methods", act.compare_methods,
                     "overlap plans: also interleave every fixed method (none, looped, unrolled, "
                     "bidirectional on every pair) and report the plan against each");
  activate->add_flag("--pin-cores", act.pin_cores,
                     "pin rank r to core r mod cores before the group is made (overlap plans "
                     "are measured pinned)");
  activate->add_flag("!--no-report", act.report, "do not report the times to the server");
  activate->add_option("--report-credential-file", act.report_credential,
                       "file holding the job's report credential (default: env "
                       "BRAID_REPORT_CREDENTIAL); without one the times are not reported");
  bool activate_json = false;
  activate->add_flag("--json", activate_json, "rank 0 prints the result as JSON (iteration times included)");
  activate->add_option("--timeout-s", act.timeout_s,
                       "how long every rank may take to join, each collective may wait, and the "
                       "training may run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  if (activate->parsed()) {
    if (conn.token.empty()) conn.token = EnvOr("BRAID_CLIENT_TOKEN", "");
    act.server = conn.server;
    act.token = conn.token;
    act.tls_ca = conn.tls_ca;
    act.cache_dir = cache_dir;
    if (!act.report_credential.empty()) {
      std::ifstream in(act.report_credential);
      std::string cred;
      if (!(in >> cred)) {
        std::cerr << "braid-worker activate: --report-credential-file: cannot read "
                  << act.report_credential << "\n";
        return 2;
      }
      act.report_credential = cred;
    } else {
      act.report_credential = EnvOr("BRAID_REPORT_CREDENTIAL", "");
    }
    if (!act.job.empty() && act.report && act.report_credential.empty() && act.rank == 0) {
      std::cerr << "braid-worker activate: note: no report credential (BRAID_REPORT_CREDENTIAL "
                   "or --report-credential-file): the times are not reported to the server\n";
    }
    return RunActivate(act, activate_json);
  }
  if (get->parsed()) {
    if (conn.token.empty()) conn.token = EnvOr("BRAID_CLIENT_TOKEN", "");
    return RunPlanGet(conn, job, cache_dir, out_path, timeout_s);
  }

  if (conn.token.empty()) conn.token = EnvOr("BRAID_WORKER_TOKEN", "");
  o.token = conn.token;
  // SIGINT/SIGTERM blocked before any thread starts, then handled by one
  // thread: finish the task in hand, report it, exit.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::string error;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(conn, &error);
  if (channel == nullptr) return Fail(absl::InvalidArgumentError(error));
  braid::worker::WorkerAgent agent(channel, o);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    LOG(INFO) << "signal " << sig << ": stopping";
    agent.Stop();
  });
  LOG(INFO) << "braid-worker: server " << conn.server << ", device " << o.device;
  absl::Status s = agent.Run();
  if (!s.ok()) {
    std::cerr << "braid-worker: " << s << "\n";
    std::_Exit(s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  pthread_kill(waiter.native_handle(), SIGTERM);  // no-op when the signal already came
  waiter.join();
  const braid::worker::WorkerAgentStats st = agent.stats();
  LOG(INFO) << "stopped: " << st.reported_ok << " measured, " << st.reported_error
            << " failed, " << st.duplicates << " duplicates";
  return 0;
}
