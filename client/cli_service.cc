// The service commands of the `braid` CLI: submit a model to a strategy
// service and follow its search, read jobs and plans, explain a plan,
// cancel, list workers, and `braid bench service`. With no --server (and no
// BRAID_SERVER) they use the embedded service (client/service_session.h).
//
//   braid submit zoo:resnet50 --cluster disco-a          # embedded, prints the plan
//   braid submit model.onnx --cluster dgx-h100 --server braid:50051 --token $T
//   braid status JOB | braid jobs | braid workers | braid cancel JOB
//   braid plan get JOB [--trace iteration.json] [--summary] [-o plan.json]
//   braid plan explain JOB
//   braid submit zoo:mlp --cluster dgx-h100 --parallel   # parallelization + fusion
//   braid plan rollbacks [JOB] | braid plan restore JOB | braid plan confirm-rollback JOB
//
// A parallel plan (`--parallel`, Plan.parallel) names the per-device training
// graph of its strategy: `plan get --trace` and `plan explain` rebuild that
// graph from the plan itself (its device graph text and gradient groups)
// with the job's cluster (the embedded store's, or --cluster for a remote
// server) and price its buckets on the data group (search::DataGroupCostModel).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "client/cli.h"
#include "client/job_plan_file.h"
#include "client/progress_line.h"
#include "client/planning.h"
#include "client/service_session.h"
#include "costmodel/comm_model.h"
#include "costmodel/simulator.h"
#include "google/protobuf/util/json_util.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "search/baselines.h"
#include "search/lowering.h"
#include "search/overlap_plan.h"
#include "search/parallel_graph.h"
#include "server/cluster_convert.h"
#include "server/store.h"

namespace braid::client {
namespace {

// Names, errors and ids come from other users and workers: a terminal sees
// them with control characters escaped, so no name can move the cursor,
// clear the screen or forge a line of `braid jobs`.
std::string Esc(std::string_view s) { return base::EscapeForDisplay(s); }


namespace v1 = braid::v1;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

void AddService(CLI::App* c, ServiceArgs& a) {
  a.server = EnvOr("BRAID_SERVER", "");
  a.token = EnvOr("BRAID_CLIENT_TOKEN", "");
  c->add_option("--server", a.server,
                "braid-server host:port (env BRAID_SERVER); none: the embedded service");
  c->add_option("--token", a.token, "client bearer token (env BRAID_CLIENT_TOKEN)");
  c->add_option("--tls-ca", a.tls_ca, "PEM root certificates: connect with TLS");
  a.admin_token = EnvOr("BRAID_ADMIN_TOKEN", "");
  c->add_option("--admin-token", a.admin_token,
                "the server's admin token, for operator calls (env BRAID_ADMIN_TOKEN)");
  c->add_option("--service-db", a.service_db,
                "embedded: jobs/plans SQLite file (default: service.db beside the profile store, "
                "env BRAID_SERVICE_DB)");
  c->add_option("--profile-db", a.profile_db,
                "embedded: profile store (default: the one `braid plan` uses, env BRAID_DB)");
}

std::string PhaseName(v1::JobPhase p) {
  std::string n = v1::JobPhase_Name(p);
  n = n.substr(std::string("JOB_PHASE_").size());
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return n;
}

bool Final(v1::JobPhase p) {
  return p == v1::JOB_PHASE_DONE || p == v1::JOB_PHASE_FAILED || p == v1::JOB_PHASE_CANCELLED;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

double Ms(double s) { return s * 1e3; }

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open for writing"));
  out << text;
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// ---- submit -------------------------------------------------------------------

struct SubmitArgs {
  ServiceArgs service;
  std::string model;
  std::string cluster = "cpu-local";
  std::string name;
  int ranks = 0, batch = 0, beta = 0, patience = 0;
  double alpha = 0, budget_s = 0;
  int64_t seed = -1;
  bool json = false, no_wait = false, no_worker = false;
  std::string op_fusion = "on";
  bool parallel = false;
  std::string strategy_row;  // --strategy
  bool no_pipeline = false;  // --no-pipeline
  bool sync_batch_norm = false;  // --sync-batchnorm
  std::string credential_out;
};

// The job's report credential goes where the user said (a file only they
// can read), else to stderr for a remote server: the training ranks need it
// to report. The embedded service lives only as long as this process, so
// no rank reports to it later.
absl::Status KeepCredential(const SubmitArgs& a, const v1::SubmitGraphResponse& sub,
                            bool embedded) {
  if (sub.report_credential().empty()) return absl::OkStatus();
  if (a.credential_out.empty()) {
    if (embedded) return absl::OkStatus();
    std::cerr << "braid: job " << sub.job_id() << "'s report credential (its training ranks need "
              << "it: BRAID_REPORT_CREDENTIAL): " << sub.report_credential() << "\n";
    return absl::OkStatus();
  }
  const int fd = ::open(a.credential_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--credential-out: cannot write ",
                                                   a.credential_out, ": ", std::strerror(errno)));
  }
  const std::string text = sub.report_credential() + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("--credential-out: short write to ", a.credential_out));
  return absl::OkStatus();
}

absl::StatusOr<v1::SubmitGraphRequest> BuildRequest(const SubmitArgs& a) {
  v1::SubmitGraphRequest req;
  if (a.model.rfind("zoo:", 0) == 0) {
    req.set_zoo_model(a.model.substr(4));
  } else {
    std::ifstream in(a.model, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(a.model, ": no such file"));
    std::stringstream ss;
    ss << in.rdbuf();
    if (a.model.size() > 5 && a.model.substr(a.model.size() - 5) == ".onnx") {
      req.set_onnx(ss.str());
    } else {
      req.set_graph_text(ss.str());
    }
  }
  if (std::filesystem::is_regular_file(a.cluster)) {
    ASSIGN_OR_RETURN(costmodel::ClusterSpec c, costmodel::LoadCluster(a.cluster));
    *req.mutable_cluster_spec() = server::ClusterToProto(c);
  } else {
    req.set_cluster_preset(a.cluster);
  }
  v1::SearchOptions* o = req.mutable_options();
  if (a.alpha > 0) o->set_alpha(a.alpha);
  if (a.beta > 0) o->set_beta(a.beta);
  if (a.seed >= 0) o->set_seed(static_cast<uint64_t>(a.seed));
  if (a.budget_s > 0) o->set_budget_s(a.budget_s);
  if (a.ranks > 0) o->set_ranks(a.ranks);
  if (a.patience > 0) o->set_patience(a.patience);
  if (a.batch > 0) o->set_batch(a.batch);
  if (a.op_fusion == "off") o->set_op_fusion(false);
  if (a.parallel) o->set_parallel(true);
  if (!a.strategy_row.empty()) o->set_strategy_row(a.strategy_row);
  if (a.no_pipeline) o->set_no_pipeline(true);
  if (a.sync_batch_norm) o->set_sync_batch_norm(true);
  req.set_name(a.name.empty() ? a.model : a.name);
  return req;
}

