// The import fuzz test: a deterministic, seeded, structure-aware mutation fuzzer
// for the inputs the strategy service takes from users, ONNX models and
// ClusterSpec JSON, run as an ordinary ctest (label `fuzz`).
//
// Targets (corpus: tests/data/fuzz/README.md):
//  - onnx: a seed model (OnnxSeedModels() from tests/data, plus
//    tests/data/fuzz/onnx/*.textproto) mutated structurally
//    (tests/fuzz_mutators.h), then ImportOnnxBytes -> Validate -> GraphToJson,
//    ComputeStats, ToText/ParseText round trip -> BuildTrainingGraph -> the
//    same checks -> for cpu-local and disco-a (2 ranks): NoFusionPlan ->
//    PlanToJson/PlanFromJson -> Lower -> Simulate -> FullyOverlappedBound,
//    ChromeTrace and the `braid simulate --json` document.
//  - cluster: a preset's JSON (tests/data/fuzz/cluster/*.json) mutated field by
//    field, then ParseClusterJson -> ValidateCluster, ClusterToJson round trip,
//    ClusterFingerprint, WithRanks -> zoo:mlp trained and simulated on it.
//  - plan and checkpoint: plan files and GNN checkpoint metadata (see "plan
//    files and checkpoint metadata" below).
// Any error status is fine. A mutant fails the test when it crashes (signal,
// CHECK, abort), throws out of a braid API, allocates more than the malloc
// limit at once (an input of kilobytes must not ask for gigabytes), hangs past
// the timeout, returns OK with invalid output (a graph that does not validate
// or round-trip, a plan that does not, a trace that is not JSON) or returns OK
// from Lower and then simulates to a non-finite time.
//
// Mutants run in batches in forked children (a SIGFPE must not take the test
// binary down). When a child dies, the parent re-runs the mutant it was on
// alone (and, if that passes, every mutant of the batch alone) to isolate the
// input, writes it to $BRAID_FUZZ_OUT_DIR (default build/tests/fuzz_out) as
// <target>-seed<S>-iter<I>.{onnx,json} with a .log (the child's stderr: glog's
// stack trace) and .txt (the mutations), shrinks it (-min.onnx, also as
// -min.textproto) and fails naming all of them. Every iteration has its own
// generator, IterationRng(seed, target, iteration), so any one replays alone.
// The regression corpus tests/data/fuzz/regressions/ replays first.
//
// CI runs the fixed count below (kDefaultSeed = 9, kDefaultOnnxIters and
// kDefaultClusterIters = 5000, kDefaultJobs = 2). To run longer, or with
// another seed:
//   BRAID_FUZZ_ITERS=200000 BRAID_FUZZ_SEED=7 BRAID_FUZZ_JOBS=8
//     build/tests/fuzz_import_test --gtest_filter='Fuzz.*Mutants'
// (one command line; from the repository root or anywhere else).
// Environment knobs (all optional):
//   BRAID_FUZZ_SEED            base seed (default kDefaultSeed)
//   BRAID_FUZZ_ITERS           ONNX mutants (default kDefaultOnnxIters); also
//                              scales the cluster mutants unless
//   BRAID_FUZZ_CLUSTER_ITERS   cluster mutants is set
//   BRAID_FUZZ_FIRST_ITER      first iteration (replay one: FIRST_ITER=I ITERS=1)
//   BRAID_FUZZ_JOBS            children run at once (default kDefaultJobs, 2)
//   BRAID_FUZZ_BATCH           mutants per child (default 64)
//   BRAID_FUZZ_TIMEOUT_S       per-mutant time limit (default 10 s)
//   BRAID_FUZZ_MALLOC_LIMIT_MB largest single allocation (default 1024)
//   BRAID_FUZZ_MAX_FINDINGS    stop after this many failing mutants (default 20)
//   BRAID_FUZZ_MINIMIZE_S      time to shrink each distinct finding (default 20;
//                              at most 3x that per target in all)
//   BRAID_FUZZ_OUT_DIR         where reproducers go
//   BRAID_FUZZ_REPLAY=FILE     Fuzz.Replay runs FILE (.onnx/.textproto/.json)
//                              in-process, for a debugger
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/bounded_json.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_check.h"
#include "costmodel/gnn/checkpoint_info.h"
#include "costmodel/gnn/gnn_estimator.h"
#include "costmodel/gnn/gnn_model.h"
#include "costmodel/gnn/sample_hashes.h"
#include "costmodel/op_cost.h"
#include "costmodel/simulator.h"
#include "glog/logging.h"
#include "google/protobuf/text_format.h"
#include "graph/graph_json.h"
#include "graph/onnx_import.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "search/baselines.h"
#include "search/lowering.h"
#include "search/plan.h"
#include "server/feedback.h"
#include "server/strategy_api.h"
#include "tests/fuzz_mutators.h"
#include <torch/utils.h>

