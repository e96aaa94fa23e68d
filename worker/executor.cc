// The launcher side of the timing executor: checks the strategies, writes the
// graph and the strategies for the ranks, spawns braid-train-rank N times and
// combines their timings (the rank side is executor_rank.cc).
#include "worker/executor.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "costmodel/fusion_backend.h"
#include "graph/text_format.h"
#include "nlohmann/json.hpp"
#include "worker/internal/executor.h"
#include "worker/rank_processes.h"
#include "worker/timing.h"


namespace braid::worker {
namespace {

namespace fs = std::filesystem;
using graph::OpId;
using graph::TensorId;


absl::StatusOr<std::string> FindTrainRankBinary(const std::string& configured) {
  return FindRankProgram(configured, "braid-train-rank", "BRAID_TRAIN_RANK", "executor");
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("executor: cannot write ", path));
  return absl::OkStatus();
}

// Per strategy: the timed iterations' seconds and the bookkeeping sums.
struct RankResult {
  std::map<int, std::vector<double>> times;
  std::map<int, std::vector<double>> cpu;
  std::map<int, ExecBookkeeping> book;
  std::map<int, std::vector<std::pair<OpId, double>>> ops;
  std::map<int, std::vector<double>> pack;
  std::map<int, std::map<int64_t, std::vector<double>>> probe;
  int64_t pack_bytes = 0;
};

absl::StatusOr<RankResult> ParseRankOutput(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("executor: no output ", path));
  RankResult r;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    int s = 0;
    ls >> kind >> s;
    bool ok = static_cast<bool>(ls);
    if (ok && kind == "iter") {
      double t = 0, cpu = 0;
      ok = static_cast<bool>(ls >> t >> cpu);
      r.times[s].push_back(t);
      r.cpu[s].push_back(cpu);
    } else if (ok && kind == "op") {
      OpId op = 0;
      double t = 0;
      ok = static_cast<bool>(ls >> op >> t);
      r.ops[s].emplace_back(op, t);
    } else if (ok && kind == "probe") {
      int64_t bytes = 0;
      double t = 0;
      ok = static_cast<bool>(ls >> bytes >> t);
      r.probe[s][bytes].push_back(t);
    } else if (ok && kind == "pack") {
      double t = 0;
      ok = static_cast<bool>(ls >> t >> r.pack_bytes);
      r.pack[s].push_back(t);
    } else if (ok && kind == "book") {
      ExecBookkeeping& b = r.book[s];
      ok = static_cast<bool>(ls >> b.allreduces_started >> b.gradients_reduced >>
                             b.gradients_not_once >> b.waits >> b.updates_before_wait >>
                             b.bytes_copied >> b.buckets_verified >> b.verify_failures >>
                             b.pack_s >> b.wait_s);
    } else {
      ok = false;
    }
    if (!ok) return absl::InternalError(absl::StrCat("executor: bad line in ", path, ": ", line));
  }
  return r;
}

void Add(ExecBookkeeping& into, const ExecBookkeeping& b) {
  into.allreduces_started += b.allreduces_started;
  into.gradients_reduced += b.gradients_reduced;
  into.gradients_not_once += b.gradients_not_once;
  into.waits += b.waits;
  into.updates_before_wait += b.updates_before_wait;
  into.bytes_copied += b.bytes_copied;
  into.buckets_verified += b.buckets_verified;
  into.verify_failures += b.verify_failures;
  into.pack_s += b.pack_s;
  into.wait_s += b.wait_s;
}


}  // namespace

namespace internal {

absl::StatusOr<GradientMaps> MapGradients(const graph::Graph& g) {
  GradientMaps m;
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const graph::Op& op = g.op(id);
    if (!graph::IsCollectiveKind(op.kind)) continue;
    if (op.kind != graph::OpKind::kAllReduce || op.inputs.size() != 1 || op.outputs.size() != 1 ||
        g.tensor(op.inputs[0]).role != graph::TensorRole::kGradient) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: op '", op.name, "' (", op.type,
          "): only data-parallel graphs run here (one AllReduce per gradient)"));
    }
    m.reduced_to_grad[op.outputs[0]] = op.inputs[0];
  }
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == graph::TensorRole::kGradient) m.gradients.push_back(t);
  }
  return m;
}

std::vector<OpId> DefaultOrder(const graph::Graph& g) {
  std::vector<OpId> order;
  absl::StatusOr<std::vector<OpId>> topo = g.TopologicalOrder();
  if (!topo.ok()) return order;
  for (OpId id : *topo) {
    if (!graph::IsCollectiveKind(g.op(id).kind)) order.push_back(id);
  }
  return order;
}