// One status line: a bar over the time budget, phase, best, candidates.
class Progress {
 public:
  explicit Progress(double budget_s) : budget_s_(budget_s), line_(stderr) {}
  void Update(const v1::JobStatus& s) {
    const std::string phase = PhaseName(s.phase());
    std::string text;
    if (line_.tty()) {
      const double total = s.elapsed_s() + s.eta_s() > 0 ? s.elapsed_s() + s.eta_s() : budget_s_;
      const double frac = Final(s.phase()) ? 1.0 : std::clamp(s.elapsed_s() / total, 0.0, 1.0);
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(frac * kWidth);
      text = absl::StrFormat("[%s] %-10s best %10.3f ms  %8d candidates  %6.1f s",
                             std::string(filled, '#') + std::string(kWidth - filled, '.'), phase,
                             Ms(s.best_cost_s()), static_cast<long long>(s.candidates_evaluated()),
                             s.elapsed_s());
    } else {
      text = absl::StrFormat("braid: %s %s: best %.3f ms, %d candidates, %.1f s", s.job_id(), phase,
                             Ms(s.best_cost_s()), static_cast<long long>(s.candidates_evaluated()),
                             s.elapsed_s());
    }
    if (Final(s.phase())) {
      line_.Finish(text);
    } else {
      line_.Update(text, /*force=*/phase != last_phase_);
    }
    last_phase_ = phase;
  }

 private:
  double budget_s_;
  ProgressLine line_;
  std::string last_phase_;
};

int CountFused(const v1::Plan& p) {
  int n = 0;
  for (const v1::FusionGroup& g : p.fusion_groups()) n += g.ops_size();
  return n;
}

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (int64_t{1} << 30); }

// The strategy table of a parallel plan (each strategy fused on its
// per-device graph and simulated by the service) and the chosen one. The
// rows above it (baselines, braid) are per device, on the chosen strategy's
// per-device training graph.
void PrintParallelSummary(const v1::Plan& plan) {
  const v1::ParallelPlan& p = plan.parallel();
  // Each row's program simulated (what the ranks run), beside the per-device
  // graph's iteration.
  std::cout << absl::StrFormat("\n%-20s %9s %12s %14s  %s\n", "parallel strategy", "D x M",
                               "program ms", "iteration ms", "");
  for (const v1::StrategyTime& t : p.strategies()) {
    const bool ok = t.status() == "ok";
    std::string note = t.strategy() == p.strategy()
                           ? std::string(p.chosen_by() == "request" ? "chosen (--strategy)" : "chosen")
                       : ok                         ? std::string()
                                                    : Esc(t.status());
    if (ok && t.program_s() <= 0 && !t.no_program().empty())
      note = absl::StrCat(note, note.empty() ? "" : "; ", "no program: ", Esc(t.no_program()));
    std::cout << absl::StrFormat(
        "%-20s %9s %12s %14s  %s\n", t.strategy(),
        ok ? absl::StrCat(t.data_degree(), " x ", t.model_degree()) : std::string("-"),
        t.program_s() > 0 ? absl::StrFormat("%.3f", Ms(t.program_s())) : std::string("-"),
        ok ? absl::StrFormat("%.3f", Ms(t.iteration_s())) : std::string("-"), note);
  }
  std::cout << absl::StrFormat(
      "\nchosen               %s: D x M = %d x %d over %d devices%s\n"
      "per device           %.2f GiB of %.0f GiB, %d forward collectives\n",
      p.strategy(), p.data_degree(), p.model_degree(), p.degree(),
      p.chosen_by().empty() ? std::string() : absl::StrCat(", chosen by the ", p.chosen_by()),
      GiB(p.memory_per_device_bytes()), GiB(p.device_memory_bytes()), p.forward_collectives());
  if (p.has_program()) {
    const v1::DeviceProgram& prog = p.program();
    std::cout << absl::StrFormat(
        "program              row %s on mesh %s, model %s, program %s\n", Esc(prog.row()),
        prog.mesh().empty() ? std::string("[]") : absl::StrJoin(prog.mesh(), "x"),
        Esc(prog.model_fingerprint()), Esc(prog.program_fingerprint()));
  } else if (!p.program_error().empty()) {
    std::cout << "program              none: " << Esc(p.program_error()) << "\n";
  }
  if (p.overlaps_size() > 0) {
    int overlapped = 0;
    double gain = 0;
    for (const v1::OverlapChoice& o : p.overlaps()) {
      if (o.method() != "none") ++overlapped;
      gain += o.none_s() - o.chosen_s();
    }
    std::cout << absl::StrFormat(
        "overlap              %d tensor-parallel pairs, %d overlapped, %.3f ms predicted gain\n",
        p.overlaps_size(), overlapped, Ms(gain));
  }
}

// The stored overlap choices of a parallel plan, as ApplyOverlaps takes them.
absl::StatusOr<std::vector<search::OverlapChoice>> OverlapsOf(const v1::ParallelPlan& par) {
  std::vector<search::OverlapChoice> out;
  for (const v1::OverlapChoice& o : par.overlaps()) {
    search::OverlapChoice c;
    c.collective_op = o.collective_op();
    absl::StatusOr<costmodel::OverlapMethod> m = costmodel::ParseOverlapMethod(o.method());
    if (!m.ok()) return absl::DataLossError(absl::StrCat("plan.parallel.overlaps: ", m.status().message()));
    c.method = *m;
    c.tile_rows = o.tile_rows();
    c.gemm_s = o.gemm_s();
    c.none_s = o.none_s();
    c.chosen_s = o.chosen_s();
    out.push_back(std::move(c));
  }
  return out;
}