// ---- malloc limit --------------------------------------------------------------
// libFuzzer's -malloc_limit_mb: in fuzz children, one allocation above the
// limit aborts with a stack trace instead of being served (or, with
// overcommit, zero-filled for minutes). 0 (the parent) means no limit.
namespace {
std::atomic<size_t> g_malloc_limit{0};

[[noreturn]] void MallocLimitExceeded(size_t n) {
  const size_t limit = g_malloc_limit.exchange(0);
  std::fprintf(stderr,
               "==fuzz== malloc limit exceeded: one allocation of %zu bytes (limit %zu MiB)\n", n,
               limit >> 20);
  std::abort();
}

void* FuzzAlloc(size_t n) {
  const size_t limit = g_malloc_limit.load(std::memory_order_relaxed);
  if (limit != 0 && n > limit) MallocLimitExceeded(n);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return FuzzAlloc(n); }
void* operator new[](size_t n) { return FuzzAlloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return FuzzAlloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace braid::fuzz {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The fixed run of CI: 5,000 mutants per target, two children at a time,
// about 35 s on 2 cores (Release) when nothing fails; tests/data/fuzz/README.md.
constexpr uint64_t kDefaultSeed = 9;
constexpr int64_t kDefaultOnnxIters = 5000;
constexpr int64_t kDefaultClusterIters = 5000;
constexpr int kDefaultJobs = 2;

// Seed models from tests/data: small, and between them convolutions, pooling,
// BatchNorm in training mode, attention, LSTM, Trilu masks, custom domains, an
// old opset and a cycle. The large vision models only add import time.
const std::vector<std::string>& OnnxSeedModels() {
  static const auto* v = new std::vector<std::string>{"mlp_with_initializers",
                                                      "mlp_weightless",
                                                      "resnet18_train_opset13",
                                                      "transformer_encoder_d256_opset14",
                                                      "multihead_attention_opset13",
                                                      "lstm_lm_opset14",
                                                      "gpt_decoder_opset17",
                                                      "vgg11_opset13",
                                                      "custom_op",
                                                      "opset5",
                                                      "cycle"};
  return *v;
}

std::string SourcePath(const std::string& rel) { return absl::StrCat(BRAID_SOURCE_DIR, "/", rel); }

std::string ReadFileOrDie(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  CHECK(in) << "cannot read " << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string EnvString(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : def;
}

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 0);
  CHECK(end != nullptr && *end == '\0') << name << "=" << v << " is not an integer";
  return x;
}

struct FuzzConfig {
  uint64_t seed = kDefaultSeed;
  int64_t first_iteration = 0;
  int64_t onnx_iters = kDefaultOnnxIters;
  int64_t cluster_iters = kDefaultClusterIters;
  int jobs = kDefaultJobs;
  int batch = 64;
  double timeout_s = 10;
  int64_t malloc_limit_mb = 1024;
  int max_findings = 20;
  double minimize_s = 20;
  std::string out_dir;

  static FuzzConfig FromEnv() {
    FuzzConfig c;
    c.seed = static_cast<uint64_t>(EnvInt("BRAID_FUZZ_SEED", static_cast<int64_t>(kDefaultSeed)));
    c.first_iteration = EnvInt("BRAID_FUZZ_FIRST_ITER", 0);
    c.onnx_iters = EnvInt("BRAID_FUZZ_ITERS", kDefaultOnnxIters);
    c.cluster_iters =
        EnvInt("BRAID_FUZZ_CLUSTER_ITERS",
               std::getenv("BRAID_FUZZ_ITERS") != nullptr ? c.onnx_iters : kDefaultClusterIters);
    c.jobs = static_cast<int>(std::max<int64_t>(1, EnvInt("BRAID_FUZZ_JOBS", kDefaultJobs)));
    c.batch = static_cast<int>(std::max<int64_t>(1, EnvInt("BRAID_FUZZ_BATCH", 64)));
    c.timeout_s = static_cast<double>(EnvInt("BRAID_FUZZ_TIMEOUT_S", 10));
    c.malloc_limit_mb = EnvInt("BRAID_FUZZ_MALLOC_LIMIT_MB", 1024);
    c.max_findings = static_cast<int>(EnvInt("BRAID_FUZZ_MAX_FINDINGS", 20));
    c.minimize_s = static_cast<double>(EnvInt("BRAID_FUZZ_MINIMIZE_S", 20));
    c.out_dir = EnvString("BRAID_FUZZ_OUT_DIR", BRAID_FUZZ_DEFAULT_OUT_DIR);
    return c;
  }
};

// ---- the code under test ------------------------------------------------------
// Each check returns a description of what is wrong, or nullopt. Exceptions
// are left to the caller, which reports them with the stage they escaped from.

using Finding = std::optional<std::string>;

// Where the pipeline is, for exception reports.
thread_local const char* g_stage = "start";

// How far the last check got: the input was rejected with a status, accepted
// (imported / parsed), a training graph was built, or it was simulated. The
// fuzz loop counts these, the seed test wants its seeds simulated.
enum class Reached { kRejected, kAccepted, kTrained, kSimulated };
constexpr const char* kReachedNames[] = {"rejected", "accepted", "trained", "simulated"};
thread_local Reached g_reached = Reached::kRejected;

void Reach(Reached r) { g_reached = std::max(g_reached, r); }

Finding CheckGraph(const graph::Graph& g, const char* what) {
  g_stage = "Graph::Validate";
  if (absl::Status s = g.Validate(); !s.ok()) {
    return absl::StrCat(what, " returned OK but does not validate: ", s.ToString());
  }
  g_stage = "GraphToJson().dump()";
  (void)graph::GraphToJson(g).dump();
  g_stage = "StatsToJson(ComputeStats()).dump()";
  (void)graph::StatsToJson(graph::ComputeStats(g)).dump();
  g_stage = "ToText";
  const std::string text = graph::ToText(g);
  g_stage = "ParseText(ToText())";
  absl::StatusOr<graph::Graph> back = graph::ParseText(text);
  if (!back.ok()) {
    return absl::StrCat("ToText of the ", what, " does not parse back: ", back.status().ToString());
  }
  if (graph::ToText(*back) != text)
    return absl::StrCat("ToText/ParseText of the ", what, " does not round-trip");
  return std::nullopt;
}

bool Finite(double x) { return std::isfinite(x) && x >= 0; }

Finding CheckSimulation(const graph::Graph& train, const costmodel::ClusterSpec& cluster) {
  g_stage = "CommModelFromStore";
  absl::StatusOr<costmodel::CommModel> comm = costmodel::CommModelFromStore(cluster, nullptr);
  if (!comm.ok()) return std::nullopt;
  costmodel::ClusterCostModel cm(cluster, nullptr, nullptr, *comm);
  g_stage = "NoFusionPlan";
  search::Plan plan = search::NoFusionPlan(train);
  g_stage = "PlanToJson().dump()";
  const std::string plan_json = search::PlanToJson(train, plan).dump();
  g_stage = "PlanFromJson";
  absl::StatusOr<search::Plan> plan_back =
      search::PlanFromJson(train, nlohmann::json::parse(plan_json));
  if (!plan_back.ok() || !(*plan_back == plan)) {
    return absl::StrCat("PlanToJson/PlanFromJson does not round-trip: ",
                        plan_back.ok() ? "different plan" : plan_back.status().ToString());
  }
  g_stage = "Lower";
  absl::StatusOr<costmodel::SimGraph> sg = search::Lower(train, plan, cm);
  if (!sg.ok()) return std::nullopt;
  g_stage = "Simulate";
  const costmodel::SimResult r = costmodel::Simulate(*sg);
  Reach(Reached::kSimulated);
  if (r.unfinished_tasks != 0) {
    return absl::StrCat("Lower returned OK but ", r.unfinished_tasks, " tasks never ran on ",
                        cluster.name);
  }
  if (!Finite(r.iteration_s) || !Finite(r.compute_s) || !Finite(r.comm_s)) {
    return absl::StrCat("non-finite simulated time on ", cluster.name, ": iteration ",
                        r.iteration_s, " s, compute ", r.compute_s, " s, comm ", r.comm_s, " s");
  }
  g_stage = "FullyOverlappedBound";
  if (const double fo = search::FullyOverlappedBound(std::span<const costmodel::SimResult>(&r, 1));
      !Finite(fo)) {
    return absl::StrCat("non-finite fully-overlapped time on ", cluster.name, ": ", fo);
  }
  g_stage = "ChromeTrace";
  const std::string trace = costmodel::ChromeTrace(*sg, r);
  if (nlohmann::json::parse(trace, nullptr, /*allow_exceptions=*/false).is_discarded()) {
    return absl::StrCat("ChromeTrace on ", cluster.name, " is not valid JSON");
  }
  g_stage = "braid simulate --json document .dump()";
  (void)nlohmann::json{{"model", train.name()},
                       {"cluster", cluster.name},
                       {"ranks", cluster.num_ranks},
                       {"iteration_ms", r.iteration_s * 1e3}}
      .dump();
  return std::nullopt;
}

const std::vector<costmodel::ClusterSpec>& OnnxClusters() {
  static const auto* v = [] {
    auto* out = new std::vector<costmodel::ClusterSpec>;
    for (const char* name : {"cpu-local", "disco-a"}) {
      absl::StatusOr<costmodel::ClusterSpec> c = costmodel::ClusterPreset(name);
      CHECK(c.ok()) << c.status();
      c = costmodel::WithRanks(*c, 2);
      CHECK(c.ok()) << c.status();
      out->push_back(*c);
    }
    return out;
  }();
  return *v;
}

Finding CheckOnnx(std::string_view bytes) {
  g_reached = Reached::kRejected;
  std::vector<std::string> warnings;
  g_stage = "ImportOnnxBytes";
  absl::StatusOr<graph::Graph> g = graph::ImportOnnxBytes(bytes, {}, &warnings);
  if (!g.ok()) {
    if (g.status().message().empty()) return "ImportOnnxBytes failed with an empty message";
    return std::nullopt;
  }
  Reach(Reached::kAccepted);
  if (Finding f = CheckGraph(*g, "imported graph")) return f;
  g_stage = "BuildTrainingGraph";
  absl::StatusOr<graph::Graph> train = graph::BuildTrainingGraph(*g, {.ranks = 2});
  if (!train.ok()) return std::nullopt;
  Reach(Reached::kTrained);
  if (Finding f = CheckGraph(*train, "training graph")) return f;
  for (const costmodel::ClusterSpec& c : OnnxClusters()) {
    if (Finding f = CheckSimulation(*train, c)) return f;
  }
  return std::nullopt;
}

const graph::Graph& ZooMlp() {
  static const auto* g = [] {
    absl::StatusOr<graph::Graph> mlp = graph::BuildZooModel("mlp", 8);
    CHECK(mlp.ok()) << mlp.status();
    return new graph::Graph(*std::move(mlp));
  }();
  return *g;
}

Finding CheckClusterRanks(const costmodel::ClusterSpec& c) {
  g_stage = "BuildTrainingGraph(zoo:mlp)";
  absl::StatusOr<graph::Graph> train = graph::BuildTrainingGraph(ZooMlp(), {.ranks = c.num_ranks});
  if (!train.ok()) return std::nullopt;
  Reach(Reached::kTrained);
  return CheckSimulation(*train, c);
}

Finding CheckCluster(std::string_view text) {
  g_reached = Reached::kRejected;
  g_stage = "ParseClusterJson";
  absl::StatusOr<costmodel::ClusterSpec> c = costmodel::ParseClusterJson(text);
  if (!c.ok()) {
    if (c.status().message().empty()) return "ParseClusterJson failed with an empty message";
    return std::nullopt;
  }
  Reach(Reached::kAccepted);
  g_stage = "ValidateCluster";
  if (absl::Status s = costmodel::ValidateCluster(*c); !s.ok()) {
    return absl::StrCat("ParseClusterJson returned OK for a spec ValidateCluster rejects: ",
                        s.ToString());
  }
  g_stage = "ClusterToJson";
  const std::string json = costmodel::ClusterToJson(*c);
  g_stage = "ParseClusterJson(ClusterToJson())";
  absl::StatusOr<costmodel::ClusterSpec> back = costmodel::ParseClusterJson(json);
  if (!back.ok())
    return absl::StrCat("ClusterToJson output does not parse back: ", back.status().ToString());
  g_stage = "ClusterFingerprint";
  if (costmodel::ClusterFingerprint(*back) != costmodel::ClusterFingerprint(*c)) {
    return "ClusterToJson/ParseClusterJson does not round-trip (fingerprints differ)";
  }
  if (Finding f = CheckClusterRanks(*c)) return f;
  g_stage = "WithRanks";
  for (int n : {1, 2}) {
    absl::StatusOr<costmodel::ClusterSpec> r = costmodel::WithRanks(*c, n);
    if (!r.ok()) continue;
    g_stage = "ValidateCluster(WithRanks())";
    if (absl::Status s = costmodel::ValidateCluster(*r); !s.ok()) {
      return absl::StrCat("WithRanks(", n, ") returned OK for an invalid spec: ", s.ToString());
    }
    if (Finding f = CheckClusterRanks(*r)) return f;
  }
  return std::nullopt;
}

// Runs a check, turning an exception escaping braid into a finding.
Finding Guarded(const std::function<Finding()>& check) {
  try {
    return check();
  } catch (const std::exception& e) {
    return absl::StrCat("uncaught exception from ", g_stage, ": ", e.what());
  } catch (...) {
    return absl::StrCat("uncaught non-std exception from ", g_stage);
  }
}

// ---- corpus -----------------------------------------------------------------

struct Seed {
  std::string name;
  onnx::ModelProto model;
};

std::optional<onnx::ModelProto> ParseModel(const std::string& bytes, bool textproto) {
  onnx::ModelProto m;
  const bool ok = textproto ? google::protobuf::TextFormat::ParseFromString(bytes, &m)
                            : m.ParseFromString(bytes);
  if (!ok) return std::nullopt;
  return m;
}

std::vector<fs::path> FilesIn(const std::string& dir, const std::set<std::string>& extensions) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && extensions.count(e.path().extension().string()) > 0)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<Seed>& OnnxSeeds() {
  static const auto* seeds = [] {
    auto* out = new std::vector<Seed>;
    for (const std::string& name : OnnxSeedModels()) {
      std::optional<onnx::ModelProto> m =
          ParseModel(ReadFileOrDie(SourcePath(absl::StrCat("tests/data/", name, ".onnx"))), false);
      CHECK(m.has_value()) << name << " is not a ModelProto";
      out->push_back({name, *std::move(m)});
    }
    for (const fs::path& p : FilesIn(SourcePath("tests/data/fuzz/onnx"), {".textproto"})) {
      std::optional<onnx::ModelProto> m = ParseModel(ReadFileOrDie(p), true);
      CHECK(m.has_value()) << p << " is not a ModelProto in protobuf text format";
      out->push_back({p.stem().string(), *std::move(m)});
    }
    return out;
  }();
  return *seeds;
}

struct ClusterSeed {
  std::string name;
  nlohmann::json json;
};

const std::vector<ClusterSeed>& ClusterSeeds() {
  static const auto* seeds = [] {
    auto* out = new std::vector<ClusterSeed>;
    for (const fs::path& p : FilesIn(SourcePath("tests/data/fuzz/cluster"), {".json"})) {
      out->push_back({p.stem().string(), nlohmann::json::parse(ReadFileOrDie(p))});
    }
    return out;
  }();
  return *seeds;
}

// ---- targets ----------------------------------------------------------------

struct FuzzInput {
  std::string bytes;
  std::vector<std::string> log;  // seed and mutations, one per line
};

// What the harness fuzzes: how to make the mutant of an iteration, how to
// check one, and (optionally) how to shrink a failing one.
struct FuzzTarget {
  std::string name;       // "onnx"
  std::string extension;  // ".onnx"
  std::function<FuzzInput(uint64_t seed, int64_t iteration)> make;
  std::function<Finding(std::string_view bytes)> check;
  // Inputs one step smaller than `bytes` (made at `iteration`), best first.
  std::function<std::vector<std::string>(uint64_t seed, int64_t iteration,
                                         const std::string& bytes)>
      reductions;
  // Extra renderings of an input next to the reproducer (stem + suffix).
  std::function<void(const std::string& stem, const std::string& bytes)> write_extra;
};

FuzzTarget OnnxTarget() {
  FuzzTarget t;
  t.name = "onnx";
  t.extension = ".onnx";
  t.make = [](uint64_t seed, int64_t it) {
    Rng rng = IterationRng(seed, "onnx", it);
    const Seed& s =
        OnnxSeeds()[std::uniform_int_distribution<size_t>(0, OnnxSeeds().size() - 1)(rng)];
    onnx::ModelProto m = s.model;
    FuzzInput in;
    in.log.push_back(absl::StrCat("seed model ", s.name));
    in.bytes = MutateOnnx(m, rng, &in.log);
    return in;
  };
  t.check = [](std::string_view bytes) { return CheckOnnx(bytes); };
  t.reductions = [](uint64_t, int64_t, const std::string& bytes) {
    std::vector<std::string> out;
    std::optional<onnx::ModelProto> m = ParseModel(bytes, false);
    if (!m.has_value()) return out;
    for (const onnx::ModelProto& r : OnnxReductions(*m)) out.push_back(r.SerializeAsString());
    return out;
  };
  t.write_extra = [](const std::string& stem, const std::string& bytes) {
    std::optional<onnx::ModelProto> m = ParseModel(bytes, false);
    std::string text;
    if (m.has_value() && google::protobuf::TextFormat::PrintToString(*m, &text)) {
      WriteFile(stem + ".textproto", text);
    }
  };
  return t;
}

const ClusterSeed& ClusterSeedOf(Rng& rng) {
  return ClusterSeeds()[std::uniform_int_distribution<size_t>(0, ClusterSeeds().size() - 1)(rng)];
}

FuzzTarget ClusterTarget() {
  FuzzTarget t;
  t.name = "cluster";
  t.extension = ".json";
  t.make = [](uint64_t seed, int64_t it) {
    Rng rng = IterationRng(seed, "cluster", it);
    const ClusterSeed& s = ClusterSeedOf(rng);
    ClusterMutant m = MutateClusterJson(s.json, rng);
    FuzzInput in;
    in.log.push_back(absl::StrCat("seed cluster ", s.name));
    for (const JsonEdit& e : m.edits) in.log.push_back(e.Describe());
    in.bytes = ApplyClusterMutant(s.json, m);
    return in;
  };
  t.check = [](std::string_view bytes) { return CheckCluster(bytes); };
  // Revert one field to the seed's value (or drop a field the seed lacks).
  t.reductions = [](uint64_t seed, int64_t it, const std::string& bytes) {
    std::vector<std::string> out;
    nlohmann::json cur = nlohmann::json::parse(bytes, nullptr, false);
    if (cur.is_discarded() || !cur.is_object()) return out;
    Rng rng = IterationRng(seed, "cluster", it);
    const nlohmann::json& orig = ClusterSeedOf(rng).json;
    const nlohmann::json flat_cur = cur.flatten();
    const nlohmann::json flat_orig = orig.flatten();
    for (const auto& [ptr, v] : flat_cur.items()) {
      if (flat_orig.contains(ptr) && flat_orig[ptr] == v) continue;
      nlohmann::json f = flat_cur;
      if (flat_orig.contains(ptr)) {
        f[ptr] = flat_orig[ptr];
      } else {
        f.erase(ptr);
      }
      out.push_back(f.unflatten().dump(2));
    }
    for (const auto& [ptr, v] : flat_orig.items()) {
      if (flat_cur.contains(ptr)) continue;
      nlohmann::json f = flat_cur;
      f[ptr] = v;
      out.push_back(f.unflatten().dump(2));
    }
    return out;
  };
  return t;
}

// ---- children -------------------------------------------------------------------

constexpr int kFindingExit = 86;
constexpr const char* kFindingMarker = "==fuzz== FINDING: ";

struct Outcome {
  enum class Kind { kOk, kFinding, kSignal, kTimeout, kExit } kind = Kind::kOk;
  int signal = 0;
  int exit_code = 0;
  int64_t iteration = -1;  // the one running when the child stopped
};

// One forked child running `job` over [begin, end). It writes the iteration
// it starts to `progress`, and `end` when it is done; the parent kills it
// when one iteration runs longer than the timeout.
struct Child {
  pid_t pid = -1;
  int64_t begin = 0, end = 0;
  int64_t* progress = nullptr;  // shared with the child
  std::string log;
  int64_t seen = -1;        // the last progress value the parent saw
  Clock::time_point since;  // when it saw it
  double timeout_s = 10;
};

using Job = std::function<Finding(int64_t)>;

void StartChild(Child& c, const Job& job, const FuzzConfig& cfg) {
  *c.progress = c.begin;
  c.seen = c.begin;
  c.since = Clock::now();
  c.timeout_s = cfg.timeout_s;
  std::fflush(stdout);
  std::fflush(stderr);
  c.pid = fork();
  CHECK(c.pid >= 0) << "fork: " << std::strerror(errno);
  if (c.pid != 0) return;
  // The child: output to its log, no core files, glog's stack dump on a
  // fatal signal, the malloc limit on.
  const int fd = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, STDERR_FILENO);
    dup2(fd, STDOUT_FILENO);
    close(fd);
  }
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  google::InstallFailureSignalHandler();
  g_malloc_limit = static_cast<size_t>(cfg.malloc_limit_mb) << 20;
  for (int64_t i = c.begin; i < c.end; ++i) {
    *c.progress = i;
    Finding f = Guarded([&] { return job(i); });
    if (f.has_value()) {
      std::fprintf(stderr, "%s%s\n", kFindingMarker, f->c_str());
      std::fflush(stderr);
      _exit(kFindingExit);
    }
  }
  *c.progress = c.end;  // done: an exit(0) from inside braid would leave it short
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(0);
}

