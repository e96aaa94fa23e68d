// braid-parallel-measure: predicted vs measured iteration time of data-,
// tensor- and pipeline-parallel training on cpu-local ranks.
//
// For the strategies of --model it
//  1. times the LibTorch kernels the ranks run for every op shard, the loss
//     and the update (ProfileExecutedOps), beside a co-runner process that
//     times the same kernels on the other core (the two ranks compute side by
//     side; alone a GEMM ran about twice as fast on this machine), and
//     benchmarks the plans' collectives at their sizes over Gloo
//     (RunCollectiveBench, what `braid profile comm` runs), into --db;
//  2. runs the real training (RunParallelTraining) --rounds times, the
//     strategies interleaved within each round, --steps timed steps after
//     --warmup, and before every further round profiles the kernels once
//     more and benchmarks the collectives again: the stored kernel times are
//     the mean over the rounds and the collective fit covers every round's
//     samples, so both describe the same stretch of the shared machine's load
//     as the measured steps;
//  3. predicts one step per strategy with PredictParallelTraining on a
//     ClusterCostModel over that store (built as `braid plan` builds it:
//     ProfileStore + CommModelFromStore) and prints a markdown table of
//     predicted vs measured medians with the 95% CI of the median.
//
//   braid-parallel-measure --model mlp --strategies data,tensor,pipeline \
//       --ranks 2 --rounds 6 --steps 15 --db /tmp/pm.db
//
// --write-model FILE instead writes the model's forward graph at the global
// batch (ParallelTrainForwardGraph) in braid's text format, for `braid plan
// FILE --parallel` to plan and `braid run FILE --plan P` to run on these
// ranks (worker/parallel_plan_exec.h):
//
//   braid-parallel-measure --model mlp --write-model mlp.txt
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <thread>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "graph/text_format.h"
#include "worker/collective_bench.h"
#include "search/parallel_plan.h"
#include "worker/parallel_plan_exec.h"
#include "worker/parallel_predict.h"
#include "worker/parallel_train.h"

extern char** environ;