void PrintPlanSummary(const v1::JobStatus& job, const v1::GetPlanResponse& r) {
  std::cout << absl::StrFormat("job %s (%s): %s, graph %s\n\n", r.job_id(), Esc(job.name()),
                               r.from_cache() ? "plan from the plan cache" : "searched",
                               r.plan().graph_fingerprint());
  std::cout << absl::StrFormat("%-20s %14s %12s %12s %9s\n", "strategy", "iteration ms",
                               "compute ms", "comm ms", "overlap");
  const v1::BaselineEntry* best = nullptr;
  for (const v1::BaselineEntry& b : r.baselines()) {
    std::cout << absl::StrFormat("%-20s %14.3f %12.3f %12.3f %9.3f\n", b.name(),
                                 Ms(b.iteration_s()), Ms(b.compute_s()), Ms(b.comm_s()),
                                 b.overlap_ratio());
    if (best == nullptr || b.iteration_s() < best->iteration_s()) best = &b;
  }
  const double t = r.plan().predicted_iteration_s();
  // Plans stored before their compute and comm figures were kept show "-".
  const bool figures = r.plan().has_predicted_compute_s() && r.plan().has_predicted_comm_s();
  auto fig = [&](double v, const char* fmt) -> std::string {
    return figures ? absl::StrFormat(fmt, v) : "-";
  };
  const double compute = r.plan().predicted_compute_s(), comm = r.plan().predicted_comm_s();
  std::cout << absl::StrFormat(
      "%-20s %14.3f %12s %12s %9s\n", r.rolled_back() ? "braid (rolled back)" : "braid", Ms(t),
      fig(Ms(compute), "%.3f"), fig(Ms(comm), "%.3f"),
      t > 0 ? fig((compute + comm) / t, "%.3f") : std::string("-"));
  std::cout << absl::StrFormat("%-20s %14.3f\n\n", "fully_overlapped", Ms(r.fo_bound_s()));
  // Mostly datasheet priors behind the prediction: the speed-up says so.
  const bool known_sources = r.has_cost_sources();
  const bool from_priors = known_sources && r.cost_sources().prior() >= 0.5;
  if (best != nullptr && t > 0) {
    std::cout << absl::StrFormat(
        "best baseline        %s\n"
        "speed-up vs best     %.1f%%  ((T_best - T_braid) / T_braid)%s\n",
        best->name(), 100 * search::Speedup(best->iteration_s(), t),
        from_priors ? "; simulated, from priors" : "");
  }
  if (known_sources) {
    const v1::CostSources& s = r.cost_sources();
    std::cout << absl::StrFormat(
        "cost sources         measured %.1f%%, gnn %.1f%%, corrected_roofline %.1f%%, prior "
        "%.1f%% (of braid's predicted compute time)\n",
        100 * s.measured(), 100 * s.gnn(), 100 * s.corrected_roofline(), 100 * s.prior());
  }
  std::cout << absl::StrFormat(
      "search               %.1f s, %d candidates, plan origin %s\n"
      "plan                 %d fused kernels covering %d ops, %d AllReduce buckets\n",
      job.elapsed_s(), static_cast<long long>(job.candidates_evaluated()), r.origin(),
      r.plan().fusion_groups_size(), CountFused(r.plan()), r.plan().buckets_size());
  if (r.calibration() > 0) {
    std::cout << absl::StrFormat(
        "calibrated           %.3f ms  (predicted x %.3f: measured / predicted on this cluster)\n",
        Ms(r.calibrated_iteration_s()), r.calibration());
  }
  if (r.rolled_back()) {
    std::cout << absl::StrFormat(
        "rolled back          serving the DDP-bucket baseline: %s\n", Esc(r.rollback_reason()));
  }
  if (r.plan().has_parallel()) PrintParallelSummary(r.plan());
}

int RunSubmit(const SubmitArgs& a, const CliContext& ctx) {
  // The embedded service's CPU worker and the GNN estimator link LibTorch:
  // `braid` hands a submit that either could serve to braid-torch, and runs
  // the others itself, without a worker (a GPU cluster's: the CPU worker
  // cannot measure its kernels). A cluster that does not load is reported by
  // the service, here.
  bool start_worker = !a.no_worker;
  if (a.service.server.empty() && start_worker && !ctx.embedded_worker) {
    absl::StatusOr<costmodel::ClusterSpec> cluster = costmodel::LoadCluster(a.cluster);
    if (cluster.ok() && EmbeddedSearchNeedsTorch(*cluster)) {
      return RunInTorchBinary(ctx);
    }
    start_worker = false;
  }
  absl::StatusOr<v1::SubmitGraphRequest> req = BuildRequest(a);
  if (!req.ok()) return ReportError(req.status());
  ServiceArgs sa = a.service;
  if (start_worker) sa.start_worker = ctx.embedded_worker;
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(sa);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<v1::SubmitGraphResponse> sub = (*api)->Submit(*req);
  if (!sub.ok()) return ReportError(sub.status());
  if (absl::Status k = KeepCredential(a, *sub, (*api)->embedded()); !k.ok()) return ReportError(k);
  if (a.no_wait) {
    if ((*api)->embedded()) {
      std::cerr << "braid: note: the embedded service stops with this process; the job resumes "
                   "with the next embedded `braid submit`\n";
    }
    std::cout << sub->job_id() << "\n";
    return 0;
  }
  Progress progress(a.budget_s > 0 ? a.budget_s : 60);
  absl::StatusOr<v1::JobStatus> last =
      (*api)->Watch(sub->job_id(), [&](const v1::JobStatus& s) { progress.Update(s); });
  if (!last.ok()) return ReportError(last.status());
  if (last->phase() != v1::JOB_PHASE_DONE) {
    return ReportError(absl::AbortedError(absl::StrCat("job ", sub->job_id(), " ",
                                                       PhaseName(last->phase()), ": ",
                                                       last->error())));
  }
  absl::StatusOr<v1::GetPlanResponse> plan = (*api)->GetPlan(sub->job_id());
  if (!plan.ok()) return ReportError(plan.status());
  if (a.json) {
    std::cout << ToJson(*plan);
  } else {
    PrintPlanSummary(*last, *plan);
  }
  return 0;
}

// ---- status, jobs, workers, cancel -------------------------------------------

struct JobArgs {
  ServiceArgs service;
  std::string job;
  bool json = false;
  int limit = 0;
};