// nullopt while the child runs; kills it when one iteration takes too long.
std::optional<Outcome> PollChild(Child& c) {
  int status = 0;
  pid_t r = waitpid(c.pid, &status, WNOHANG);
  Outcome o;
  if (r == 0) {
    const auto now = Clock::now();
    if (const int64_t p = *c.progress; p != c.seen) {
      c.seen = p;
      c.since = now;
    }
    if (std::chrono::duration<double>(now - c.since).count() < c.timeout_s) return std::nullopt;
    kill(c.pid, SIGKILL);
    waitpid(c.pid, &status, 0);
    o.kind = Outcome::Kind::kTimeout;
  } else if (WIFSIGNALED(status)) {
    o.kind = Outcome::Kind::kSignal;
    o.signal = WTERMSIG(status);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == kFindingExit) {
    o.kind = Outcome::Kind::kFinding;
  } else if (WIFEXITED(status) && (WEXITSTATUS(status) != 0 || *c.progress != c.end)) {
    o.kind = Outcome::Kind::kExit;
    o.exit_code = WEXITSTATUS(status);
  }
  o.iteration = std::min(*c.progress, c.end - 1);
  c.pid = -1;
  return o;
}

Outcome WaitChild(Child& c) {
  for (;;) {
    if (std::optional<Outcome> o = PollChild(c)) return *o;
    usleep(500);
  }
}

// Shared memory for the children's progress counters.
int64_t* SharedCounters(int n) {
  void* p =
      mmap(nullptr, sizeof(int64_t) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED) << "mmap: " << std::strerror(errno);
  return static_cast<int64_t*>(p);
}

Outcome RunAlone(const Job& job, int64_t iteration, const std::string& log, const FuzzConfig& cfg) {
  static int64_t* progress = SharedCounters(1);
  Child c{.begin = iteration, .end = iteration + 1, .progress = progress, .log = log};
  StartChild(c, job, cfg);
  return WaitChild(c);
}

// ---- signatures -------------------------------------------------------------------

std::string Normalize(std::string s) {
  s = std::regex_replace(s, std::regex("0x[0-9a-fA-F]+"), "0x?");
  s = std::regex_replace(s, std::regex("[0-9]+"), "N");
  return s.substr(0, 120);
}