namespace braid::worker {
namespace {

struct Args {
  std::string model = "mlp";
  std::string strategies = "data,tensor";
  int ranks = 2;
  int rounds = 5;
  int steps = 20;
  int warmup = 3;
  std::string db;
  bool skip_profile = false;
  int comm_reps = 100;  // means over a heavy tail (store_mean): many calls per size
  int64_t batch = 0;  // 0: the model's default
  bool predict_only = false;
  int micro_batches = 4;  // pipeline
  bool co_run = false;  // internal: the co-runner (see RunProfiles)
  bool alone = false;   // profile without the co-runner
  bool pin_cores = true;  // ranks bound to cores (PinToCore)
  bool poll = true;       // bound ranks poll for collectives (WaitPolling)
  std::string write_model;  // write the forward graph here and exit
  // After the rounds, the op times clocked inside the steps go into --db
  // under the prediction's keys (as `braid run --plan P --profile` stores
  // them): a later run with --skip-profile then predicts from this run's
  // executions.
  bool store_in_step = false;
};

absl::StatusOr<ParallelTrainSpec> MakeSpec(const Args& a, const std::string& strategy) {
  ParallelTrainSpec s;
  s.ranks = a.ranks;
  s.steps = a.warmup + a.steps;
  s.lr = 1e-3;
  s.seed = 11;
  if (a.model == "mlp") {
    s.widths = {1024, 1024, 1024, 1024, 1024};
    s.batch = 256;
  } else if (a.model == "transformer") {
    s.batch = 8;
    s.transformer = TransformerShape{.d_model = 256, .heads = 4, .seq = 64, .d_ff = 1024, .blocks = 2};
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--model: mlp or transformer, got ", a.model));
  }
  const bool mlp = a.model == "mlp";
  if (strategy == "data") {
    s.data_degree = a.ranks;
    if (mlp) s.layers.assign(4, {LayerParallel::kData});
  } else if (strategy == "tensor") {
    s.model_degree = a.ranks;
    if (mlp) {
      for (int i = 0; i < 4; ++i)
        s.layers.push_back({i % 2 == 0 ? LayerParallel::kColumn : LayerParallel::kRow});
    }
  } else if (mlp && absl::StartsWith(strategy, "tensor:")) {
    // "tensor:column:row:row:row": the MLP's layers as named, over all ranks.
    s.model_degree = a.ranks;
    for (absl::string_view k : absl::StrSplit(strategy.substr(7), ':')) {
      if (k == "column") s.layers.push_back({LayerParallel::kColumn});
      else if (k == "row") s.layers.push_back({LayerParallel::kRow});
      else if (k == "data") s.layers.push_back({LayerParallel::kData});
      else return absl::InvalidArgumentError(absl::StrCat("--strategies: layer kind '", k, "' in ", strategy));
    }
  } else if (strategy == "pipeline") {
    s.pipeline_stages = a.ranks;
    s.micro_batches = a.micro_batches;
    if (mlp) s.layers.assign(4, {LayerParallel::kData});
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategies: data, tensor or pipeline, got '", strategy, "'"));
  }
  if (a.batch > 0) s.batch = a.batch;
  RETURN_IF_ERROR(ValidateParallelTrainSpec(s));
  return s;
}

// Buffer sizes of the collectives the plans make, rounded to whole f32
// elements per rank, plus two anchors so every fit has several sizes.
std::vector<int64_t> BenchSizes(const std::vector<ParallelTrainSpec>& specs, int ranks) {
  std::set<int64_t> sizes = {64 << 10, 4 << 20};
  const int64_t q = 4 * ranks;
  for (const ParallelTrainSpec& s : specs) {
    absl::StatusOr<std::vector<PlannedCollective>> c = PlannedCollectives(s);
    if (!c.ok()) continue;
    for (const PlannedCollective& x : *c) sizes.insert((x.bytes + q - 1) / q * q);
  }
  return {sizes.begin(), sizes.end()};
}

// The co-runner: profiles the same kernels into a scratch store, over and
// over, until its parent kills it.
int CoRun(const Args& a, const std::vector<ParallelTrainSpec>& specs,
          const costmodel::ClusterSpec& cluster, costmodel::ProfileStore& store) {
  for (;;) {
    for (const ParallelTrainSpec& s : specs) {
      absl::Status st = ProfileExecutedOps(s, cluster, store);
      if (!st.ok()) return 1;
    }
  }
}

// Starts this program as the co-runner on `scratch_db`. The ranks' kernels
// run while the other rank runs its own: on cpu-local the two ranks share
// the machine's cores, caches and memory bandwidth (measured here: a GEMM
// alone ran at about twice the speed it ran beside another), so each kernel
// is profiled while a second process runs the same kernels.
absl::StatusOr<pid_t> StartCoRunner(const Args& a, const std::string& scratch_db) {
  std::vector<std::string> names = absl::StrSplit(a.strategies, ',', absl::SkipEmpty());
  names.erase(std::remove(names.begin(), names.end(), "braid"), names.end());
  std::vector<std::string> args = {"/proc/self/exe", "--model", a.model, "--strategies",
                                   absl::StrJoin(names, ","), "--ranks", absl::StrCat(a.ranks),
                                   "--db",           scratch_db, "--co-run"};
  if (a.batch > 0) {
    args.push_back("--batch");
    args.push_back(absl::StrCat(a.batch));
  }
  std::vector<char*> argv;
  for (std::string& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return absl::InternalError(absl::StrCat("posix_spawn co-runner: error ", rc));
  return pid;
}

// The 1-minute load average (other processes share cpu-local's cores).
std::string LoadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  double l = 0;
  const int n = std::fscanf(f, "%lf", &l);
  std::fclose(f);
  return n == 1 ? absl::StrFormat("%.1f", l) : "?";
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "braid-parallel-measure: %s\n", std::string(s.message()).c_str());
  return 1;
}

// --write-model: the model (data-parallel spec: the graph is the same for
// every strategy) as a braid text graph at the global batch.
int WriteModel(const Args& a) {
  absl::StatusOr<ParallelTrainSpec> s = MakeSpec(a, "data");
  if (!s.ok()) return Fail(s.status());
  absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(*s);
  if (!g.ok()) return Fail(g.status());
  std::FILE* f = std::fopen(a.write_model.c_str(), "w");
  if (f == nullptr) return Fail(absl::NotFoundError(absl::StrCat(a.write_model, ": cannot write")));
  const std::string text = graph::ToText(*g);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    return Fail(absl::InternalError(absl::StrCat(a.write_model, ": write failed")));
  }
  std::printf("wrote %s: %s, %d ops, global batch %lld\n", a.write_model.c_str(),
              g->name().c_str(), g->num_ops(), static_cast<long long>(s->batch));
  return 0;
}