void PrintStatus(const v1::JobStatus& s) {
  std::cout << absl::StrFormat(
      "job         %s\nname        %s\nphase       %s%s\nbest        %.3f ms\ncandidates  %d\n"
      "elapsed     %.1f s (eta <= %.1f s)\ngraph       %s\ncluster     %s\nfrom cache  %s\n"
      "resumed     %d\n",
      Esc(s.job_id()), Esc(s.name()), PhaseName(s.phase()),
      s.error().empty() ? "" : ": " + Esc(s.error()),
      Ms(s.best_cost_s()), static_cast<long long>(s.candidates_evaluated()), s.elapsed_s(),
      s.eta_s(), s.graph_fingerprint(), s.cluster_fingerprint(), s.from_cache() ? "yes" : "no",
      s.resumed());
  // What the training ranks measured (ReportMeasurement), once they did.
  if (s.measured_iteration_s() > 0) {
    std::cout << absl::StrFormat("predicted   %.3f ms\nmeasured    %.3f ms",
                                 Ms(s.predicted_iteration_s()), Ms(s.measured_iteration_s()));
    if (s.predicted_iteration_s() > 0) {
      std::cout << absl::StrFormat(" (%.2fx predicted)",
                                   s.measured_iteration_s() / s.predicted_iteration_s());
    }
    std::cout << "\n";
    if (s.measured_baseline_s() > 0) {
      std::cout << absl::StrFormat("baseline    %.3f ms (DDP buckets, measured)\n",
                                   Ms(s.measured_baseline_s()));
    }
  }
  if (s.rolled_back()) {
    std::cout << "rolled back yes: " << Esc(s.rollback_reason()) << "\n";
  }
}

int RunStatus(const JobArgs& a, bool cancel) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<v1::JobStatus> s = cancel ? (*api)->Cancel(a.job) : (*api)->GetJob(a.job);
  if (!s.ok()) return ReportError(s.status());
  if (a.json) {
    std::cout << ToJson(*s);
  } else {
    PrintStatus(*s);
  }
  return 0;
}

int RunJobs(const JobArgs& a) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<std::vector<v1::JobStatus>> jobs = (*api)->ListJobs(a.limit);
  if (!jobs.ok()) return ReportError(jobs.status());
  if (a.json) {
    v1::ListJobsResponse r;
    for (const v1::JobStatus& j : *jobs) *r.add_jobs() = j;
    std::cout << ToJson(r);
    return 0;
  }
  std::cout << absl::StrFormat("%-22s %-10s %12s %11s %8s  %s\n", "job", "phase", "best ms",
                               "candidates", "elapsed", "name");
  for (const v1::JobStatus& j : *jobs) {
    std::cout << absl::StrFormat("%-22s %-10s %12.3f %11d %7.1fs  %s\n", Esc(j.job_id()),
                                 PhaseName(j.phase()), Ms(j.best_cost_s()),
                                 static_cast<long long>(j.candidates_evaluated()), j.elapsed_s(),
                                 Esc(j.name()));
  }
  return 0;
}