// What went wrong, from the outcome and the child's log: the kind, and the
// CHECK's location, the first stack frame outside the signal handler, libc
// and the allocator, or the finding's text. Equal signatures are one bug.
std::string Signature(const Outcome& o, const std::string& log_path) {
  std::string log;
  {
    std::ifstream in(log_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    log = ss.str();
  }
  std::vector<std::string> lines = absl::StrSplit(log, '\n');
  auto first_line_with = [&](const std::string& needle) -> std::string {
    for (const std::string& l : lines) {
      if (l.find(needle) != std::string::npos) return l;
    }
    return "";
  };
  switch (o.kind) {
    case Outcome::Kind::kOk:
      return "ok";
    case Outcome::Kind::kTimeout:
      return "timeout";
    case Outcome::Kind::kExit:
      return o.exit_code == 0 ? "exit(0) before the batch was done"
                              : absl::StrCat("exit ", o.exit_code);
    case Outcome::Kind::kFinding: {
      std::string l = first_line_with(kFindingMarker);
      return Normalize(l.substr(std::min(l.size(), std::strlen(kFindingMarker))));
    }
    case Outcome::Kind::kSignal:
      break;
  }
  std::string what = absl::StrCat(strsignal(o.signal));
  if (std::string check = first_line_with("Check failed"); !check.empty()) {
    static const std::regex kLoc("([A-Za-z0-9_]+\\.(cc|h|cpp):[0-9]+)\\]");
    std::smatch m;
    if (std::regex_search(check, m, kLoc)) return absl::StrCat("CHECK at ", m[1].str());
  }
  if (!first_line_with("malloc limit exceeded").empty()) what = "malloc limit exceeded";
  static const std::vector<std::string> kSkip = {"FailureSignalHandler",
                                                 "(unknown)",
                                                 "google::",
                                                 "abort",
                                                 "raise",
                                                 "gsignal",
                                                 "__restore_rt",
                                                 "pthread_kill",
                                                 "MallocLimitExceeded",
                                                 "FuzzAlloc",
                                                 "operator new",
                                                 "__cxa",
                                                 "std::",
                                                 "__gnu_cxx",
                                                 "braid::fuzz",
                                                 "__libc",
                                                 "_start",
                                                 "__GI_",
                                                 "_ZNSt",
                                                 "_ZSt",
                                                 "_ZN9__gnu_cxx"};
  bool in_stack = false;
  for (const std::string& l : lines) {
    if (absl::StrContains(l, "stack trace")) in_stack = true;
    if (!in_stack || !absl::StrContains(l, "@ ")) continue;
    bool skip = false;
    for (const std::string& s : kSkip) skip = skip || absl::StrContains(l, s);
    if (skip) continue;
    // "    @     0x7f...  onnx::convPoolShapeInference()" -> the function.
    const size_t at = l.find("0x");
    const size_t fn =
        at == std::string::npos ? std::string::npos : l.find_first_not_of(' ', l.find(' ', at));
    if (fn != std::string::npos) return absl::StrCat(what, " in ", Normalize(l.substr(fn)));
  }
  return what;
}

std::string Tail(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (lines.size() > max_lines) lines.pop_front();
  }
  return absl::StrJoin(lines, "\n");
}

// ---- the fuzz loop ------------------------------------------------------------

struct Report {
  std::string signature;
  int64_t iteration = -1;
  std::string reproducer;  // path
  std::string minimized;   // path, or ""
  std::string log;         // path
  std::string mutations;
  std::string tail;  // of the log
  int repeats = 0;   // further mutants with the same signature
};

class Fuzzer {
 public:
  Fuzzer(FuzzTarget target, FuzzConfig cfg)
      : t_(std::move(target)), cfg_(std::move(cfg)), minimize_left_s_(3 * cfg_.minimize_s) {
    fs::create_directories(cfg_.out_dir);
  }

  // Runs iterations [first, first + count); returns the distinct failures.
  std::vector<Report> Run(int64_t count) {
    const int64_t first = cfg_.first_iteration;
    std::deque<std::pair<int64_t, int64_t>> pending;
    for (int64_t b = first; b < first + count; b += cfg_.batch) {
      pending.emplace_back(b, std::min(first + count, b + cfg_.batch));
    }
    int64_t* progress = SharedCounters(cfg_.jobs);
    int64_t* reached = SharedCounters(4);  // mutants per Reached value
    std::vector<Child> slots(cfg_.jobs);
    for (int s = 0; s < cfg_.jobs; ++s) {
      slots[s].progress = progress + s;
      slots[s].log = (fs::path(cfg_.out_dir) / absl::StrCat(t_.name, "-child", s, ".log")).string();
    }
    const Job job = [this, reached](int64_t it) {
      Finding f = t_.check(t_.make(cfg_.seed, it).bytes);
      __atomic_fetch_add(&reached[static_cast<int>(g_reached)], 1, __ATOMIC_RELAXED);
      return f;
    };
    for (;;) {
      bool running = false;
      for (Child& c : slots) {
        if (c.pid < 0 && !pending.empty() && failures_ < cfg_.max_findings) {
          std::tie(c.begin, c.end) = pending.front();
          pending.pop_front();
          StartChild(c, job, cfg_);
        }
        if (c.pid < 0) continue;
        running = true;
        std::optional<Outcome> o = PollChild(c);
        if (!o.has_value()) continue;
        if (o->kind == Outcome::Kind::kOk) {
          executed_ += c.end - c.begin;
          continue;
        }
        executed_ += o->iteration + 1 - c.begin;
        Failed(c, *o, job);
        if (o->iteration + 1 < c.end) pending.emplace_front(o->iteration + 1, c.end);
      }
      if (!running) break;
      usleep(500);
    }
    munmap(progress, sizeof(int64_t) * cfg_.jobs);
    reached_.assign(reached, reached + 4);
    munmap(reached, sizeof(int64_t) * 4);
    std::vector<Report> out;
    for (auto& [sig, r] : reports_) out.push_back(r);
    std::sort(out.begin(), out.end(),
              [](const Report& a, const Report& b) { return a.iteration < b.iteration; });
    return out;
  }

  int failures() const { return failures_; }
  // Mutants run (fewer than asked when max_findings stopped the run).
  int64_t executed() const { return executed_; }
  // Mutants of the last Run per Reached value (those that finished).
  const std::vector<int64_t>& reached() const { return reached_; }

 private:
  std::string Stem(int64_t it) const {
    return (fs::path(cfg_.out_dir) / absl::StrCat(t_.name, "-seed", cfg_.seed, "-iter", it))
        .string();
  }

  // A child died or reported: isolate the input, then record it.
  void Failed(const Child& c, const Outcome& o, const Job& job) {
    ++failures_;
    int64_t it = o.iteration;
    Outcome alone = RunAlone(job, it, Stem(it) + ".log", cfg_);
    if (alone.kind == Outcome::Kind::kOk) {
      // Not reproducible alone: re-run the batch's mutants one per child.
      for (int64_t i = c.begin; i < o.iteration && alone.kind == Outcome::Kind::kOk; ++i) {
        alone = RunAlone(job, i, Stem(i) + ".log", cfg_);
        if (alone.kind != Outcome::Kind::kOk) it = i;
      }
    }
    if (alone.kind == Outcome::Kind::kOk) {
      const std::string sig = absl::StrCat("not reproducible alone: ", Signature(o, c.log));
      Report& r = reports_[sig];
      if (r.iteration < 0) {
        r = {.signature = sig, .iteration = o.iteration, .log = c.log, .tail = Tail(c.log, 30)};
        fs::copy_file(c.log, Stem(o.iteration) + "-batch.log",
                      fs::copy_options::overwrite_existing);
        r.log = Stem(o.iteration) + "-batch.log";
        r.mutations = absl::StrCat("mutants ", c.begin, "..", o.iteration, " pass alone");
      } else {
        ++r.repeats;
      }
      return;
    }
    const std::string log = Stem(it) + ".log";
    const std::string sig = Signature(alone, log);
    auto [pos, fresh] = reports_.try_emplace(sig);
    Report& r = pos->second;
    if (!fresh) {
      ++r.repeats;
      fs::remove(log);
      return;
    }
    FuzzInput in = t_.make(cfg_.seed, it);
    r.signature = sig;
    r.iteration = it;
    r.log = log;
    r.tail = Tail(log, 40);
    r.mutations = absl::StrJoin(in.log, "\n  ");
    r.reproducer = Stem(it) + t_.extension;
    WriteFile(r.reproducer, in.bytes);
    WriteFile(Stem(it) + ".txt",
              absl::StrCat("target ", t_.name, " seed ", cfg_.seed, " iteration ", it, "\n", sig,
                           "\n  ", r.mutations, "\n"));
    if (t_.write_extra) t_.write_extra(Stem(it), in.bytes);
    if (std::string min = Minimize(it, in.bytes, sig); !min.empty()) {
      r.minimized = Stem(it) + "-min" + t_.extension;
      WriteFile(r.minimized, min);
      if (t_.write_extra) t_.write_extra(Stem(it) + "-min", min);
    }
  }