int Run(const Args& a) {
  if (!a.write_model.empty()) return WriteModel(a);
  std::vector<std::string> names = absl::StrSplit(a.strategies, ',', absl::SkipEmpty());
  // "braid": the plan `braid plan --parallel` makes for this model on these
  // ranks, made below once the first profiles are in the store.
  const bool want_braid = std::find(names.begin(), names.end(), "braid") != names.end();
  names.erase(std::remove(names.begin(), names.end(), "braid"), names.end());
  std::vector<ParallelTrainSpec> specs;
  for (const std::string& n : names) {
    absl::StatusOr<ParallelTrainSpec> s = MakeSpec(a, n);
    if (!s.ok()) return Fail(s.status());
    specs.push_back(*s);
  }
  if (specs.empty()) return Fail(absl::InvalidArgumentError("--strategies: name at least one of data, tensor, pipeline"));
  absl::StatusOr<costmodel::ClusterSpec> base = costmodel::LoadCluster("cpu-local");
  if (!base.ok()) return Fail(base.status());
  absl::StatusOr<costmodel::ClusterSpec> cluster = costmodel::WithRanks(*base, a.ranks);
  if (!cluster.ok()) return Fail(cluster.status());
  if (a.db.empty()) return Fail(absl::InvalidArgumentError("--db: name the profile store"));
  absl::StatusOr<std::unique_ptr<costmodel::ProfileStore>> store = costmodel::ProfileStore::Open(a.db);
  if (!store.ok()) return Fail(store.status());

  if (a.co_run) return CoRun(a, specs, *cluster, **store);
  const std::string load_before = LoadAverage();
  // Kernel profiles: one full profile now, then one pass per round; what is
  // stored in the end is the mean over all of them, so that the kernels are
  // timed over the same stretch of the shared machine's load as the steps.
  std::map<std::string, std::pair<costmodel::ProfileKey, std::vector<double>>> kernel_samples;
  auto profile_specs = [&](const std::vector<ParallelTrainSpec>& list,
                           const std::vector<std::string>& labels, int passes) -> absl::Status {
    if (a.skip_profile) return absl::OkStatus();
    const std::string scratch = absl::StrCat(a.db, ".round");
    for (const char* ext : {"", "-wal", "-shm"}) std::remove((scratch + ext).c_str());
    ASSIGN_OR_RETURN(std::unique_ptr<costmodel::ProfileStore> round,
                     costmodel::ProfileStore::Open(scratch));
    pid_t co = 0;
    const std::string co_db = absl::StrCat(a.db, ".corunner");
    if (!a.alone) {
      ASSIGN_OR_RETURN(co, StartCoRunner(a, co_db));
      std::this_thread::sleep_for(std::chrono::seconds(3));  // LibTorch loaded, kernels running
    }
    absl::Status st;
    ExecutedProfileOptions po;
    po.passes = passes;
    for (size_t i = 0; i < list.size() && st.ok(); ++i) {
      std::fprintf(stderr, "profiling the %s kernels%s...\n", labels[i].c_str(),
                   a.alone ? "" : " beside a co-runner");
      st = ProfileExecutedOps(list[i], *cluster, *round, po);
    }
    if (co > 0) {
      kill(co, SIGTERM);
      waitpid(co, nullptr, 0);
      for (const char* ext : {"", "-wal", "-shm"}) std::remove((co_db + ext).c_str());
    }
    RETURN_IF_ERROR(st);
    for (const ParallelTrainSpec& s : list) {
      ASSIGN_OR_RETURN(std::vector<ExecutedKey> keys, ExecutedProfileKeys(s, cluster->device.kind));
      for (const ExecutedKey& k : keys) {
        std::optional<costmodel::ProfileSample> v = round->Get(k.key);
        if (!v.has_value()) continue;
        auto& e = kernel_samples[absl::StrCat(k.key.op_type, "|", k.key.signature)];
        if (e.second.empty()) e.first = k.key;
        e.second.push_back(v->median_s);
      }
    }
    round.reset();
    for (const char* ext : {"", "-wal", "-shm"}) std::remove((scratch + ext).c_str());
    // The mean of every round so far into the store the predictions read.
    for (const auto& [name, e] : kernel_samples) {
      double mean = 0;
      for (double x : e.second) mean += x / static_cast<double>(e.second.size());
      RETURN_IF_ERROR((*store)->Put(
          e.first, {.median_s = mean, .repetitions = static_cast<int>(e.second.size())}));
    }
    return absl::OkStatus();
  };
  auto profile = [&](int passes) { return profile_specs(specs, names, passes); };
  if (absl::Status st = profile(ExecutedProfileOptions{}.passes); !st.ok()) return Fail(st);
  // The collectives, at the plans' sizes: once now and again at the start
  // of every round, so that their fit (over every sample in the store)
  // covers the same stretch of the machine's load as the measured steps.
  CollectiveBenchOptions o;
  o.ranks = a.ranks;
  o.sizes = BenchSizes(specs, a.ranks);
  o.collectives = {costmodel::Collective::kAllReduce, costmodel::Collective::kAllGather,
                   costmodel::Collective::kBroadcast, costmodel::Collective::kReduceScatter};
  o.repetitions = a.comm_reps;
  o.pin_cores = a.pin_cores;  // bound and polling, as the ranks below
  o.poll = a.poll;
  o.store_mean = true;        // the predictions sum a step's collectives
  o.device_kind = costmodel::CommProfileKey(*cluster);
  auto bench = [&]() -> absl::Status {
    if (a.skip_profile) return absl::OkStatus();
    std::fprintf(stderr, "benchmarking Gloo collectives at %zu sizes...\n", o.sizes.size());
    return RunCollectiveBench(o, store->get()).status();
  };
  if (absl::Status st = bench(); !st.ok()) return Fail(st);
  // braid's --parallel plan, made as `braid plan MODEL --parallel` makes it
  // on cpu-local (search::PlanParallel, every row priced as these ranks
  // execute it: ExecutedPlanCost, a row's kernels profiled here when the
  // store lacks them) with the cost model over this store, mapped onto the
  // spec the ranks run (worker/parallel_plan_exec.h).
  int braid_index = -1;
  std::string braid_plan;
  if (want_braid) {
    absl::Status st = [&]() -> absl::Status {
      // The model's graph is every single-stage spec's (a pipeline's is per stage).
      ASSIGN_OR_RETURN(ParallelTrainSpec model, MakeSpec(a, "data"));
      ASSIGN_OR_RETURN(graph::Graph fwd, ParallelTrainForwardGraph(model));
      ASSIGN_OR_RETURN(costmodel::CommModel comm, costmodel::CommModelFromStore(*cluster, store->get()));
      // Every candidate is profiled afresh inside a few of its own training
      // steps (ProfileInSteps) into an overlay of the store, its kernels
      // profiled alone first where the store lacks them: the predicted
      // columns below keep the kernels profiled alone.
      costmodel::OverlayProfileStore choice_store(**store);
      costmodel::ClusterCostModel cm(*cluster, &choice_store, nullptr, comm);
      search::ParallelPlanOptions po;
      po.op_fusion = false;       // the ranks run every op unfused
      po.substitutions = false;   // the executor runs the model's own graph
      po.overlap = false;         // and plain collectives
      po.fusion.time_budget_s = 5;
      po.executed_cost = ExecutedPlanCost(
          *cluster, cm, &choice_store,
          [&](const ParallelTrainSpec& s) -> absl::Status {
            ASSIGN_OR_RETURN(bool missing, LacksExecutedProfiles(s, cluster->device.kind, **store));
            if (missing)
              RETURN_IF_ERROR(profile_specs({s}, {"candidate"}, ExecutedProfileOptions{}.passes));
            if (a.skip_profile) return absl::OkStatus();
            std::fprintf(stderr, "profiling a candidate inside its own steps...\n");
            InStepProfileOptions io;
            io.pin_cores = a.pin_cores;
            return ProfileInSteps(s, *cluster, choice_store, io);
          },
          /*profile_every_spec=*/true);
      ASSIGN_OR_RETURN(search::ParallelPlanResult r, search::PlanParallel(fwd, *cluster, cm, po));
      for (const search::ParallelPlanRow& row : r.rows) {
        if (row.executed_status.ok()) {
          std::fprintf(stderr, "  %-16s executed-plan prediction %.2f ms (%s): %s\n",
                       row.strategy.name.c_str(), 1e3 * row.executed.step_s,
                       row.executed.source.c_str(), row.executed.runs.c_str());
        } else {
          std::fprintf(stderr, "  %-16s not run: %s\n", row.strategy.name.c_str(),
                       std::string(row.executed_status.message()).c_str());
        }
      }
      const search::ParallelPlanRow& row = r.rows[r.chosen];
      ASSIGN_OR_RETURN(PlannedSpec planned,
                       ParallelSpecFromPlan(fwd, search::ParallelPlanJson(fwd, row, *cluster),
                                            a.ranks));
      planned.spec.steps = a.warmup + a.steps;
      planned.spec.lr = 1e-3;
      planned.spec.seed = 11;
      braid_plan = absl::StrCat(row.strategy.name, ": ", PlannedSpecSummary(planned), " (chosen by ",
                                r.chosen_by, ")");
      specs.push_back(planned.spec);
      names.push_back("braid");
      braid_index = static_cast<int>(specs.size()) - 1;
      std::fprintf(stderr, "braid's --parallel plan: %s\n", braid_plan.c_str());
      return profile(ExecutedProfileOptions{}.passes);
    }();
    if (!st.ok()) return Fail(st);
  }
  auto predict = [&]() -> absl::StatusOr<std::vector<absl::StatusOr<ParallelPrediction>>> {
    ASSIGN_OR_RETURN(costmodel::CommModel comm,
                     costmodel::CommModelFromStore(*cluster, store->get()));
    costmodel::ClusterCostModel cm(*cluster, store->get(), nullptr, comm);
    std::vector<absl::StatusOr<ParallelPrediction>> out;
    for (const ParallelTrainSpec& s : specs)
      out.push_back(PredictParallelTraining(s, *cluster, cm, {.store = store->get()}));
    return out;
  };
  if (a.predict_only) {
    absl::StatusOr<std::vector<absl::StatusOr<ParallelPrediction>>> p = predict();
    if (!p.ok()) return Fail(p.status());
    std::vector<absl::StatusOr<ParallelPrediction>>& pred = *p;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!pred[i].ok()) return Fail(pred[i].status());
      std::printf("%s: predicted %.2f ms (forward %.2f, compute %.2f, comm %.2f, sync %.2f, step %.2f; "
                  "the DP's cost of this plan %.2f)\n",
                  names[i].c_str(), 1e3 * pred[i]->step_s, 1e3 * pred[i]->forward.s,
                  1e3 * pred[i]->compute.s, 1e3 * pred[i]->comm.s, 1e3 * pred[i]->grad_sync.s,
                  1e3 * pred[i]->step.s, 1e3 * pred[i]->dp_time_s);
    }
    return 0;
  }
  // braid's choice, made before anything is trained: the strategy its cost
  // model predicts fastest from the first profiles (what a launcher asking
  // braid for the parallelization of this model on these ranks would run).
  int choice = -1;
  double choice_s = 0;
  if (braid_index >= 0) {
    absl::StatusOr<std::vector<absl::StatusOr<ParallelPrediction>>> p = predict();
    if (!p.ok()) return Fail(p.status());
    choice = braid_index;
    if ((*p)[braid_index].ok()) choice_s = (*p)[braid_index]->step_s;
  } else {
    absl::StatusOr<std::vector<absl::StatusOr<ParallelPrediction>>> p = predict();
    if (!p.ok()) return Fail(p.status());
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!(*p)[i].ok()) continue;
      if (choice < 0 || (*p)[i]->step_s < choice_s) {
        choice = static_cast<int>(i);
        choice_s = (*p)[i]->step_s;
      }
    }
  }
  // Interleaved rounds: every strategy once per round.
  std::vector<std::vector<double>> steps(specs.size()), round_medians(specs.size());
  std::vector<std::vector<std::vector<ParallelTrainResult::RankClocked>>> rank_clocked(specs.size());
  // Per strategy and round parity (0: even rounds, 1: odd), the op clocks
  // of every timed step (in-graph op times; both halves together price the
  // in-graph prediction) and the step times: the held-out check prices each
  // half's steps with the other half's clocks.
  std::vector<std::array<std::vector<std::map<std::string, double>>, 2>> half_clocks(specs.size());
  std::vector<std::array<std::vector<double>, 2>> half_steps(specs.size());
  for (int r = 0; r < a.rounds; ++r) {
    if (r > 0) {
      if (absl::Status st = profile(1); !st.ok()) return Fail(st);
      if (absl::Status st = bench(); !st.ok()) return Fail(st);
    }
    // The order rotates by one strategy per round, so that no strategy
    // always runs first (after the profiling) or last: measured here, the
    // same data-parallel spec run first and last in every round came out
    // 1.8 ms apart, beyond both 95% intervals.
    for (size_t k = 0; k < specs.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % specs.size();
      ParallelTrainOptions po;
      po.pin_cores = a.pin_cores;
      po.poll = a.poll;
      po.op_clocks = true;
      absl::StatusOr<ParallelTrainResult> res = RunParallelTraining(specs[i], po);
      if (!res.ok()) return Fail(res.status());
      rank_clocked[i].insert(rank_clocked[i].end(), res->rank_clocked.begin() + a.warmup,
                             res->rank_clocked.end());
      std::vector<double> t(res->step_s.begin() + a.warmup, res->step_s.end());
      steps[i].insert(steps[i].end(), t.begin(), t.end());
      half_clocks[i][r % 2].insert(half_clocks[i][r % 2].end(), res->op_clocks.begin() + a.warmup,
                                   res->op_clocks.end());
      half_steps[i][r % 2].insert(half_steps[i][r % 2].end(), t.begin(), t.end());
      round_medians[i].push_back(Summarize(t).median_s);
      std::fprintf(stderr, "round %d %s: median %.2f ms\n", r, names[i].c_str(),
                   1e3 * round_medians[i].back());
    }
  }

  absl::StatusOr<std::vector<absl::StatusOr<ParallelPrediction>>> predicted = predict();
  if (!predicted.ok()) return Fail(predicted.status());
  std::vector<absl::StatusOr<ParallelPrediction>>& pred = *predicted;
  // The same predictions with the op times clocked inside each strategy's
  // own training steps (InGraphOpTimes) instead of the kernels profiled
  // alone; collectives from the same benchmark.
  std::vector<absl::StatusOr<ParallelPrediction>> in_graph;
  std::vector<InGraphTimes> clocked(specs.size());
  // Held out: the even rounds' clocks price the odd rounds' steps and the
  // odd rounds' clocks the even rounds' (error % of the median of the half
  // not clocked), so no prediction uses the clocks of the steps it is
  // compared with.
  std::vector<std::string> held_out(specs.size(), "n/a");
  {
    absl::StatusOr<costmodel::CommModel> comm =
        costmodel::CommModelFromStore(*cluster, store->get());
    if (!comm.ok()) return Fail(comm.status());
    auto in_graph_predict = [&](size_t i, const std::vector<std::map<std::string, double>>& c,
                                InGraphTimes* out) -> absl::StatusOr<ParallelPrediction> {
      ASSIGN_OR_RETURN(*out, InGraphOpTimes(specs[i], c, cluster->device.kind));
      costmodel::OverlayProfileStore overlay(**store);
      RETURN_IF_ERROR(PutInGraphTimes(*out, overlay));
      costmodel::ClusterCostModel cm(*cluster, &overlay, nullptr, *comm);
      return PredictParallelTraining(specs[i], *cluster, cm, {.store = &overlay});
    };
    for (size_t i = 0; i < specs.size(); ++i) {
      std::vector<std::map<std::string, double>> all = half_clocks[i][0];
      all.insert(all.end(), half_clocks[i][1].begin(), half_clocks[i][1].end());
      in_graph.push_back(in_graph_predict(i, all, &clocked[i]));
      if (a.store_in_step && in_graph.back().ok()) {
        if (absl::Status st = PutInGraphTimes(clocked[i], **store); !st.ok()) return Fail(st);
      }
      std::vector<std::string> errs;
      for (int h = 0; h < 2 && a.rounds >= 2; ++h) {
        InGraphTimes unused;
        absl::StatusOr<ParallelPrediction> p = in_graph_predict(i, half_clocks[i][h], &unused);
        if (!p.ok()) break;
        const double m = Summarize(half_steps[i][1 - h]).median_s;
        errs.push_back(absl::StrFormat("%+.1f", 100 * (p->step_s - m) / m));
      }
      if (errs.size() == 2) held_out[i] = absl::StrJoin(errs, " / ");
    }
  }
  std::printf("\n%s on cpu-local, %d ranks (Gloo), %d rounds x %d steps (after %d warm-up), "
              "interleaved; load average %s at the start, %s at the end\n\n",
              a.model.c_str(), a.ranks, a.rounds, a.steps, a.warmup, load_before.c_str(),
              LoadAverage().c_str());
  std::printf("| strategy | predicted ms | compute / comm / grad sync / loss+update / skew ms | "
              "measured median ms [95%% CI or range] | round medians ms | error %% | costs | "
              "in-graph predicted ms (error %%) | held-out in-graph error %% (even->odd / "
              "odd->even rounds) | in-graph compute ms | executor ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < specs.size(); ++i) {
    const MedianInterval ci = MedianConfidenceInterval(steps[i]);
    std::vector<double> rm = round_medians[i];
    std::sort(rm.begin(), rm.end());
    const std::string rms =
        absl::StrFormat("%.1f..%.1f", 1e3 * rm.front(), 1e3 * rm.back());
    if (!pred[i].ok()) {
      std::printf("| %s | n/a (%s) | | %.2f %s | %s | | |\n", names[i].c_str(),
                  std::string(pred[i].status().message()).c_str(), 1e3 * ci.median,
                  braid::FormatInterval(ci, 1e3, 2).c_str(), rms.c_str());
      continue;
    }
    const ParallelPrediction& p = *pred[i];
    const double err = 100 * (p.step_s - ci.median) / ci.median;
    std::string ig = "n/a";
    if (in_graph[i].ok()) {
      ig = absl::StrFormat("%.2f (%+.1f) | %s | %.2f | %.2f", 1e3 * in_graph[i]->step_s,
                           100 * (in_graph[i]->step_s - ci.median) / ci.median, held_out[i],
                           1e3 * in_graph[i]->compute.s, 1e3 * clocked[i].executor_s);
    } else {
      ig = absl::StrCat("n/a (", in_graph[i].status().message(), ") | | |");
    }
    std::printf(
        "| %s | %.2f | %.2f / %.2f / %.2f / %.2f / %.2f | %.2f %s | %s | %+.1f | "
        "compute %s, comm %s, grad sync %s, loss+update %s | %s |\n",
        names[i].c_str(), 1e3 * p.step_s, 1e3 * p.compute.s, 1e3 * p.comm.s,
        1e3 * p.grad_sync.s, 1e3 * p.step.s, 1e3 * p.skew.s, 1e3 * ci.median,
        braid::FormatInterval(ci, 1e3, 2).c_str(), rms.c_str(), err, p.compute.source().c_str(), p.comm.source().c_str(),
        p.grad_sync.source().c_str(), p.step.source().c_str(), ig.c_str());
  }
  if (choice >= 0 && specs.size() > 1) {
    // No slower than the best measured: the choice's 95% interval of the
    // median reaches below the best's upper end (they overlap), or it is
    // the best.
    int best = 0;
    std::vector<MedianInterval> ci;
    for (size_t i = 0; i < specs.size(); ++i) ci.push_back(MedianConfidenceInterval(steps[i]));
    for (size_t i = 1; i < specs.size(); ++i)
      if (ci[i].median < ci[best].median) best = static_cast<int>(i);
    const bool no_slower = choice == best || ci[choice].low <= ci[best].high;
    const std::string what = braid_index >= 0
                                 ? absl::StrCat("braid's --parallel plan (", braid_plan,
                                                "; predicted ", absl::StrFormat("%.2f", 1e3 * choice_s),
                                                " ms)")
                                 : absl::StrFormat("braid's choice (predicted fastest before training, %.2f ms)",
                                                   1e3 * choice_s);
    std::printf("\n%s: %s, measured "
                "%.2f ms [%.2f, %.2f]; measured fastest: %s, %.2f ms [%.2f, %.2f]: %s\n",
                what.c_str(), names[choice].c_str(), 1e3 * ci[choice].median,
                1e3 * ci[choice].low, 1e3 * ci[choice].high, names[best].c_str(),
                1e3 * ci[best].median, 1e3 * ci[best].low, 1e3 * ci[best].high,
                choice == best ? "the choice is the fastest"
                : no_slower    ? "no slower (95% intervals overlap)"
                               : "slower (95% intervals apart)");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!pred[i].ok()) continue;
    std::printf("\n%s: forward %.2f ms of compute; DP's own cost of the forced plan %.2f ms "
                "(backward_factor 2; collectives as measured where the store has them, else link "
                "priors)\n",
                names[i].c_str(), 1e3 * pred[i]->forward.s, 1e3 * pred[i]->dp_time_s);
    for (const std::string& n : pred[i]->notes) std::printf("  note: %s\n", n.c_str());
    if (in_graph[i].ok()) {
      std::printf("  in-graph: compute %.2f ms (forward %.2f), loss+update %.2f ms; clocked per "
                  "step %.2f ms on the busiest stage, %.2f ms of it the executor's own work\n",
                  1e3 * in_graph[i]->compute.s, 1e3 * in_graph[i]->forward.s,
                  1e3 * in_graph[i]->step.s, 1e3 * clocked[i].clocked_s,
                  1e3 * clocked[i].executor_s);
      // Where each rank's step went: ops vs communication (waits included).
      std::vector<std::string> per_rank;
      const size_t nr = rank_clocked[i].empty() ? 0 : rank_clocked[i][0].size();
      for (size_t r = 0; r < nr; ++r) {
        double c = 0, m = 0;
        for (const auto& st : rank_clocked[i]) {
          c += st[r].compute_s / rank_clocked[i].size();
          m += st[r].comm_s / rank_clocked[i].size();
        }
        per_rank.push_back(absl::StrFormat("rank %zu ops %.2f + comm %.2f", r, 1e3 * c, 1e3 * m));
      }
      // Skew: how far apart the ranks' op time is within a step (max - min
      // over the ranks), and the least time any rank spent communicating.
      double spread = 0, least_comm = 0;
      for (const auto& st : rank_clocked[i]) {
        double lo = 1e30, hi = 0, lc = 1e30;
        for (const auto& rc : st) {
          lo = std::min(lo, rc.compute_s);
          hi = std::max(hi, rc.compute_s);
          lc = std::min(lc, rc.comm_s);
        }
        spread += (hi - lo) / rank_clocked[i].size();
        least_comm += lc / rank_clocked[i].size();
      }
      std::printf("  clocked per step (mean): %s ms; ops spread over ranks %.2f ms, least comm %.2f ms\n",
                  absl::StrJoin(per_rank, "; ").c_str(), 1e3 * spread, 1e3 * least_comm);
      if (!clocked[i].unclocked.empty()) {
        std::printf("  in-graph: %zu keys never clocked (profiled times kept): %s\n",
                    clocked[i].unclocked.size(), absl::StrJoin(clocked[i].unclocked, ", ").c_str());
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace braid::worker

int main(int argc, char** argv) {
  braid::worker::Args a;
  CLI::App app{"Predicted vs measured step time of parallel training on cpu-local"};
  app.add_option("--model", a.model, "mlp or transformer");
  app.add_option("--strategies", a.strategies,
                 "comma-separated: data, tensor, pipeline, braid (the plan braid plan --parallel "
                 "makes for this model, from the profiles of the first round)");
  app.add_option("--ranks", a.ranks, "Gloo ranks")->check(CLI::Range(2, 16));
  app.add_option("--rounds", a.rounds, "interleaved rounds")->check(CLI::PositiveNumber);
  app.add_option("--steps", a.steps, "timed steps per round")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a.warmup, "untimed steps per round")->check(CLI::NonNegativeNumber);
  app.add_option("--db", a.db, "profile store (SQLite file); required unless --write-model");
  app.add_flag("--skip-profile", a.skip_profile, "use the store's profiles as they are");
  app.add_flag("--store-in-step", a.store_in_step,
               "after the rounds, store the op times clocked inside the steps in --db (a later "
               "--skip-profile run predicts from them)");
  app.add_option("--batch", a.batch, "global batch (default: MLP 256, transformer 8)");
  app.add_flag("--co-run", a.co_run, "internal: the profiling co-runner")->group("");
  app.add_flag("--alone", a.alone, "profile kernels without the co-runner");
  app.add_option("--pin-cores", a.pin_cores, "bind rank r to core r mod cores (default true)");
  app.add_option("--poll", a.poll,
                 "bound ranks and the collective benchmark poll for collectives instead of "
                 "blocking (default true)");
  app.add_option("--micro-batches", a.micro_batches, "pipeline micro-batches per step")
      ->check(CLI::PositiveNumber);
  app.add_flag("--predict-only", a.predict_only, "profile and predict, do not train");
  app.add_option("--comm-reps", a.comm_reps, "repetitions per collective size");
  app.add_option("--write-model", a.write_model,
                 "write the model's forward graph (global batch, braid text format) for `braid "
                 "plan FILE --parallel` and exit");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  return braid::worker::Run(a);
}