int RunWorkers(const JobArgs& a) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<std::vector<WorkerInfo>> ws = (*api)->ListWorkers();
  if (!ws.ok()) return ReportError(ws.status());
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const WorkerInfo& w : *ws) {
      j.push_back({{"id", w.id}, {"name", w.name}, {"device_kind", w.device_kind},
                   {"slots", w.slots}, {"last_heartbeat_unix_s", w.last_heartbeat_unix_s}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-24s %-12s %5s %14s  %s\n", "worker", "device", "slots",
                               "heartbeat ago", "name");
  for (const WorkerInfo& w : *ws) {
    std::cout << absl::StrFormat("%-24s %-12s %5d %13.0fs  %s\n", Esc(w.id), Esc(w.device_kind),
                                 w.slots, now - w.last_heartbeat_unix_s, Esc(w.name));
  }
  return 0;
}

// ---- plan get / plan explain ------------------------------------------------------

struct PlanJobArgs {
  ServiceArgs service;
  ModelSource source;
  std::string job;
  std::string trace_path;
  std::string out_path;  // plan get -o: the plan file
  bool json = false;
  bool summary = false;
};

void AddModelSource(CLI::App* c, ModelSource& s) {
  c->add_option("--model", s.model, "remote jobs: the model the job was submitted with");
  c->add_option("--cluster", s.cluster, "remote jobs: its cluster");
  c->add_option("--ranks", s.ranks, "remote jobs: its --ranks")->check(CLI::PositiveNumber);
  c->add_option("--batch", s.batch, "remote jobs: its --batch")->check(CLI::PositiveNumber);
}

// What a job's plan is re-simulated on: JobGraphFor's graph and cost model,
// or for a parallel plan the per-device training graph rebuilt from the plan
// and priced on its data group.
struct PlanReplay {
  JobGraph jg;  // for a parallel plan: its per-device graph, the base cost model
  std::unique_ptr<costmodel::CostModel> per_device;
  costmodel::CostModel& cost_model() {
    return per_device != nullptr ? *per_device : static_cast<costmodel::CostModel&>(*jg.cost_model);
  }
};

absl::StatusOr<costmodel::ClusterSpec> ParallelJobCluster(const ServiceArgs& args,
                                                          const ModelSource& source,
                                                          const v1::GetPlanResponse& plan) {
  if (args.server.empty()) {
    const std::string db = args.service_db.empty() ? EmbeddedServiceDbPath() : args.service_db;
    ASSIGN_OR_RETURN(std::unique_ptr<server::Store> st, server::Store::Open(db));
    ASSIGN_OR_RETURN(server::JobRecord rec, st->GetJob(plan.job_id()));
    ASSIGN_OR_RETURN(std::string cj, st->GetClusterJson(rec.cluster_fingerprint));
    return costmodel::ParseClusterJson(cj);
  }
  if (source.cluster.empty()) {
    return absl::InvalidArgumentError(
        "--cluster: a remote job's cluster is not sent back by the server; give the cluster it "
        "was submitted with");
  }
  absl::StatusOr<costmodel::ClusterSpec> c = std::filesystem::is_regular_file(source.cluster)
                                                 ? costmodel::LoadCluster(source.cluster)
                                                 : costmodel::ClusterPreset(source.cluster);
  if (!c.ok()) return c.status();
  return costmodel::WithRanks(*c, plan.plan().parallel().degree());
}

absl::StatusOr<PlanReplay> ReplayFor(const ServiceArgs& args, const ModelSource& source,
                                     const v1::GetPlanResponse& plan) {
  PlanReplay r;
  if (!plan.plan().has_parallel()) {
    ASSIGN_OR_RETURN(r.jg, JobGraphFor(args, source, plan));
    return r;
  }
  const v1::ParallelPlan& par = plan.plan().parallel();
  absl::StatusOr<graph::Graph> forward = graph::ParseText(par.device_graph_text());
  if (!forward.ok()) {
    return absl::DataLossError(
        absl::StrCat("plan.parallel.device_graph_text: ", forward.status().message()));
  }
  search::PerDeviceGraph pd;
  pd.forward = *std::move(forward);
  pd.degree = par.degree();
  pd.data_degree = par.data_degree();
  pd.model_degree = par.model_degree();
  for (const auto& [param, group] : par.grad_group()) pd.grad_group[param] = group;
  for (const auto& [param, n] : par.grad_devices()) pd.grad_devices[param] = n;
  // The optimizer the service builds its training graphs with.
  ASSIGN_OR_RETURN(r.jg.training,
                   search::BuildPerDeviceTraining(pd, graph::TrainingOptions{}.optimizer));
  ASSIGN_OR_RETURN(std::string fp, graph::FingerprintHex(r.jg.training));
  if (fp != plan.plan().graph_fingerprint()) {
    return absl::DataLossError(absl::StrCat("the plan's per-device graph rebuilds to ", fp,
                                            ", the plan names ", plan.plan().graph_fingerprint()));
  }
  // The overlap choices: their collectives charge the chosen method's
  // effective communication time, as in the search.
  ASSIGN_OR_RETURN(std::vector<search::OverlapChoice> overlaps, OverlapsOf(par));
  RETURN_IF_ERROR(search::ApplyOverlaps(overlaps, r.jg.training));
  ASSIGN_OR_RETURN(r.jg.cluster, ParallelJobCluster(args, source, plan));
  const std::string profile_db = source.profile_db.empty() ? DefaultDatabasePath() : source.profile_db;
  if (source.profile_db != "none") {
    ASSIGN_OR_RETURN(r.jg.profiles, costmodel::ProfileStore::Open(profile_db));
  }
  ASSIGN_OR_RETURN(costmodel::CommModel comm,
                   costmodel::CommModelFromStore(r.jg.cluster, r.jg.profiles.get()));
  r.jg.cost_model = std::make_unique<costmodel::ClusterCostModel>(
      r.jg.cluster, r.jg.profiles.get(),
      r.jg.profiles != nullptr ? costmodel::FusedOpEstimatorFor(r.jg.cluster, profile_db) : nullptr,
      std::move(comm));
  r.per_device = std::make_unique<search::DataGroupCostModel>(*r.jg.cost_model, r.jg.cluster,
                                                              par.degree());
  absl::StatusOr<nlohmann::json> j =
      base::ParseBoundedJson(plan.plan_json(), base::kPlanJsonLimits);
  if (!j.ok()) return absl::DataLossError(absl::StrCat("plan_json: ", j.status().message()));
  ASSIGN_OR_RETURN(r.jg.plan, search::PlanFromJson(r.jg.training, *j));
  return r;
}

int RunPlanGet(PlanJobArgs a) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<v1::GetPlanResponse> plan = (*api)->GetPlan(a.job);
  if (!plan.ok()) return ReportError(plan.status());
  if (!a.trace_path.empty()) {
    a.source.profile_db = a.service.profile_db;
    absl::StatusOr<PlanReplay> jg = ReplayFor(a.service, a.source, *plan);
    if (!jg.ok()) return ReportError(jg.status());
    absl::StatusOr<costmodel::SimGraph> sg =
        search::Lower(jg->jg.training, jg->jg.plan, jg->cost_model());
    if (!sg.ok()) return ReportError(sg.status());
    costmodel::SimResult r = costmodel::Simulate(*sg);
    if (absl::Status s = WriteFile(a.trace_path, costmodel::ChromeTrace(*sg, r)); !s.ok()) {
      return ReportError(s);
    }
    std::cerr << absl::StrFormat("braid: trace of one simulated iteration (%.3f ms) written to %s\n",
                                 Ms(r.iteration_s), a.trace_path);
  }
  if (!a.out_path.empty()) {
    absl::StatusOr<nlohmann::json> file = JobPlanFile(*plan);
    if (!file.ok()) return ReportError(file.status());
    if (absl::Status s = WritePlanFile(a.out_path, file->dump(1) + "\n"); !s.ok()) {
      return ReportError(s);
    }
    std::cerr << "braid: plan of " << a.job << " written to " << a.out_path << "\n";
  }
  if (a.summary) {
    absl::StatusOr<v1::JobStatus> job = (*api)->GetJob(a.job);
    if (!job.ok()) return ReportError(job.status());
    PrintPlanSummary(*job, *plan);
    return 0;
  }
  std::cout << ToJson(*plan);
  return 0;
}

struct Decision {
  std::string what;
  double reverted_s = 0;
  double gain_s = 0;  // reverted - plan: what the decision saves
};

std::string Names(const graph::Graph& g, const std::vector<std::string>& names, size_t shown) {
  std::vector<std::string> head(names.begin(), names.begin() + std::min(shown, names.size()));
  std::string s = absl::StrJoin(head, ", ");
  if (names.size() > shown) absl::StrAppend(&s, ", ...");
  return s;
}

// Re-simulates the plan with each fusion group removed (its ops unfused) and
// each multi-gradient bucket split into one AllReduce per gradient, in place.
absl::StatusOr<std::pair<double, std::vector<Decision>>> Explain(PlanReplay& replay) {
  const JobGraph& jg = replay.jg;
  costmodel::CostModel& cm = replay.cost_model();
  auto cost = [&](const search::Plan& p) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(costmodel::SimGraph sg, search::Lower(jg.training, p, cm));
    return costmodel::Simulate(sg).iteration_s;
  };
  ASSIGN_OR_RETURN(double base, cost(jg.plan));
  std::vector<Decision> out;
  const graph::Graph& g = jg.training;
  for (size_t i = 0; i < jg.plan.groups.size(); ++i) {
    search::Plan p = jg.plan;
    p.groups.erase(p.groups.begin() + i);
    absl::StatusOr<double> t = cost(p);
    if (!t.ok()) continue;  // reverting alone is not a valid plan
    std::vector<std::string> names;
    for (graph::OpId op : jg.plan.groups[i].ops) names.push_back(g.op(op).name);
    out.push_back({absl::StrFormat("fusion group %d (%d ops%s): %s", i, names.size(),
                                   jg.plan.groups[i].duplicated.empty()
                                       ? ""
                                       : absl::StrCat(", ", jg.plan.groups[i].duplicated.size(),
                                                      " duplicated"),
                                   Names(g, names, 4)),
                   *t, *t - base});
  }
  for (size_t b = 0; b < jg.plan.buckets.size(); ++b) {
    const search::Bucket& bucket = jg.plan.buckets[b];
    if (bucket.grads.size() < 2) continue;
    search::Plan p = jg.plan;
    p.buckets.erase(p.buckets.begin() + b);
    std::vector<search::Bucket> singles;
    for (graph::TensorId t : bucket.grads) singles.push_back({.grads = {t}});
    p.buckets.insert(p.buckets.begin() + b, singles.begin(), singles.end());
    absl::StatusOr<double> t = cost(p);
    if (!t.ok()) continue;
    std::vector<std::string> names;
    int64_t bytes = 0;
    for (graph::TensorId id : bucket.grads) {
      names.push_back(g.tensor(id).name);
      bytes += g.tensor(id).Bytes();
    }
    out.push_back({absl::StrFormat("bucket %d (%d gradients, %.2f MiB): %s", b, names.size(),
                                   static_cast<double>(bytes) / (1 << 20), Names(g, names, 3)),
                   *t, *t - base});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Decision& x, const Decision& y) { return x.gain_s > y.gain_s; });
  return std::make_pair(base, out);
}