  // Greedy shrinking: take the first one-step reduction that fails the same
  // way, until none does or the time is up. "" when nothing got smaller.
  std::string Minimize(int64_t it, const std::string& bytes, const std::string& sig) {
    const double budget_s = std::min(cfg_.minimize_s, minimize_left_s_);
    if (!t_.reductions || budget_s <= 0 || sig == "timeout") return "";
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(budget_s));
    const std::string log = Stem(it) + "-min-try.log";
    std::string cur = bytes;
    // Candidates are tried round-robin from where the last success was, so
    // a pass over n pieces costs O(n) children rather than O(n^2).
    size_t next = 0;
    size_t failed_in_a_row = 0;
    std::vector<std::string> cands = t_.reductions(cfg_.seed, it, cur);
    while (!cands.empty() && failed_in_a_row < cands.size() && Clock::now() < deadline) {
      const std::string& cand = cands[next % cands.size()];
      const Job job = [&](int64_t) { return t_.check(cand); };
      Outcome o = RunAlone(job, 0, log, cfg_);
      if (o.kind != Outcome::Kind::kOk && Signature(o, log) == sig) {
        cur = cand;
        cands = t_.reductions(cfg_.seed, it, cur);
        failed_in_a_row = 0;  // `next` now names the piece after the one removed
      } else {
        ++failed_in_a_row;
        ++next;
      }
    }
    fs::remove(log);
    minimize_left_s_ -= std::chrono::duration<double>(Clock::now() - start).count();
    return cur == bytes ? "" : cur;
  }

  FuzzTarget t_;
  FuzzConfig cfg_;
  int failures_ = 0;
  int64_t executed_ = 0;
  std::map<std::string, Report> reports_;
  std::vector<int64_t> reached_;
  double minimize_left_s_;  // shrinking time left for this run
};

std::string Describe(const FuzzTarget& t, const FuzzConfig& cfg, const Report& r) {
  return absl::StrCat(
      "fuzz target ", t.name, ", seed ", cfg.seed, ", iteration ", r.iteration, ": ", r.signature,
      r.repeats > 0 ? absl::StrCat(" (and ", r.repeats, " more mutants)") : "",
      "\n  reproducer: ", r.reproducer.empty() ? "(none)" : r.reproducer,
      r.minimized.empty() ? "" : absl::StrCat("\n  minimized:  ", r.minimized),
      "\n  log:        ", r.log, "\n  replay:     BRAID_FUZZ_SEED=", cfg.seed,
      " BRAID_FUZZ_FIRST_ITER=", r.iteration,
      " BRAID_FUZZ_ITERS=1 ... or BRAID_FUZZ_REPLAY=", r.reproducer, " --gtest_filter=Fuzz.Replay",
      "\n  mutations:\n  ", r.mutations, "\n  log tail:\n", r.tail);
}

void RunTarget(const FuzzTarget& t, int64_t count) {
  const FuzzConfig cfg = FuzzConfig::FromEnv();
  const auto start = Clock::now();
  Fuzzer fuzzer(t, cfg);
  std::vector<Report> reports = fuzzer.Run(count);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  const std::vector<int64_t>& reached = fuzzer.reached();
  int64_t finished = 0;
  for (int64_t n : reached) finished += n;
  std::string shares;
  for (int r = 0; r < 4; ++r) {
    absl::StrAppend(&shares, r == 0 ? "" : ", ", kReachedNames[r], " ",
                    absl::StrFormat("%.0f%%", 100.0 * reached[r] / std::max<int64_t>(finished, 1)));
  }
  std::printf(
      "fuzz %s: seed %llu, iterations %lld..%lld, %lld run in %.1f s (%.0f mutants/s); %s; "
      "%d failing mutants, %zu distinct%s\n",
      t.name.c_str(), static_cast<unsigned long long>(cfg.seed),
      static_cast<long long>(cfg.first_iteration),
      static_cast<long long>(cfg.first_iteration + count - 1),
      static_cast<long long>(fuzzer.executed()), s, fuzzer.executed() / std::max(s, 1e-9),
      shares.c_str(), fuzzer.failures(), reports.size(),
      fuzzer.failures() >= cfg.max_findings ? " (stopped at BRAID_FUZZ_MAX_FINDINGS)" : "");
  for (const Report& r : reports) ADD_FAILURE() << Describe(t, cfg, r);
  // Mutants that never get past the parser test nothing behind it.
  if (finished >= 500) {
    EXPECT_GE(reached[static_cast<int>(Reached::kSimulated)], finished / 10)
        << "fewer than 10% of the " << t.name << " mutants reached the simulator: " << shares;
  }
}

// ---- tests ------------------------------------------------------------------------

// The regression corpus: minimized inputs that once failed. Each replays in
// its own child, so one crash does not hide the others.
TEST(Fuzz, RegressionCorpusReplays) {
  const FuzzConfig cfg = FuzzConfig::FromEnv();
  fs::create_directories(cfg.out_dir);
  const std::vector<fs::path> files =
      FilesIn(SourcePath("tests/data/fuzz/regressions"), {".onnx", ".json"});
  ASSERT_FALSE(files.empty()) << "tests/data/fuzz/regressions/ is empty";
  for (const fs::path& p : files) {
    const std::string bytes = ReadFileOrDie(p);
    const bool onnx = p.extension() == ".onnx";
    const Job job = [&](int64_t) { return onnx ? CheckOnnx(bytes) : CheckCluster(bytes); };
    const std::string log =
        (fs::path(cfg.out_dir) / absl::StrCat("regression-", p.stem().string(), ".log")).string();
    Outcome o = RunAlone(job, 0, log, cfg);
    EXPECT_EQ(o.kind, Outcome::Kind::kOk)
        << p.filename().string() << ": " << Signature(o, log) << "\n  log: " << log << "\n"
        << Tail(log, 30);
  }
}

// The seeds are valid models: most reach the simulator, so that mutants
// exercise every stage.
TEST(Fuzz, OnnxSeedsReachTheSimulator) {
  const std::set<std::string> expected_to_fail = {"opset5", "cycle"};
  for (const Seed& s : OnnxSeeds()) {
    Finding f = Guarded([&] { return CheckOnnx(s.model.SerializeAsString()); });
    const Reached reached = g_reached;
    EXPECT_FALSE(f.has_value()) << s.name << ": " << *f;
    if (expected_to_fail.count(s.name) > 0) {
      EXPECT_EQ(reached, Reached::kRejected) << s.name;
    } else {
      EXPECT_EQ(reached, Reached::kSimulated)
          << s.name << " stopped early: " << kReachedNames[static_cast<int>(reached)];
    }
  }
}

TEST(Fuzz, ClusterSeedsParseAndSimulate) {
  ASSERT_GE(ClusterSeeds().size(), 5u);
  for (const ClusterSeed& s : ClusterSeeds()) {
    const std::string text = s.json.dump(2);
    EXPECT_TRUE(costmodel::ParseClusterJson(text).ok()) << s.name;
    Finding f = Guarded([&] { return CheckCluster(text); });
    EXPECT_FALSE(f.has_value()) << s.name << ": " << *f;
  }
}

// Same seed and iteration, same mutant; another iteration, another one.
TEST(Fuzz, MutantsAreDeterministic) {
  for (const FuzzTarget& t : {OnnxTarget(), ClusterTarget()}) {
    std::set<std::string> distinct;
    for (int64_t it = 0; it < 50; ++it) {
      FuzzInput a = t.make(kDefaultSeed, it);
      FuzzInput b = t.make(kDefaultSeed, it);
      EXPECT_EQ(a.bytes, b.bytes) << t.name << " iteration " << it;
      EXPECT_EQ(a.log, b.log) << t.name << " iteration " << it;
      distinct.insert(a.bytes);
    }
    EXPECT_GE(distinct.size(), 45u) << t.name;
  }
}

// The harness itself: a target that raises SIGFPE at one iteration, reports
// invalid output at another, hangs at a third and exits at a fourth must
// yield exactly those four reports, each with its reproducer on disk.
TEST(Fuzz, HarnessIsolatesFailures) {
  FuzzConfig cfg = FuzzConfig::FromEnv();
  cfg.seed = 1;
  cfg.first_iteration = 0;
  cfg.batch = 16;
  cfg.jobs = 2;
  cfg.timeout_s = 1;
  cfg.minimize_s = 5;
  cfg.max_findings = 100;
  cfg.out_dir = (fs::path(cfg.out_dir) / "harness-self-test").string();
  fs::remove_all(cfg.out_dir);
  FuzzTarget t;
  t.name = "fake";
  t.extension = ".bin";
  t.make = [](uint64_t, int64_t it) {
    return FuzzInput{.bytes = absl::StrCat("input ", it, " padding"), .log = {}};
  };
  t.check = [](std::string_view bytes) -> Finding {
    if (bytes.starts_with("input 37 ")) raise(SIGFPE);
    if (bytes.starts_with("input 50 ")) return "bad output";
    if (bytes.starts_with("input 70 ")) pause();
    if (bytes.starts_with("input 90 ")) std::exit(0);
    return std::nullopt;
  };
  // Shrinks by dropping the last byte while the failure stays.
  t.reductions = [](uint64_t, int64_t, const std::string& b) {
    return b.size() > 1 ? std::vector<std::string>{b.substr(0, b.size() - 1)}
                        : std::vector<std::string>{};
  };
  Fuzzer fuzzer(t, cfg);
  std::vector<Report> reports = fuzzer.Run(100);
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[0].iteration, 37);
  EXPECT_TRUE(absl::StartsWith(reports[0].signature, strsignal(SIGFPE))) << reports[0].signature;
  EXPECT_EQ(ReadFileOrDie(reports[0].reproducer), "input 37 padding");
  EXPECT_EQ(ReadFileOrDie(reports[0].minimized), "input 37 ");
  EXPECT_EQ(reports[1].iteration, 50);
  EXPECT_EQ(reports[1].signature, "bad output");
  EXPECT_EQ(reports[2].iteration, 70);
  EXPECT_EQ(reports[2].signature, "timeout");
  EXPECT_EQ(reports[3].iteration, 90);
  EXPECT_EQ(reports[3].signature, "exit(0) before the batch was done");
  EXPECT_EQ(fuzzer.failures(), 4);
  EXPECT_EQ(fuzzer.executed(), 100);
}