nlohmann::json StrategiesToJson(const std::vector<ExecStrategy>& strategies,
                                const TrainBenchOptions& o) {
  nlohmann::json list = nlohmann::json::array();
  for (const ExecStrategy& s : strategies) {
    list.push_back({{"name", s.name},
                    {"buckets", s.buckets},
                    {"after_backward", s.after_backward},
                    {"compute_only", s.compute_only},
                    {"time_ops", s.time_ops},
                    {"probe_allreduce_bytes", s.probe_allreduce_bytes},
                    {"order", s.order}});
    nlohmann::json groups = nlohmann::json::array();
    for (const ExecStrategy::FusedGroup& grp : s.groups) {
      groups.push_back({{"ops", grp.ops}, {"duplicated", grp.duplicated}});
    }
    list.back()["groups"] = std::move(groups);
  }
  return {{"warmup", o.warmup},
          {"iterations", o.iterations},
          {"verify_allreduce", o.verify_allreduce},
          {"strategies", list}};
}

}  // namespace internal

absl::StatusOr<std::vector<OpId>> ExecOrderFor(const graph::Graph& g,
                                               const std::vector<ExecStrategy::FusedGroup>& groups) {
  ASSIGN_OR_RETURN(internal::GradientMaps maps, internal::MapGradients(g));
  const std::vector<OpId> topo = internal::DefaultOrder(g);
  std::vector<int> rank(g.num_ops(), -1);
  for (size_t i = 0; i < topo.size(); ++i) rank[topo[i]] = static_cast<int>(i);
  // Units: a group (its non-duplicated members) or a lone op.
  std::vector<int> unit_of(g.num_ops(), -1);
  std::vector<std::vector<OpId>> members;
  for (const ExecStrategy::FusedGroup& grp : groups) {
    std::vector<OpId> own;
    for (OpId id : grp.ops) {
      if (id < 0 || id >= g.num_ops() || rank[id] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("executor: group op id ", id, " is not a compute op"));
      }
      if (std::find(grp.duplicated.begin(), grp.duplicated.end(), id) != grp.duplicated.end()) continue;
      if (unit_of[id] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("executor: op '", g.op(id).name, "' is in two groups"));
      }
      unit_of[id] = static_cast<int>(members.size());
      own.push_back(id);
    }
    std::sort(own.begin(), own.end(), [&](OpId a, OpId b) { return rank[a] < rank[b]; });
    members.push_back(std::move(own));
  }
  for (OpId id : topo) {
    if (unit_of[id] < 0) {
      unit_of[id] = static_cast<int>(members.size());
      members.push_back({id});
    }
  }
  // Every op a unit reads from: the producers of its members' inputs and,
  // for a group, of its duplicated copies' inputs; a reduced gradient counts
  // as produced by its gradient's producer.
  const size_t n = members.size();
  std::vector<std::set<int>> succ(n);
  std::vector<int> indegree(n, 0);
  auto depend = [&](int unit, OpId reader) {
    for (graph::TensorId t : g.op(reader).inputs) {
      auto r = maps.reduced_to_grad.find(t);
      const OpId p = g.tensor(r == maps.reduced_to_grad.end() ? t : r->second).producer;
      if (p == graph::kNoId || unit_of[p] == unit) continue;
      if (succ[unit_of[p]].insert(unit).second) ++indegree[unit];
    }
  };
  for (size_t u = 0; u < n; ++u) {
    for (OpId id : members[u]) depend(static_cast<int>(u), id);
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (OpId id : groups[gi].duplicated) depend(static_cast<int>(gi), id);
  }
  // Kahn's algorithm, the unit whose first member comes first in the
  // topological order first.
  auto later = [&](int a, int b) { return rank[members[a][0]] > rank[members[b][0]]; };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  for (size_t u = 0; u < n; ++u) {
    if (indegree[u] == 0) ready.push(static_cast<int>(u));
  }
  std::vector<OpId> order;
  while (!ready.empty()) {
    const int u = ready.top();
    ready.pop();
    order.insert(order.end(), members[u].begin(), members[u].end());
    for (int v : succ[u]) {
      if (--indegree[v] == 0) ready.push(v);
    }
  }
  if (order.size() != topo.size()) {
    return absl::InvalidArgumentError(
        "executor: the fused groups depend on each other in a cycle: no order runs them");
  }
  return order;
}