int RunPlanExplain(PlanJobArgs a) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<v1::GetPlanResponse> plan = (*api)->GetPlan(a.job);
  if (!plan.ok()) return ReportError(plan.status());
  a.source.profile_db = a.service.profile_db;
  absl::StatusOr<PlanReplay> jg = ReplayFor(a.service, a.source, *plan);
  if (!jg.ok()) return ReportError(jg.status());
  absl::StatusOr<std::pair<double, std::vector<Decision>>> ex = Explain(*jg);
  if (!ex.ok()) return ReportError(ex.status());
  const double base = ex->first;
  const bool parallel = plan->plan().has_parallel();
  const v1::ParallelPlan& par = plan->plan().parallel();
  if (a.json) {
    nlohmann::json j = {{"job_id", a.job}, {"iteration_ms", Ms(base)},
                        {"decisions", nlohmann::json::array()}};
    if (parallel) {
      nlohmann::json ops = nlohmann::json::array();
      for (const v1::OpParallelConfig& o : par.ops()) {
        ops.push_back({{"op", o.op()}, {"config", o.config()}, {"kind", o.kind()},
                       {"machine_view", o.machine_view()}});
      }
      nlohmann::json overlaps = nlohmann::json::array();
      for (const v1::OverlapChoice& o : par.overlaps()) {
        nlohmann::json cands = nlohmann::json::array();
        for (const v1::OverlapCandidate& t : o.candidates()) {
          cands.push_back({{"method", t.method()}, {"tile_rows", t.tile_rows()},
                           {"time_ms", Ms(t.time_s())},
                           {"gain_ms", Ms(o.none_s() - t.time_s())}});
        }
        overlaps.push_back({{"pattern", o.pattern()}, {"collective", o.collective_op()},
                            {"matmuls", o.matmul_ops()}, {"phase", o.phase()}, {"m", o.m()},
                            {"k", o.k()}, {"n", o.n()}, {"ranks", o.ranks()},
                            {"method", o.method()}, {"steps", o.steps()},
                            {"tile_rows", o.tile_rows()}, {"none_ms", Ms(o.none_s())},
                            {"chosen_ms", Ms(o.chosen_s())},
                            {"gain_ms", Ms(o.none_s() - o.chosen_s())},
                            {"efficiency", o.efficiency()}, {"gemm_source", o.gemm_source()},
                            {"comm_source", o.comm_source()}, {"candidates", std::move(cands)}});
      }
      j["parallel"] = {{"strategy", par.strategy()}, {"degree", par.degree()},
                       {"data_degree", par.data_degree()}, {"model_degree", par.model_degree()},
                       {"memory_per_device_bytes", par.memory_per_device_bytes()},
                       {"ops", std::move(ops)}, {"overlaps", std::move(overlaps)},
                       {"strand_blocks", StrandBlocksJson(par)}};
    }
    for (const Decision& d : ex->second) {
      j["decisions"].push_back(
          {{"decision", d.what}, {"reverted_ms", Ms(d.reverted_s)}, {"gain_ms", Ms(d.gain_s)}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (parallel) {
    // The decisions below are on this strategy's per-device training graph.
    std::cout << absl::StrFormat(
        "parallel plan: %s, D x M = %d x %d over %d devices, %.2f GiB per device, %d forward "
        "collectives\n%-24s %-16s %-12s %s\n",
        par.strategy(), par.data_degree(), par.model_degree(), par.degree(),
        GiB(par.memory_per_device_bytes()), par.forward_collectives(), "op", "config", "kind",
        "machine view");
    for (const v1::OpParallelConfig& o : par.ops()) {
      std::cout << absl::StrFormat("%-24s %-16s %-12s %s\n", Esc(o.op()), o.config(), o.kind(),
                                   o.machine_view());
    }
    for (const v1::StrandBlock& b : par.strand_blocks()) {
      std::cout << absl::StrFormat(
          "strands side by side: %d into %s, %d device(s) each in %d groups (at most %d per "
          "group), busiest group %.3f ms, AllToAll %.3f ms\n",
          b.strands(), Esc(b.sink()), b.devices_per_strand(), b.groups(), b.strands_per_group(),
          Ms(b.busiest_group_s()), Ms(b.alltoall_s()));
    }
    if (par.overlaps_size() > 0) {
      // Each tensor-parallel pair's choice and what every method was
      // predicted to take (gain: against no overlap).
      std::cout << absl::StrFormat("\noverlap per tensor-parallel pair (%d): none = collective, "
                                   "then GEMM; gain against it\n",
                                   par.overlaps_size());
      for (const v1::OverlapChoice& o : par.overlaps()) {
        std::string method = o.method();
        if (o.tile_rows() > 0) absl::StrAppend(&method, " (tile ", o.tile_rows(), " rows)");
        if (o.steps() > 0) absl::StrAppend(&method, " (", o.steps(), " steps)");
        std::cout << absl::StrFormat(
            "  %s %s, %s, m=%d k=%d n=%d over %d: %s, %.3f ms vs %.3f ms none, gain %.3f ms, "
            "efficiency %.0f%% (GEMM %s, comm %s)\n",
            Esc(o.collective_op()), o.pattern(), o.phase(), o.m(), o.k(), o.n(), o.ranks(),
            method, Ms(o.chosen_s()), Ms(o.none_s()), Ms(o.none_s() - o.chosen_s()),
            100 * o.efficiency(), o.gemm_source(), o.comm_source());
        std::string cands;
        for (const v1::OverlapCandidate& t : o.candidates()) {
          absl::StrAppend(&cands, cands.empty() ? "" : ", ", t.method());
          if (t.tile_rows() > 0) absl::StrAppend(&cands, "/", t.tile_rows());
          absl::StrAppend(&cands, absl::StrFormat(" %.3f", Ms(t.time_s())));
        }
        std::cout << "      candidates ms: " << cands << "\n";
      }
    }
    std::cout << "groups and buckets below are the per-device training graph's\n\n";
  }
  std::cout << absl::StrFormat(
      "plan of %s: %.3f ms per iteration (simulated now; the job recorded %.3f ms)\n"
      "each decision reverted alone (group unfused / bucket split per gradient), largest gain "
      "first:\n\n%12s %9s  %s\n",
      a.job, Ms(base), Ms(plan->plan().predicted_iteration_s()), "gain ms", "gain %",
      "decision");
  for (const Decision& d : ex->second) {
    std::cout << absl::StrFormat("%12.3f %8.2f%%  %s\n", Ms(d.gain_s), 100 * d.gain_s / base,
                                 d.what);
  }
  if (ex->second.empty()) std::cout << "(no fusion groups and no multi-gradient buckets)\n";
  return 0;
}

// ---- plan rollbacks / restore / confirm-rollback ---------------------------------

struct RollbackArgs {
  ServiceArgs service;
  std::string job;
  std::string reason;
  int limit = 0;
  bool json = false;
};

std::string UnixTime(double t) {
  if (t <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixSeconds(static_cast<int64_t>(t)),
                          absl::UTCTimeZone());
}

void PrintRollback(const v1::RollbackEntry& r) {
  std::cout << absl::StrFormat("%s  job %s  %-6s  %s  plan %s  %s\n    reason: %s\n    by: %s\n",
                               Esc(r.rollback_id()), Esc(r.job_id()), Esc(r.scope()),
                               r.restored_unix_s() > 0 ? "restored" : "in effect",
                               Esc(r.replaced_sha256().substr(0, 16)), UnixTime(r.created_unix_s()),
                               Esc(r.reason()), Esc(r.actor()));
  if (r.restored_unix_s() > 0) {
    std::cout << "    restored " << UnixTime(r.restored_unix_s()) << " by " << Esc(r.restored_by())
              << "\n";
  }
}

int RunRollbacks(const RollbackArgs& a) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  v1::ListRollbacksRequest req;
  req.set_job_id(a.job);
  req.set_limit(a.limit);
  absl::StatusOr<v1::ListRollbacksResponse> r = (*api)->ListRollbacks(req);
  if (!r.ok()) return ReportError(r.status());
  if (a.json) {
    std::cout << ToJson(*r);
    return 0;
  }
  if (r->rollbacks().empty()) std::cout << "no rollbacks\n";
  for (const v1::RollbackEntry& e : r->rollbacks()) PrintRollback(e);
  if (!r->audit().empty()) std::cout << "\naudit log, newest first:\n";
  for (const v1::AuditEntry& e : r->audit()) {
    std::cout << absl::StrFormat("  %s  %-16s job %s  by %s: %s\n", UnixTime(e.at_unix_s()),
                                 Esc(e.action()), Esc(e.job_id()), Esc(e.actor()), Esc(e.detail()));
  }
  return 0;
}

int RunRollbackAction(const RollbackArgs& a, bool restore) {
  absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a.service);
  if (!api.ok()) return ReportError(api.status());
  absl::StatusOr<v1::RollbackActionResponse> r;
  if (restore) {
    v1::RestorePlanRequest req;
    req.set_job_id(a.job);
    req.set_reason(a.reason);
    r = (*api)->RestorePlan(req);
  } else {
    v1::ConfirmRollbackRequest req;
    req.set_job_id(a.job);
    req.set_reason(a.reason);
    r = (*api)->ConfirmRollback(req);
  }
  if (!r.ok()) return ReportError(r.status());
  if (a.json) {
    std::cout << ToJson(*r);
    return 0;
  }
  std::cout << (restore ? "restored:\n" : "the shared plan-cache entry is rolled back:\n");
  for (const v1::RollbackEntry& e : r->changed()) PrintRollback(e);
  std::cout << "job " << Esc(r->status().job_id()) << " is served "
            << (r->status().rolled_back() ? "the DDP baseline" : "its searched plan") << " now\n";
  return 0;
}

}  // namespace