// The malloc limit turns a gigantic allocation into a reported crash.
TEST(Fuzz, MallocLimitAbortsInChildren) {
  FuzzConfig cfg = FuzzConfig::FromEnv();
  cfg.malloc_limit_mb = 64;
  fs::create_directories(cfg.out_dir);
  const std::string log = (fs::path(cfg.out_dir) / "malloc-limit-self-test.log").string();
  const Job job = [](int64_t) -> Finding {
    std::vector<char> big(size_t{128} << 20);
    return big.size() == 0 ? Finding("impossible") : std::nullopt;
  };
  Outcome o = RunAlone(job, 0, log, cfg);
  EXPECT_EQ(o.kind, Outcome::Kind::kSignal);
  EXPECT_TRUE(absl::StartsWith(Signature(o, log), "malloc limit exceeded")) << Signature(o, log);
}

// ---- ReportMeasurement requests ----------------------------------------------
//
// A genuine request of a job on 2 ranks (its credential, its run) mutated
// field by field with protobuf reflection (hostile numbers, bytes that are
// not UTF-8, other credentials, huge repeated fields) and byte by byte on
// the wire, then ParseMeasurementRequest -> FeedbackManager::Report against
// an in-memory store holding that job. Any error status is fine; a mutant
// fails when an accepted request breaks the rules (a time outside the
// bounds, a rank outside the job's world, a credential or run not the
// job's, a rank reported twice) or when the job's figures become non-finite.
// Stages: "accepted" is a request that parses, "trained" one that passes
// ParseMeasurementRequest, "simulated" one the feedback path stores.

namespace v1 = braid::v1;

// Seeds name the current run of the target's job by this placeholder (the
// run's id is random, and made in the process that checks).
constexpr char kSeedRun[] = "run-seed";

constexpr char kFuzzCredential[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct ReportWorld {
  std::unique_ptr<server::Store> store;
  std::unique_ptr<server::FeedbackManager> feedback;
  std::string attempt;
  std::set<std::pair<std::string, int>> reported;  // (attempt, rank) accepted
};

ReportWorld& TheReportWorld() {
  static ReportWorld* w = [] {
    auto* r = new ReportWorld();
    r->store = *server::Store::Open(":memory:");
    server::JobRecord j;
    j.id = "job-00000000000000f1";
    j.phase = server::JobPhase::kDone;
    j.plan_key = "key";
    j.options.ranks = 2;
    CHECK(r->store->InsertJob(&j, "t", "{}", nullptr,
                              server::FeedbackManager::CredentialSha256(kFuzzCredential))
              .ok());
    CHECK(r->store->PutPlan({"key", "gen", "{}", 0.010, "search", "[]", 0.005}).ok());
    server::FeedbackOptions o;
    o.report_rate_per_s = 0;  // no limit
    o.max_attempts_per_job = 1 << 20;
    r->feedback = std::make_unique<server::FeedbackManager>(
        r->store.get(), o,
        [](const server::JobRecord&, const server::PlanRecord&, const std::string&,
           const std::string&) { return std::optional<server::PlanRecord>(); },
        [](const server::PlanRecord&, const server::JobRecord&) -> absl::StatusOr<std::string> {
          return std::string(64, 'a');
        });
    r->attempt = r->feedback->StartRun({j.id, kFuzzCredential, 2, "fuzz", ""})->attempt_id;
    return r;
  }();
  return *w;
}

v1::ReportMeasurementRequest ReportSeed(int rank) {
  v1::ReportMeasurementRequest r;
  r.set_job_id("job-00000000000000f1");
  r.set_rank(rank);
  r.set_world_size(2);
  r.set_report_credential(kFuzzCredential);
  r.set_attempt_id(kSeedRun);
  r.set_source("braid-worker activate");
  for (int i = 0; i < 8; ++i) {
    r.add_plan_iteration_s(0.012 + 1e-4 * i);
    r.add_baseline_iteration_s(0.010 + 1e-4 * i);
  }
  return r;
}

void MutateReport(v1::ReportMeasurementRequest& r, Rng& rng, std::vector<std::string>* log) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  const double hostile[] = {0.0, -0.0, -1.0, 5e-324, 1e-300, 1e-7, 1e-6, 3600.0, 3600.5, 1e300,
                            std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()};
  const int32_t ints[] = {0, -1, 1, 2, 3, 65536, 65537, INT32_MAX, INT32_MIN};
  const std::string texts[] = {"", std::string("\xff\xfe", 2), std::string("\xc3\x28", 2),
                               "\x1b[2J\x1b[H", std::string(200, 'a'), std::string(65, 'f'),
                               "JOB-00000000000000F1", "job-00000000000000f2",
                               std::string(64, '0'), "run-0000000000000000"};
  // Some mutants stay genuine (none, or benign edits), so that the
  // accepting path is exercised as much as the refusing ones.
  const int edits = pick(3);
  if (edits == 0) log->push_back("genuine");
  for (int e = 0; e < edits; ++e) {
    switch (pick(12)) {
      case 10: {
        auto* t = r.mutable_plan_iteration_s();
        for (int i = 0; i < t->size(); ++i) t->Set(i, 1e-3 * (1 + pick(100)));
        log->push_back("plausible times");
        break;
      }
      case 11: r.clear_baseline_iteration_s(); log->push_back("no baseline"); break;
      case 0: r.set_rank(ints[pick(std::size(ints))]); log->push_back("rank"); break;
      case 1: r.set_world_size(ints[pick(std::size(ints))]); log->push_back("world_size"); break;
      case 2: r.set_job_id(texts[pick(std::size(texts))]); log->push_back("job_id"); break;
      case 3: r.set_report_credential(texts[pick(std::size(texts))]); log->push_back("credential"); break;
      case 4: r.set_attempt_id(texts[pick(std::size(texts))]); log->push_back("attempt_id"); break;
      case 5: r.set_source(texts[pick(std::size(texts))]); log->push_back("source"); break;
      case 6: r.set_plan_sha256(texts[pick(std::size(texts))]); log->push_back("plan_sha256"); break;
      case 7: {
        auto* t = pick(2) ? r.mutable_plan_iteration_s() : r.mutable_baseline_iteration_s();
        if (!t->empty()) t->Set(pick(t->size()), hostile[pick(std::size(hostile))]);
        log->push_back("a time");
        break;
      }
      case 8: {
        const int n = std::vector<int>{0, 1, 7, 10001, 20000}[pick(5)];
        auto* t = pick(2) ? r.mutable_plan_iteration_s() : r.mutable_baseline_iteration_s();
        t->Resize(n, 0.011);
        log->push_back(absl::StrCat("times x", n));
        break;
      }
      default: r.set_rank(pick(2)); log->push_back("the other rank"); break;
    }
  }
}

Finding CheckReport(std::string_view bytes) {
  g_reached = Reached::kRejected;
  g_stage = "ReportMeasurementRequest::ParseFromString";
  v1::ReportMeasurementRequest req;
  if (!req.ParseFromString(std::string(bytes))) return std::nullopt;
  Reach(Reached::kAccepted);
  g_stage = "ParseMeasurementRequest";
  ReportWorld& w = TheReportWorld();
  if (req.attempt_id() == kSeedRun) req.set_attempt_id(w.attempt);
  absl::StatusOr<server::MeasurementReport> rep = server::ParseMeasurementRequest(req);
  if (!rep.ok()) {
    if (rep.status().message().empty()) return "ParseMeasurementRequest: empty message";
    return std::nullopt;
  }
  Reach(Reached::kTrained);
  for (double t : rep->plan_s) {
    if (!(t >= server::kMinIterationS && t <= server::kMaxIterationS)) {
      return absl::StrCat("accepted an iteration time of ", t, " s");
    }
  }
  if (rep->baseline_s.size() != 0 && rep->baseline_s.size() != rep->plan_s.size()) {
    return "accepted unpaired baseline times";
  }
  g_stage = "FeedbackManager::Report";
  absl::StatusOr<server::MeasurementOutcome> o = w.feedback->Report(*rep);
  if (!o.ok()) {
    if (o.status().message().empty()) return "Report: empty message";
    return std::nullopt;
  }
  Reach(Reached::kSimulated);
  if (rep->credential != kFuzzCredential) return "accepted a report with another credential";
  if (rep->job_id != "job-00000000000000f1") return "accepted a report for another job";
  if (rep->attempt_id != w.attempt) return "accepted a report of another run";
  if (rep->world_size != 2 || rep->rank < 0 || rep->rank > 1) {
    return absl::StrCat("accepted rank ", rep->rank, " of ", rep->world_size, " for a 2-rank job");
  }
  if (!w.reported.insert({rep->attempt_id, rep->rank}).second) {
    return absl::StrCat("accepted rank ", rep->rank, " twice in one run");
  }
  if (!std::isfinite(o->measured_s) || !std::isfinite(o->calibration)) {
    return "the job's figures became non-finite";
  }
  if (w.reported.size() == 2) {  // the run is complete: the next mutants report a new one
    w.attempt = w.feedback->StartRun({"job-00000000000000f1", kFuzzCredential, 2, "fuzz", ""})
                    ->attempt_id;
    w.reported.clear();
  }
  return std::nullopt;
}

FuzzTarget ReportTarget() {
  FuzzTarget t;
  t.name = "report";
  t.extension = ".pb";
  t.make = [](uint64_t seed, int64_t it) {
    Rng rng = IterationRng(seed, "report", it);
    v1::ReportMeasurementRequest r =
        ReportSeed(std::uniform_int_distribution<int>(0, 1)(rng));
    FuzzInput in;
    MutateReport(r, rng, &in.log);
    in.bytes = r.SerializeAsString();
    // Now and then a byte of the wire form flipped as well.
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0 && !in.bytes.empty()) {
      const size_t at = std::uniform_int_distribution<size_t>(0, in.bytes.size() - 1)(rng);
      in.bytes[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      in.log.push_back(absl::StrCat("byte ", at));
    }
    return in;
  };
  t.check = [](std::string_view bytes) { return CheckReport(bytes); };
  t.reductions = [](uint64_t, int64_t, const std::string&) { return std::vector<std::string>(); };
  return t;
}

