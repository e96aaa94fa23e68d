// braid-parallel-bench: the strategy table (search/parallel_strategies.h) for
// a zoo model on a cluster preset at several GPU counts, as markdown. The
// numbers are simulated: per-op times from the preset's roofline (no
// profiles, no estimator) and collectives from the CommModel prior, the way
// search/parallelize_test.cc costs plans. Batch sizes follow Unity §6.1
// (per-GPU minibatch 64 for resnext50 / inception_v3, 4 bert_large, 1024
// dlrm, 256 mlp; global = GPUs x per-GPU); Adam for bert_large, SGD with
// momentum otherwise.
//
//   braid-parallel-bench --model resnext50 --cluster summit --gpus 24,96
//   braid-parallel-bench --model bert_large --cluster dgx-h100 --gpus 16 --optimizer adam
//   braid-parallel-bench --model dlrm --list-ops      # op kinds of the forward graph
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/op_kind.h"
#include "graph/ops.h"
#include "graph/zoo.h"
#include "search/parallel_strategies.h"

namespace {

using braid::search::StrategyRow;

// Unity §6.1's per-GPU minibatch; 0: the zoo's default.
int UnityBatchPerGpu(const std::string& model) {
  static const std::map<std::string, int> k = {{"resnext50", 64}, {"inception_v3", 64},
                                               {"bert_large", 4},  {"dlrm", 1024},
                                               {"mlp", 256}};
  auto it = k.find(model);
  return it == k.end() ? 0 : it->second;
}

double GiB(int64_t b) { return b / double{1 << 30}; }

// "Conv channel D=1 M=24 x3, Gemm column D=3 M=8 x1": how the plan splits
// its compute ops (elementwise and data-movement ops follow them and are
// left out), by the kind of the model part; plain data parallelism (M = 1)
// is left out too.
std::string PlanSummary(const braid::graph::Graph& g, const StrategyRow& r) {
  std::map<std::tuple<std::string, std::string, int, int>, int> n;
  std::vector<std::string> parts;
  for (const auto& b : r.result.strand_blocks) {
    parts.push_back(absl::StrFormat(
        "%d strands into %s side by side, %d device(s) each (%d per group, busiest group "
        "%.1f ms compute + %.1f ms sync; AllToAll to %s %.1f ms)",
        b.strands, b.sink, b.devices_per_strand, b.per_group, b.compute_s * 1e3,
        b.grad_sync_s * 1e3, b.sink, b.redistribute_s * 1e3));
  }
  for (const auto& o : r.result.ops) {
    if (o.num_devices > 0) continue;
    const braid::graph::OpKind k = g.op(o.op).kind;
    const braid::graph::OpCategory cat = braid::graph::CategoryOf(k);
    if (cat == braid::graph::OpCategory::kElementwise ||
        cat == braid::graph::OpCategory::kDataMovement || o.model_degree == 1) {
      continue;
    }
    braid::search::ParallelConfig model = o.config;
    if (!model.output_degrees.empty()) model.output_degrees[0] = 1;
    const std::string kind =
        o.opaque ? "opaque" : braid::search::ConfigKindName(g, o.op, model);
    ++n[{std::string(braid::graph::OpKindName(k)), kind, o.data_degree, o.model_degree}];
  }
  for (const auto& [key, c] : n) {
    const auto& [op, kind, d, m] = key;
    parts.push_back(absl::StrFormat("%s %s D=%d M=%d x%d", op, kind, d, m, c));
  }
  if (parts.empty()) return "every compute op data parallel";
  return absl::StrJoin(parts, ", ");
}

int Run(const std::string& model, const std::string& cluster_name, const std::vector<int>& gpus,
        const std::string& optimizer, int batch_per_gpu, bool plans, int max_model_dims) {
  absl::StatusOr<braid::costmodel::ClusterSpec> preset =
      braid::costmodel::LoadCluster(cluster_name);
  if (!preset.ok()) {
    std::fprintf(stderr, "%s\n", preset.status().ToString().c_str());
    return 1;
  }
  if (batch_per_gpu <= 0) batch_per_gpu = UnityBatchPerGpu(model);
  std::string opt = optimizer;
  if (opt.empty()) opt = model == "bert_large" ? "adam" : "sgd";
  if (opt != "adam" && opt != "sgd") {
    std::fprintf(stderr, "--optimizer must be adam or sgd, got '%s'\n", opt.c_str());
    return 1;
  }
  for (int n : gpus) {
    absl::StatusOr<braid::costmodel::ClusterSpec> c = braid::costmodel::WithRanks(*preset, n);
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
      return 1;
    }
    const int batch = batch_per_gpu > 0 ? batch_per_gpu * n : 0;
    absl::StatusOr<braid::graph::Graph> g = braid::graph::BuildZooModel(model, batch);
    if (!g.ok()) {
      std::fprintf(stderr, "%s\n", g.status().ToString().c_str());
      return 1;
    }
    braid::costmodel::ClusterCostModel cm(*c, nullptr, nullptr, braid::costmodel::CommModel(*c));
    braid::search::StrategyTableOptions o;
    o.base.max_model_dims = max_model_dims;
    o.base.optimizer =
        opt == "adam" ? braid::graph::Optimizer::kAdam : braid::graph::Optimizer::kSgdMomentum;
    absl::StatusOr<std::vector<StrategyRow>> rows =
        braid::search::ParallelStrategyTable(*g, *c, cm, o);
    if (!rows.ok()) {
      std::fprintf(stderr, "%s on %s x%d: %s\n", model.c_str(), cluster_name.c_str(), n,
                   rows.status().ToString().c_str());
      return 1;
    }
    // Speed-ups against data parallelism, or the first expert row where
    // data parallelism does not fit.
    const StrategyRow* ref = nullptr;
    for (const StrategyRow& r : *rows)
      if (r.name != "braid" && r.has_plan && r.status.ok()) {
        ref = &r;
        break;
      }
    std::printf(
        "\n#### %s, %s, %d GPUs (global batch %s, %s; device %s, %.0f GiB)\n"
        "Simulated: %s roofline (no profiles) + CommModel prior. Speed-up vs %s.\n\n",
        model.c_str(), cluster_name.c_str(), n,
        batch > 0 ? absl::StrCat(batch, " = ", n, " x ", batch_per_gpu).c_str() : "zoo default",
        opt == "adam" ? "Adam" : "SGD momentum", c->device.kind.c_str(),
        GiB(c->device.memory_bytes), cluster_name.c_str(),
        ref ? ref->name.c_str() : "(no row fits)");
    std::printf(
        "| strategy | iteration ms | compute / grad sync / movement ms | speed-up | GiB/device "
        "| memory | search s |\n");
    std::printf("|---|---:|---:|---:|---:|---|---:|\n");
    for (const StrategyRow& r : *rows) {
      if (!r.has_plan) {
        std::printf("| %s | - | - | - | - | no plan | %.2f |\n", r.name.c_str(), r.search_s);
        continue;
      }
      const std::string speedup =
          ref ? absl::StrFormat("%.2fx", ref->result.time_s / r.result.time_s) : "-";
      // The DP's cost split: compute and weight-gradient sync per op, the
      // rest is layout movement between ops.
      double compute = 0, sync = 0;
      for (const auto& o : r.result.ops) {
        if (o.num_devices > 0) continue;  // strands side by side: their busiest group below
        compute += o.compute_s;
        sync += o.grad_sync_s;
      }
      for (const auto& b : r.result.strand_blocks) {
        compute += b.compute_s;
        sync += b.grad_sync_s;
      }
      const double movement = std::max(0.0, r.result.time_s - compute - sync);  // rounding
      std::printf("| %s | %.2f | %.1f / %.1f / %.1f | %s | %.2f | %s | %.2f |\n", r.name.c_str(),
                  r.result.time_s * 1e3, compute * 1e3, sync * 1e3, movement * 1e3, speedup.c_str(),
                  GiB(r.result.memory.total_bytes), r.status.ok() ? "fits" : "over", r.search_s);
    }
    std::printf("\n");
    for (const StrategyRow& r : *rows) {
      std::printf("- %s: %s.", r.name.c_str(), r.description.c_str());
      if (!r.status.ok()) std::printf(" %s", r.status.ToString().c_str());
      if (plans && r.has_plan) std::printf(" Plan: %s.", PlanSummary(*g, r).c_str());
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

int ListOps(const std::string& model) {
  absl::StatusOr<braid::graph::Graph> g = braid::graph::BuildZooModel(model);
  if (!g.ok()) {
    std::fprintf(stderr, "%s\n", g.status().ToString().c_str());
    return 1;
  }
  std::map<std::string, int> kinds;
  for (int i = 0; i < g->num_ops(); ++i)
    ++kinds[std::string(braid::graph::OpKindName(g->op(i).kind))];
  for (const auto& [k, n] : kinds) std::printf("%s %d\n", k.c_str(), n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Simulated comparison of parallelization strategies (data parallel, expert, braid)");
  std::string model = "resnext50", cluster = "summit", gpus = "24,96", optimizer;
  int batch_per_gpu = 0, max_model_dims = 1;
  bool list_ops = false, plans = false;
  app.add_option("--model", model, "zoo model (graph/zoo.h)");
  app.add_option("--cluster", cluster, "cluster preset (costmodel/cluster.h)");
  app.add_option("--gpus", gpus, "comma-separated GPU counts");
  app.add_option("--optimizer", optimizer, "adam or sgd (default: adam for bert_large)");
  app.add_option("--batch-per-gpu", batch_per_gpu, "per-GPU minibatch (default: Unity's)");
  app.add_flag("--plans", plans, "print a summary of each row's plan");
  app.add_option("--max-model-dims", max_model_dims,
                 "dims besides the batch an op's config may split (ParallelizeOptions::"
                 "max_model_dims; 0: no limit)");
  app.add_flag("--list-ops", list_ops, "print the forward graph's op kinds and exit");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  if (list_ops) return ListOps(model);
  std::vector<int> counts;
  for (absl::string_view s : absl::StrSplit(gpus, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "--gpus: bad count '%s'\n", std::string(s).c_str());
      return 1;
    }
    counts.push_back(n);
  }
  return Run(model, cluster, counts, optimizer, batch_per_gpu, plans, max_model_dims);
}