void RegisterServiceCommands(CLI::App& app, CommandResult& result, const CliContext& ctx) {
  auto s = std::make_shared<SubmitArgs>();
  CLI::App* submit = app.add_subcommand(
      "submit", "Submit a model to the strategy service, follow its search, print the plan");
  submit->add_option("model", s->model, "zoo:NAME, model.onnx or a braid text graph")->required();
  submit->add_option("--cluster", s->cluster, "preset or cluster JSON file")->capture_default_str();
  submit->add_option("--ranks", s->ranks, "data-parallel ranks")->check(CLI::PositiveNumber);
  submit->add_option("--batch", s->batch, "per-rank batch")->check(CLI::PositiveNumber);
  submit->add_option("--op-fusion", s->op_fusion,
                     "off: buckets only, for a runtime that runs every op as its own kernel "
                     "(braid.torch in PyTorch eager mode)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  submit->add_flag("--parallel", s->parallel,
                   "choose the parallelization too (data parallel, expert strategies, braid's "
                   "DP over the cluster's ranks), each fused on its per-device graph; the "
                   "table lists the strategies");
  submit->add_option("--strategy", s->strategy_row,
                     "with --parallel: the plan of this strategy row (data_parallel, "
                     "expert:megatron, expert:dlrm, braid, braid:all-devices, braid:substituted) "
                     "instead of the fastest; the job fails naming the rows when the model's "
                     "table lacks it or it has no plan. The service plans no pipeline rows");
  submit->add_flag("--no-pipeline", s->no_pipeline,
                   "with --parallel: no pipeline rows (the service searches none in any case)");
  submit->add_flag("--sync-batchnorm", s->sync_batch_norm,
                   "with --parallel: the plan's per-device program normalizes training-mode "
                   "BatchNorm with whole-batch statistics (SyncBN) instead of each shard's");
  submit->add_option("--alpha", s->alpha, "prune above alpha x best (>= 1; default 1.05)")
      ->check(CLI::Range(1.0, 100.0));
  submit->add_option("--beta", s->beta, "applications per method (default 10)")->check(CLI::Range(1, 1000));
  submit->add_option("--seed", s->seed, "random seed (default 0)")->check(CLI::NonNegativeNumber);
  submit->add_option("--budget-s", s->budget_s, "search time budget (default 60)")
      ->check(CLI::PositiveNumber);
  submit->add_option("--patience", s->patience, "steps without improvement (default 1000)")
      ->check(CLI::PositiveNumber);
  submit->add_option("--name", s->name, "job label (default: the model)");
  submit->add_flag("--json", s->json, "print the GetPlan response as JSON");
  submit->add_flag("--no-wait", s->no_wait, "print the job id and return");
  submit->add_flag("--no-worker", s->no_worker, "embedded: no in-process CPU profiling worker");
  submit->add_option("--credential-out", s->credential_out,
                     "write the job's report credential to this file (mode 0600) instead of "
                     "stderr; its training ranks report with it (BRAID_REPORT_CREDENTIAL)");
  AddService(submit, s->service);
  submit->callback([s, &result, ctx] { result.exit_code = RunSubmit(*s, ctx); });

  auto st = std::make_shared<JobArgs>();
  CLI::App* status = app.add_subcommand("status", "A job's phase and search progress");
  status->add_option("job", st->job, "job id")->required();
  status->add_flag("--json", st->json, "print JSON");
  AddService(status, st->service);
  status->callback([st, &result] { result.exit_code = RunStatus(*st, false); });

  auto ca = std::make_shared<JobArgs>();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  cancel->add_option("job", ca->job, "job id")->required();
  cancel->add_flag("--json", ca->json, "print JSON");
  AddService(cancel, ca->service);
  cancel->callback([ca, &result] { result.exit_code = RunStatus(*ca, true); });

  auto jb = std::make_shared<JobArgs>();
  CLI::App* jobs = app.add_subcommand("jobs", "List jobs, newest first");
  jobs->add_option("--limit", jb->limit, "at most this many (default 100)")->check(CLI::Range(0, 1000));
  jobs->add_flag("--json", jb->json, "print JSON");
  AddService(jobs, jb->service);
  jobs->callback([jb, &result] { result.exit_code = RunJobs(*jb); });

  auto wk = std::make_shared<JobArgs>();
  CLI::App* workers = app.add_subcommand("workers", "List profiling workers (embedded service)");
  workers->add_flag("--json", wk->json, "print JSON");
  AddService(workers, wk->service);
  workers->callback([wk, &result] { result.exit_code = RunWorkers(*wk); });

  // `braid plan get|explain JOB` beside the offline `braid plan MODEL` (and
  // `braid plan sign FILE`, registered with it). The
  // offline command's model positional becomes optional at parse time and is
  // required again unless one of these subcommands was given; the offline
  // planner's callback does nothing when a subcommand ran (cli_plan.cc).
  CLI::App* plan = app.get_subcommand("plan");
  CLI::Option* model = plan->get_option("model");
  model->required(false);
  auto pg = std::make_shared<PlanJobArgs>();
  CLI::App* get = plan->add_subcommand("get", "A job's plan as JSON; --trace: simulated iteration");
  get->add_option("job", pg->job, "job id")->required();
  get->add_option("--trace", pg->trace_path, "write a Chrome trace of the simulated iteration");
  get->add_option("-o,--out", pg->out_path,
                  "write the plan file `braid plan MODEL -o` writes (a parallel plan with its "
                  "per-device program, which `braid run MODEL --plan FILE --check` trains)");
  get->add_flag("--summary", pg->summary,
                "print the table `braid submit` prints (baselines, braid's plan, rollback) "
                "instead of JSON");
  AddModelSource(get, pg->source);
  AddService(get, pg->service);
  auto pe = std::make_shared<PlanJobArgs>();
  CLI::App* explain = plan->add_subcommand(
      "explain", "What each fusion group and bucket of a job's plan gains in the simulator");
  explain->add_option("job", pe->job, "job id")->required();
  explain->add_flag("--json", pe->json, "print JSON");
  AddModelSource(explain, pe->source);
  AddService(explain, pe->service);
  plan->parse_complete_callback([plan, model] {
    // get, explain, sign (cli_plan.cc): subcommands that take no model.
    if (plan->get_subcommands().empty() && model->count() == 0) {
      throw CLI::RequiredError("model");
    }
  });
  auto rb = std::make_shared<RollbackArgs>();
  CLI::App* rollbacks = plan->add_subcommand(
      "rollbacks", "Plan rollbacks (per job and of shared cache entries) with the audit log");
  rollbacks->add_option("job", rb->job, "only this job's");
  rollbacks->add_option("--limit", rb->limit, "at most this many (default 100)")
      ->check(CLI::Range(0, 1000));
  rollbacks->add_flag("--json", rb->json, "print JSON");
  AddService(rollbacks, rb->service);
  rollbacks->callback([rb, &result] { result.exit_code = RunRollbacks(*rb); });
  auto rs = std::make_shared<RollbackArgs>();
  CLI::App* restore = plan->add_subcommand(
      "restore", "Operator: undo the rollbacks of a job's plan (and of the shared entry it "
                 "is served); needs the server's admin token");
  restore->add_option("job", rs->job, "job id")->required();
  restore->add_option("--reason", rs->reason, "for the audit log");
  restore->add_flag("--json", rs->json, "print JSON");
  AddService(restore, rs->service);
  restore->callback([rs, &result] { result.exit_code = RunRollbackAction(*rs, true); });
  auto cf = std::make_shared<RollbackArgs>();
  CLI::App* confirm = plan->add_subcommand(
      "confirm-rollback", "Operator: make a job's own rollback the shared plan-cache entry's "
                          "(every job of its model, cluster and options); needs the admin token");
  confirm->add_option("job", cf->job, "job id")->required();
  confirm->add_option("--reason", cf->reason, "for the audit log");
  confirm->add_flag("--json", cf->json, "print JSON");
  AddService(confirm, cf->service);
  confirm->callback([cf, &result] { result.exit_code = RunRollbackAction(*cf, false); });
  get->callback([pg, &result] { result.exit_code = RunPlanGet(*pg); });
  explain->callback([pe, &result] { result.exit_code = RunPlanExplain(*pe); });
}

}  // namespace braid::client