TEST(Fuzz, ReportMeasurementMutants) { RunTarget(ReportTarget(), 2000); }

TEST(Fuzz, OnnxMutants) { RunTarget(OnnxTarget(), FuzzConfig::FromEnv().onnx_iters); }

TEST(Fuzz, ClusterJsonMutants) { RunTarget(ClusterTarget(), FuzzConfig::FromEnv().cluster_iters); }

Finding CheckPlanFile(std::string_view bytes);        // below, with their targets
Finding CheckCheckpointMeta(std::string_view bytes);

// BRAID_FUZZ_REPLAY=FILE: one input through its pipeline in this process.
TEST(Fuzz, Replay) {
  const std::string path = EnvString("BRAID_FUZZ_REPLAY", "");
  if (path.empty()) GTEST_SKIP() << "set BRAID_FUZZ_REPLAY=FILE to replay one input";
  google::InstallFailureSignalHandler();  // a stack trace when it crashes
  std::string bytes = ReadFileOrDie(path);
  Finding f;
  if (absl::EndsWith(path, ".plan.json")) {
    f = Guarded([&] { return CheckPlanFile(bytes); });
  } else if (absl::EndsWith(path, ".ckpt.json")) {
    f = Guarded([&] { return CheckCheckpointMeta(bytes); });
  } else if (absl::EndsWith(path, ".json")) {
    f = Guarded([&] { return CheckCluster(bytes); });
  } else {
    if (absl::EndsWith(path, ".textproto")) {
      std::optional<onnx::ModelProto> m = ParseModel(bytes, true);
      ASSERT_TRUE(m.has_value()) << path;
      bytes = m->SerializeAsString();
    }
    f = Guarded([&] { return CheckOnnx(bytes); });
  }
  EXPECT_FALSE(f.has_value()) << *f;
}


// ---- plan files and checkpoint metadata ---------------------------------------------
// Two more inputs from outside, in the same harness:
//  - plan: the plan JSON `braid simulate --plan` and `braid run --plan` read
//    (base::ParseBoundedJson with the plan limits, the plan under "plan"
//    unwrapped, search::PlanFromJson on zoo:mlp's training graph, the
//    PlanToJson round trip, then Lower and Simulate on cpu-local), mutated
//    from every baseline's plan (tests/fuzz_mutators.h, MutateJsonDocument:
//    values, the plan's own names moved elsewhere, nesting up to 100,000
//    levels);
//  - checkpoint: the metadata JSON of a GNN checkpoint
//    (gnn::CheckpointInfoFromJson, ValidateCheckpointInfo and the JSON round
//    trip); an accepted one small enough is written as a checkpoint with a
//    fresh network of its shape, loaded back (LoadCheckpoint's checks and
//    probe), and its estimator prices zoo:mlp's fused baseline plan through
//    CheckCostsFinite, Lower and Simulate.
// Counts: BRAID_FUZZ_PLAN_ITERS, BRAID_FUZZ_CKPT_ITERS.

namespace gnn = costmodel::gnn;

constexpr int64_t kDefaultPlanIters = 5000;
constexpr int64_t kDefaultCheckpointIters = 1000;

const graph::Graph& PlanTrainingGraph() {
  static const auto* g = [] {
    absl::StatusOr<graph::Graph> t = graph::BuildTrainingGraph(ZooMlp(), {.ranks = 2});
    CHECK(t.ok()) << t.status();
    return new graph::Graph(*std::move(t));
  }();
  return *g;
}

const costmodel::ClusterSpec& PlanCluster() { return OnnxClusters()[0]; }  // cpu-local, 2 ranks

// The baselines of zoo:mlp on cpu-local (no_fusion ... ddp).
const std::vector<search::EvaluatedPlan>& PlanBaselines() {
  static const auto* plans = [] {
    costmodel::ClusterCostModel cm(PlanCluster(), nullptr, nullptr,
                                   costmodel::CommModel(PlanCluster()));
    absl::StatusOr<search::BaselineResults> b = search::RunBaselines(PlanTrainingGraph(), cm);
    CHECK(b.ok()) << b.status();
    return new std::vector<search::EvaluatedPlan>(b->baselines);
  }();
  return *plans;
}

struct JsonSeed {
  std::string name;
  nlohmann::json json;
};

// Each baseline's plan, bare (`braid plan -o`) and wrapped as `braid plan
// --json` prints it.
const std::vector<JsonSeed>& PlanSeeds() {
  static const auto* seeds = [] {
    auto* out = new std::vector<JsonSeed>;
    for (const search::EvaluatedPlan& p : PlanBaselines()) {
      const nlohmann::json j = search::PlanToJson(PlanTrainingGraph(), p.plan);
      out->push_back({p.name, j});
      out->push_back({p.name + "-wrapped",
                      {{"model", "zoo:mlp"},
                       {"plan", j},
                       {"predicted_iteration_s", p.sim.iteration_s}}});
    }
    return out;
  }();
  return *seeds;
}

// Lowers and simulates `plan` on `cm`; a Lower error is fine.
Finding CheckPlanSimulation(const graph::Graph& train, const search::Plan& plan,
                            costmodel::CostModel& cm, const std::string& cluster) {
  g_stage = "Lower";
  absl::StatusOr<costmodel::SimGraph> sg = search::Lower(train, plan, cm);
  if (!sg.ok()) return std::nullopt;
  g_stage = "Simulate";
  const costmodel::SimResult r = costmodel::Simulate(*sg);
  Reach(Reached::kSimulated);
  if (r.unfinished_tasks != 0) {
    return absl::StrCat("Lower returned OK but ", r.unfinished_tasks, " tasks never ran on ",
                        cluster);
  }
  if (!Finite(r.iteration_s) || !Finite(r.compute_s) || !Finite(r.comm_s)) {
    return absl::StrCat("non-finite simulated time on ", cluster, ": iteration ", r.iteration_s,
                        " s, compute ", r.compute_s, " s, comm ", r.comm_s, " s");
  }
  return std::nullopt;
}

Finding Refused(const absl::Status& s, const char* what) {
  if (s.message().empty()) return absl::StrCat(what, " failed with an empty message");
  return std::nullopt;
}

Finding CheckPlanFile(std::string_view bytes) {
  g_reached = Reached::kRejected;
  g_stage = "ParseBoundedJson";
  absl::StatusOr<nlohmann::json> parsed = base::ParseBoundedJson(bytes, base::kPlanJsonLimits);
  if (!parsed.ok()) return Refused(parsed.status(), "ParseBoundedJson");
  nlohmann::json j = *std::move(parsed);
  if (j.is_object() && j.contains("plan")) {
    nlohmann::json inner = std::move(j["plan"]);
    j = std::move(inner);
  }
  const graph::Graph& train = PlanTrainingGraph();
  g_stage = "PlanFromJson";
  absl::StatusOr<search::Plan> plan = search::PlanFromJson(train, j);
  if (!plan.ok()) return Refused(plan.status(), "PlanFromJson");
  Reach(Reached::kAccepted);
  g_stage = "PlanFromJson(PlanToJson())";
  absl::StatusOr<search::Plan> back =
      search::PlanFromJson(train, search::PlanToJson(train, *plan));
  if (!back.ok() || !(*back == *plan)) {
    return absl::StrCat("PlanToJson/PlanFromJson of an accepted plan does not round-trip: ",
                        back.ok() ? "different plan" : back.status().ToString());
  }
  costmodel::ClusterCostModel cm(PlanCluster(), nullptr, nullptr,
                                 costmodel::CommModel(PlanCluster()));
  return CheckPlanSimulation(train, *plan, cm, PlanCluster().name);
}

// Checkpoint descriptions of zoo:mlp's fused pairs, as `braid gnn train`
// writes them (a one-layer and a two-layer network).
const std::vector<JsonSeed>& CheckpointSeeds() {
  static const auto* seeds = [] {
    const graph::Graph& train = PlanTrainingGraph();
    std::vector<std::string> types;
    for (graph::OpId i = 0; i < train.num_ops(); ++i) types.push_back(train.op(i).type);
    const gnn::OpVocabulary vocab = gnn::OpVocabulary::Build(types);
    costmodel::ClusterCostModel m(PlanCluster(), nullptr, nullptr,
                                  costmodel::CommModel(PlanCluster()));
    std::vector<gnn::FeatureGraph> fs;
    for (graph::OpId i = 0; i + 1 < train.num_ops() && fs.size() < 8; ++i) {
      const std::vector<graph::OpId> ops = {i, i + 1};
      if (costmodel::IsCommunicationOp(train.op(i)) ||
          costmodel::IsCommunicationOp(train.op(i + 1))) {
        continue;
      }
      fs.push_back(gnn::ExtractFeatures(train, ops, gnn::MemberTimes(m, train, ops), vocab));
    }
    auto* out = new std::vector<JsonSeed>;
    for (int layers : {1, 2}) {
      gnn::CheckpointInfo info;
      info.device_kind = "cpu-1t:fuzz";
      info.vocabulary = vocab.names();
      info.stats = gnn::ComputeStats(fs);
      info.hp = {.layers = layers, .heads = 2, .width = 8, .type_embedding = 4};
      info.split = "a";
      info.seed = 5;
      info.train_samples = 100;
      info.val_samples = 20;
      info.epochs = 3;
      info.train_loss = 0.25;
      info.val_loss = 0.5;
      info.grid_json = R"([{"layers": 1, "val_loss": 0.5}])";
      if (layers == 2) {  // as braid gnn train records them
        gnn::SampleHashes h;
        for (int i = 0; i < 120; ++i) {
          (i < 100 ? h.train : h.validation)
              .push_back(gnn::SampleHash(info.device_kind, absl::StrCat("s", i)));
        }
        std::sort(h.train.begin(), h.train.end());
        std::sort(h.validation.begin(), h.validation.end());
        info.sample_hashes = std::move(h);
      }
      absl::StatusOr<std::string> text = gnn::CheckpointInfoToJson(info);
      CHECK(text.ok()) << text.status();
      out->push_back({absl::StrCat("mlp-", layers, "-layers"), nlohmann::json::parse(*text)});
    }
    return out;
  }();
  return *seeds;
}