absl::Status ValidateStrategy(const graph::Graph& g, const ExecStrategy& s) {
  auto bad = [&s](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("executor: strategy '", s.name, "': ", what));
  };
  ASSIGN_OR_RETURN(internal::GradientMaps maps, internal::MapGradients(g));
  std::map<TensorId, int> bucket_of;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    if (s.buckets[b].empty()) return bad(absl::StrCat("bucket ", b, " is empty"));
    for (TensorId t : s.buckets[b]) {
      if (t < 0 || t >= g.num_tensors() || g.tensor(t).role != graph::TensorRole::kGradient) {
        return bad(absl::StrCat("bucket ", b, " holds tensor id ", t, ", not a gradient"));
      }
      if (g.tensor(t).dtype != g.tensor(s.buckets[b][0]).dtype) {
        return bad(absl::StrCat("bucket ", b, " mixes dtypes ('", g.tensor(t).name, "')"));
      }
      if (!bucket_of.emplace(t, static_cast<int>(b)).second) {
        return bad(absl::StrCat("gradient '", g.tensor(t).name, "' is in two buckets"));
      }
    }
  }
  for (TensorId t : maps.gradients) {
    if (!s.compute_only && s.probe_allreduce_bytes.empty() && !bucket_of.contains(t)) return bad(absl::StrCat("gradient '", g.tensor(t).name, "' is in no bucket"));
  }
  if (s.order.empty()) return absl::OkStatus();
  std::vector<int> pos(g.num_ops(), -1);
  int compute_ops = 0;
  for (OpId id = 0; id < g.num_ops(); ++id) compute_ops += !graph::IsCollectiveKind(g.op(id).kind);
  if (static_cast<int>(s.order.size()) != compute_ops) {
    return bad(absl::StrCat("order lists ", s.order.size(), " ops, the graph has ", compute_ops,
                            " non-collective ops"));
  }
  for (size_t i = 0; i < s.order.size(); ++i) {
    OpId id = s.order[i];
    if (id < 0 || id >= g.num_ops() || graph::IsCollectiveKind(g.op(id).kind) || pos[id] >= 0) {
      return bad(absl::StrCat("order entry ", i, " (op id ", id, ") is not a new compute op"));
    }
    pos[id] = static_cast<int>(i);
  }
  // A fused group runs where its first member is: everything its members
  // read from outside must be produced before that.
  std::vector<int> group_pos(s.groups.size(), -1);
  std::vector<int> group_of(g.num_ops(), -1);
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    const ExecStrategy::FusedGroup& grp = s.groups[gi];
    for (OpId id : grp.ops) {
      if (id < 0 || id >= g.num_ops()) return bad(absl::StrCat("group ", gi, ": bad op id ", id));
    }
    if (absl::Status ok = costmodel::CpuFusionBackend().CanImplement(g, grp.ops); !ok.ok()) {
      return bad(absl::StrCat("group ", gi, ": ", ok.message()));
    }
    for (OpId id : grp.ops) {
      if (std::find(grp.duplicated.begin(), grp.duplicated.end(), id) != grp.duplicated.end()) continue;
      if (group_of[id] >= 0) return bad(absl::StrCat("op '", g.op(id).name, "' is in two groups"));
      group_of[id] = static_cast<int>(gi);
      if (group_pos[gi] < 0 || pos[id] < group_pos[gi]) group_pos[gi] = pos[id];
    }
    if (group_pos[gi] < 0) return bad(absl::StrCat("group ", gi, " has only duplicated ops"));
  }
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    const ExecStrategy::FusedGroup& grp = s.groups[gi];
    for (OpId id : grp.ops) {
      for (TensorId t : g.op(id).inputs) {
        const OpId p = g.tensor(t).producer;
        if (p == graph::kNoId || std::find(grp.ops.begin(), grp.ops.end(), p) != grp.ops.end()) continue;
        const int at = group_of[p] >= 0 ? group_pos[group_of[p]] : pos[p];
        if (at > group_pos[gi]) {
          return bad(absl::StrCat("group ", gi, " runs before '", g.op(p).name,
                                  "', which produces its input"));
        }
      }
    }
  }
  for (OpId id : s.order) {
    for (TensorId t : g.op(id).inputs) {
      auto r = maps.reduced_to_grad.find(t);
      const TensorId source = r == maps.reduced_to_grad.end() ? t : r->second;
      const OpId p = g.tensor(source).producer;
      if (p != graph::kNoId && pos[p] > pos[id]) {
        return bad(absl::StrCat("order runs '", g.op(id).name, "' before '", g.op(p).name,
                                "', which produces its input"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StrategyMeasurement>> RunTrainingBench(
    const graph::Graph& training, const std::vector<ExecStrategy>& strategies,
    const TrainBenchOptions& options) {
  if (options.ranks < 1 || options.iterations < 1 || options.warmup < 0) {
    return absl::InvalidArgumentError("executor: ranks >= 1, iterations >= 1 and warmup >= 0");
  }
  if (strategies.empty()) return absl::InvalidArgumentError("executor: no strategies");
  std::vector<ExecStrategy> filled = strategies;
  for (ExecStrategy& s : filled) {
    if (s.order.empty()) s.order = internal::DefaultOrder(training);
    RETURN_IF_ERROR(ValidateStrategy(training, s));
    for (int64_t b : s.probe_allreduce_bytes) {
      if (b <= 0 || b % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "executor: strategy '", s.name, "': probe size ", b, " is not a positive multiple of 4"));
      }
    }
    if (s.time_ops && !s.compute_only) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: strategy '", s.name, "': time_ops needs compute_only"));
    }
  }
  ASSIGN_OR_RETURN(std::string binary, FindTrainRankBinary(options.rank_binary));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-train"));
  const std::string graph_path = dir.path() + "/graph.braid";
  const std::string strategies_path = dir.path() + "/strategies.json";
  RETURN_IF_ERROR(WriteText(graph_path, graph::ToText(training)));
  RETURN_IF_ERROR(WriteText(strategies_path, internal::StrategiesToJson(filled, options).dump()));

  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < options.ranks; ++r) {
    argv.push_back({binary,
                    "--store", dir.path() + "/store",
                    "--graph", graph_path,
                    "--strategies", strategies_path,
                    "--out", absl::StrCat(dir.path(), "/rank", r, ".txt"),
                    "--rank", absl::StrCat(r),
                    "--world", absl::StrCat(options.ranks)});
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "executor"));

  std::vector<StrategyMeasurement> out(filled.size());
  for (size_t s = 0; s < filled.size(); ++s) {
    out[s].name = filled[s].name;
    out[s].iteration_s.assign(options.iterations, 0.0);
    out[s].cpu_s.assign(options.iterations, 0.0);
  }
  for (int r = 0; r < options.ranks; ++r) {
    ASSIGN_OR_RETURN(RankResult rr, ParseRankOutput(absl::StrCat(dir.path(), "/rank", r, ".txt")));
    for (size_t s = 0; s < filled.size(); ++s) {
      const std::vector<double>& t = rr.times[static_cast<int>(s)];
      if (static_cast<int>(t.size()) != options.iterations) {
        return absl::InternalError(absl::StrCat("executor: rank ", r, " reported ", t.size(),
                                                " iterations of '", filled[s].name, "', expected ",
                                                options.iterations));
      }
      // An iteration ends when its slowest rank does.
      for (int i = 0; i < options.iterations; ++i) {
        out[s].iteration_s[i] = std::max(out[s].iteration_s[i], t[i]);
        out[s].cpu_s[i] = std::max(out[s].cpu_s[i], rr.cpu[static_cast<int>(s)][i]);
      }
      Add(out[s].bookkeeping, rr.book[static_cast<int>(s)]);
      for (const auto& [bytes, ts] : rr.probe[static_cast<int>(s)]) {
        std::vector<double>& v = out[s].probe_s[bytes];
        v.insert(v.end(), ts.begin(), ts.end());
      }
      if (filled[s].time_ops) {
        const std::vector<double>& pk = rr.pack[static_cast<int>(s)];
        out[s].pack_s.insert(out[s].pack_s.end(), pk.begin(), pk.end());
        out[s].pack_bytes = rr.pack_bytes;
        out[s].op_s.resize(training.num_ops());
        for (const auto& [op, sec] : rr.ops[static_cast<int>(s)]) {
          if (op < 0 || op >= training.num_ops()) {
            return absl::InternalError(absl::StrCat("executor: rank ", r, " timed op id ", op));
          }
          out[s].op_s[op].push_back(sec);
        }
        for (graph::OpId op = 0; op < training.num_ops(); ++op) {
          const size_t want = static_cast<size_t>(r + 1) * options.iterations;
          if (!out[s].op_s[op].empty() && out[s].op_s[op].size() != want) {
            return absl::InternalError(absl::StrCat("executor: rank ", r, " timed op ", op, " ",
                                                    out[s].op_s[op].size(), " times, expected ",
                                                    want));
          }
        }
      }
    }
  }
  for (StrategyMeasurement& m : out) {
    TimingSummary sum = Summarize(m.iteration_s);
    m.median_s = sum.median_s;
    m.iqr_s = sum.iqr_s;
    m.median_cpu_s = Summarize(m.cpu_s).median_s;
  }
  return out;
}

}  // namespace braid::worker