// The fuzzer builds networks of at most this many weights (a mutated width
// may describe a GiB one, which LoadCheckpoint refuses on its own).
constexpr int64_t kMaxFuzzedWeights = int64_t{1} << 20;

Finding CheckCheckpointMeta(std::string_view bytes) {
  g_reached = Reached::kRejected;
  g_stage = "CheckpointInfoFromJson";
  absl::StatusOr<gnn::CheckpointInfo> info = gnn::CheckpointInfoFromJson(bytes);
  if (!info.ok()) return Refused(info.status(), "CheckpointInfoFromJson");
  Reach(Reached::kAccepted);
  g_stage = "ValidateCheckpointInfo";
  if (absl::Status s = gnn::ValidateCheckpointInfo(*info); !s.ok()) {
    return Refused(s, "ValidateCheckpointInfo");
  }
  g_stage = "CheckpointInfoToJson";
  absl::StatusOr<std::string> text = gnn::CheckpointInfoToJson(*info);
  if (!text.ok()) {
    return absl::StrCat("CheckpointInfoToJson failed for accepted metadata: ",
                        text.status().ToString());
  }
  g_stage = "CheckpointInfoFromJson(CheckpointInfoToJson())";
  absl::StatusOr<gnn::CheckpointInfo> back = gnn::CheckpointInfoFromJson(*text);
  if (!back.ok() || gnn::CheckpointInfoToJson(*back).value_or("") != *text) {
    return absl::StrCat("checkpoint metadata does not round-trip: ",
                        back.ok() ? "different text" : back.status().ToString());
  }
  if (gnn::ParameterCount(*info) > kMaxFuzzedWeights) return std::nullopt;
  g_stage = "SaveCheckpoint";
  gnn::UseOneThread();
  torch::manual_seed(1);
  gnn::GnnNet net(static_cast<int>(info->vocabulary.size()) + 1, info->hp);
  const std::string path = absl::StrCat(::testing::TempDir(), "/fuzz-ckpt-", getpid(), ".pt");
  if (absl::Status s = gnn::SaveCheckpoint(path, net, *info); !s.ok()) {
    return absl::StrCat("SaveCheckpoint failed for accepted metadata: ", s.ToString());
  }
  g_stage = "LoadCheckpoint";
  absl::StatusOr<gnn::LoadedCheckpoint> loaded = gnn::LoadCheckpoint(path, info->device_kind);
  if (!loaded.ok()) return Refused(loaded.status(), "LoadCheckpoint");
  Reach(Reached::kTrained);
  costmodel::ClusterSpec cluster = PlanCluster();
  cluster.device.kind = info->device_kind;
  g_stage = "GnnEstimator::Load";
  absl::StatusOr<std::unique_ptr<gnn::GnnEstimator>> est =
      gnn::GnnEstimator::Load(path, cluster, nullptr, nullptr);
  if (!est.ok()) {
    return absl::StrCat("GnnEstimator::Load refused what LoadCheckpoint accepted: ",
                        est.status().ToString());
  }
  costmodel::ClusterCostModel cm(cluster, nullptr, est->get(), costmodel::CommModel(cluster));
  const graph::Graph& train = PlanTrainingGraph();
  g_stage = "CheckCostsFinite";
  if (absl::Status s = costmodel::CheckCostsFinite(train, cm, cluster.num_ranks); !s.ok()) {
    return absl::StrCat("a loaded estimator made CheckCostsFinite fail: ", s.ToString());
  }
  for (const search::EvaluatedPlan& p : PlanBaselines()) {
    if (p.plan.groups.empty()) continue;
    if (Finding f = CheckPlanSimulation(train, p.plan, cm, cluster.name)) return f;
  }
  return std::nullopt;
}

const JsonSeed& SeedOf(const std::vector<JsonSeed>& seeds, Rng& rng) {
  return seeds[std::uniform_int_distribution<size_t>(0, seeds.size() - 1)(rng)];
}

// A target over JSON documents mutated from `seeds`; shrinking reverts
// edits one at a time.
FuzzTarget JsonDocumentTarget(const std::string& name, const std::string& extension,
                              const std::vector<JsonSeed>& (*seeds)(),
                              Finding (*check)(std::string_view),
                              std::vector<std::string> droppable) {
  FuzzTarget t;
  t.name = name;
  t.extension = extension;
  auto mutant = [name, seeds, droppable](uint64_t seed, int64_t it,
                                         std::vector<std::string>* log) {
    Rng rng = IterationRng(seed, name, it);
    const JsonSeed& s = SeedOf(seeds(), rng);
    JsonMutant m = MutateJsonDocument(s.json, rng, droppable);
    if (log != nullptr) {
      log->push_back(absl::StrCat("seed ", s.name));
      for (const JsonEdit& e : m.edits) log->push_back(e.Describe());
    }
    return std::make_pair(&s, m);
  };
  t.make = [mutant](uint64_t seed, int64_t it) {
    FuzzInput in;
    auto [s, m] = mutant(seed, it, &in.log);
    in.bytes = ApplyJsonMutant(s->json, m);
    return in;
  };
  t.check = check;
  t.reductions = [mutant](uint64_t seed, int64_t it, const std::string& bytes) {
    auto [s, m] = mutant(seed, it, nullptr);
    std::vector<std::string> out;
    for (size_t drop = 0; drop < m.edits.size(); ++drop) {
      JsonMutant fewer = m;
      fewer.edits.erase(fewer.edits.begin() + static_cast<std::ptrdiff_t>(drop));
      std::string text = ApplyJsonMutant(s->json, fewer);
      if (text.size() <= bytes.size() && text != bytes) out.push_back(std::move(text));
    }
    return out;
  };
  return t;
}

FuzzTarget PlanTarget() {
  return JsonDocumentTarget("plan", ".plan.json", PlanSeeds, CheckPlanFile,
                            {"/groups", "/plan/groups"});
}

FuzzTarget CheckpointTarget() {
  return JsonDocumentTarget("checkpoint", ".ckpt.json", CheckpointSeeds, CheckCheckpointMeta,
                            {"/vocabulary", "/grid"});
}

TEST(Fuzz, PlanAndCheckpointSeedsReachTheSimulator) {
  ASSERT_GE(PlanSeeds().size(), 4u);
  for (const JsonSeed& s : PlanSeeds()) {
    Finding f = Guarded([&] { return CheckPlanFile(s.json.dump(2)); });
    EXPECT_FALSE(f.has_value()) << s.name << ": " << *f;
    EXPECT_EQ(g_reached, Reached::kSimulated) << s.name;
  }
  for (const JsonSeed& s : CheckpointSeeds()) {
    Finding f = Guarded([&] { return CheckCheckpointMeta(s.json.dump()); });
    EXPECT_FALSE(f.has_value()) << s.name << ": " << *f;
    EXPECT_EQ(g_reached, Reached::kSimulated) << s.name;
  }
}

// Nesting past the bound is refused before any tree is built, at any depth
// up to the one that crashed `braid simulate --plan`.
TEST(Fuzz, DeeplyNestedDocumentsAreRefused) {
  for (int64_t levels : {65, 100000}) {
    for (const JsonEdit& e : {JsonEdit{.kind = JsonEdit::Kind::kNest, .levels = levels},
                              JsonEdit{.kind = JsonEdit::Kind::kNest,
                                       .pointer = "/groups/0",
                                       .levels = levels}}) {
      const std::string plan = ApplyJsonMutant(PlanSeeds()[2].json, JsonMutant{{e}});
      EXPECT_GE(plan.size(), static_cast<size_t>(2 * levels));
      Finding f = Guarded([&] { return CheckPlanFile(plan); });
      EXPECT_FALSE(f.has_value()) << *f;
      EXPECT_EQ(g_reached, Reached::kRejected) << e.Describe();
      const std::string meta = ApplyJsonMutant(CheckpointSeeds()[0].json, JsonMutant{{e}});
      f = Guarded([&] { return CheckCheckpointMeta(meta); });
      EXPECT_FALSE(f.has_value()) << *f;
      EXPECT_EQ(g_reached, Reached::kRejected) << e.Describe();
    }
  }
}

TEST(Fuzz, JsonDocumentMutantsAreDeterministic) {
  for (const FuzzTarget& t : {PlanTarget(), CheckpointTarget()}) {
    std::set<std::string> distinct;
    for (int64_t it = 0; it < 50; ++it) {
      FuzzInput a = t.make(kDefaultSeed, it);
      FuzzInput b = t.make(kDefaultSeed, it);
      EXPECT_EQ(a.bytes, b.bytes) << t.name << " iteration " << it;
      EXPECT_EQ(a.log, b.log) << t.name << " iteration " << it;
      distinct.insert(a.bytes);
    }
    EXPECT_GE(distinct.size(), 40u) << t.name;
  }
}

TEST(Fuzz, PlanFileMutants) {
  RunTarget(PlanTarget(), EnvInt("BRAID_FUZZ_PLAN_ITERS", kDefaultPlanIters));
}

TEST(Fuzz, CheckpointMetadataMutants) {
  RunTarget(CheckpointTarget(), EnvInt("BRAID_FUZZ_CKPT_ITERS", kDefaultCheckpointIters));
}

}  // namespace
}  // namespace braid::fuzz
