#include "costmodel/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "costmodel/internal/sim_engine.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {
namespace {

bool SameForSimulation(const SimTask& a, const SimTask& b) {
  return a.kind == b.kind && a.resource == b.resource && a.duration_s == b.duration_s &&
         a.deps == b.deps && a.device == b.device && a.alloc_bytes == b.alloc_bytes &&
         a.release_after == b.release_after && a.persistent == b.persistent;
}

std::string TaskLabel(const SimGraph& g, int i) {
  return absl::StrCat("task ", i, " (", g.tasks[i].name, ")");
}

}  // namespace

SimResult Simulate(const SimGraph& g) {
  internal::SimEngine e;
  e.Load(g);
  e.Run(/*record=*/false);
  SimResult r;
  e.Fill(&r);
  return r;
}

std::string ChromeTrace(const SimGraph& g, const SimResult& r) {
  using nlohmann::json;
  json events = json::array();
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
  for (int i = 0; i < static_cast<int>(g.tasks.size()); ++i) {
    if (i >= static_cast<int>(r.start_s.size()) || !std::isfinite(r.end_s[i])) continue;
    const SimTask& t = g.tasks[i];
    const bool compute = t.kind == TaskKind::kCompute;
    const int pid = t.device;
    const int tid = compute ? 0 : 1 + t.resource;
    threads[{pid, tid}] = compute ? "compute" : absl::StrCat("channel ", t.resource);
    events.push_back({{"name", t.name},
                      {"cat", compute ? "compute" : "comm"},
                      {"ph", "X"},
                      {"ts", r.start_s[i] * 1e6},
                      {"dur", (r.end_s[i] - r.start_s[i]) * 1e6},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"task", i}, {"op_ids", t.op_ids}}}});
  }
  for (const auto& [key, name] : threads) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", key.first},
                      {"tid", key.second},
                      {"args", {{"name", name}}}});
  }
  json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

absl::Status ValidateSimGraph(const SimGraph& g) {
  const int n = static_cast<int>(g.tasks.size());
  if (g.num_devices < 1) return absl::InvalidArgumentError("SimGraph.num_devices must be >= 1");
  if (g.num_channels < 0) return absl::InvalidArgumentError("SimGraph.num_channels must be >= 0");
  for (int d = 0; d < static_cast<int>(g.compute_slowdown.size()); ++d) {
    if (!(g.compute_slowdown[d] > 0) || !std::isfinite(g.compute_slowdown[d])) {
      return absl::InvalidArgumentError(
          absl::StrCat("compute_slowdown[", d, "] must be finite and > 0"));
    }
  }
  for (int d = 0; d < static_cast<int>(g.comm_slowdown.size()); ++d) {
    if (!(g.comm_slowdown[d] > 0) || !std::isfinite(g.comm_slowdown[d])) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm_slowdown[", d, "] must be finite and > 0"));
    }
  }
  for (int i = 0; i < n; ++i) {
    const SimTask& t = g.tasks[i];
    const int limit = t.kind == TaskKind::kCompute ? g.num_devices : g.num_channels;
    if (t.resource < 0 || t.resource >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(TaskLabel(g, i), ": resource ", t.resource, " out of range"));
    }
    if (t.device < 0 || t.device >= g.num_devices) {
      return absl::InvalidArgumentError(
          absl::StrCat(TaskLabel(g, i), ": device ", t.device, " out of range"));
    }
    if (!(t.duration_s >= 0) || !std::isfinite(t.duration_s)) {
      return absl::InvalidArgumentError(absl::StrCat(TaskLabel(g, i), ": invalid duration"));
    }
    if (t.alloc_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(TaskLabel(g, i), ": negative alloc_bytes"));
    }
    for (int d : t.deps) {
      if (d < 0 || d >= n || d == i) {
        return absl::InvalidArgumentError(
            absl::StrCat(TaskLabel(g, i), ": invalid dependency ", d));
      }
    }
    for (int d : t.release_after) {
      if (d < 0 || d >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat(TaskLabel(g, i), ": invalid release_after ", d));
      }
    }
  }
  std::vector<uint8_t> listed(n, 0);
  for (int i : g.comm_order) {
    if (i < 0 || i >= n || g.tasks[i].kind != TaskKind::kComm) {
      return absl::InvalidArgumentError(absl::StrCat("comm_order entry ", i, " is not a comm task"));
    }
    if (listed[i]) {
      return absl::InvalidArgumentError(absl::StrCat("comm_order lists ", TaskLabel(g, i), " twice"));
    }
    listed[i] = 1;
  }
  // Cycles (Kahn).
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> succ(n);
  for (int i = 0; i < n; ++i) {
    for (int d : g.tasks[i].deps) {
      ++indeg[i];
      succ[d].push_back(i);
    }
  }
  std::vector<int> stack;
  for (int i = 0; i < n; ++i) {
    if (indeg[i] == 0) stack.push_back(i);
  }
  int seen = 0;
  while (!stack.empty()) {
    int i = stack.back();
    stack.pop_back();
    ++seen;
    for (int s : succ[i]) {
      if (--indeg[s] == 0) stack.push_back(s);
    }
  }
  if (seen < n) {
    for (int i = 0; i < n; ++i) {
      if (indeg[i] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("dependency cycle through ", TaskLabel(g, i)));
      }
    }
  }
  // Acyclic: a stuck simulation means a comm_order contradicting the deps.
  SimResult r = Simulate(g);
  if (r.unfinished_tasks > 0) {
    for (int i = 0; i < n; ++i) {
      if (g.tasks[i].kind == TaskKind::kComm && !std::isfinite(r.end_s[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "comm_order deadlock: channel ", g.tasks[i].resource, " cannot issue ",
            TaskLabel(g, i), " (it waits for a task issued later on its channel)"));
      }
    }
    return absl::InvalidArgumentError("comm_order deadlock");
  }
  return absl::OkStatus();
}

IncrementalSimulator::IncrementalSimulator(const SimGraph& g)
    : engine_(std::make_unique<internal::SimEngine>()) {
  result_ = Full(g);
}

IncrementalSimulator::~IncrementalSimulator() = default;

int IncrementalSimulator::total_steps() const { return engine_->num_steps(); }

SimResult IncrementalSimulator::Full(const SimGraph& g) {
  last_ = g;
  engine_->Load(g);
  engine_->Run(/*record=*/true);
  replayed_steps_ = engine_->replayed_steps();
  SimResult r;
  engine_->Fill(&r);
  return r;
}

SimResult IncrementalSimulator::Resimulate(const SimGraph& changed,
                                           std::span<const int> changed_tasks) {
  const bool compatible =
      changed.tasks.size() == last_.tasks.size() && changed.num_devices == last_.num_devices &&
      changed.num_channels == last_.num_channels && changed.comm_order == last_.comm_order &&
      changed.compute_slowdown == last_.compute_slowdown &&
      changed.comm_slowdown == last_.comm_slowdown &&
      changed.resident_bytes == last_.resident_bytes &&
      std::all_of(changed_tasks.begin(), changed_tasks.end(), [&](int i) {
        CHECK(i >= 0 && i < static_cast<int>(changed.tasks.size())) << "changed task " << i;
        const SimTask& a = changed.tasks[i];
        const SimTask& b = last_.tasks[i];
        return a.kind == b.kind && (a.kind == TaskKind::kCompute || a.resource == b.resource);
      });
  if (!compatible) {
    result_ = Full(changed);
    return result_;
  }
  int k = engine_->num_steps() - 1;
  std::vector<int> guards;
  for (int i : changed_tasks) {
    k = std::min(k, engine_->FirstAffectedStep(i, changed.tasks[i]));
    // The recorded future used the old fields of task i: replay until it has
    // finished and, if its memory accounting changed, been freed.
    guards.push_back(i);
    const SimTask& o = last_.tasks[i];
    const SimTask& t = changed.tasks[i];
    if (o.alloc_bytes != t.alloc_bytes || o.device != t.device || o.persistent != t.persistent ||
        o.release_after != t.release_after) {
      guards.insert(guards.end(), o.release_after.begin(), o.release_after.end());
      guards.insert(guards.end(), t.release_after.begin(), t.release_after.end());
    }
  }
  const bool same_ticks = engine_->UpdateTasks(changed, changed_tasks);
  for (int i : changed_tasks) last_.tasks[i] = changed.tasks[i];
  if (k <= 0 || !same_ticks) {
    engine_->Run(/*record=*/true);
  } else {
    engine_->RunFrom(k, guards);
  }
  replayed_steps_ = engine_->replayed_steps();
  engine_->Fill(&result_);
  return result_;
}

SimResult IncrementalSimulator::Resimulate(const SimGraph& changed) {
  std::vector<int> diff;
  if (changed.tasks.size() == last_.tasks.size()) {
    for (int i = 0; i < static_cast<int>(changed.tasks.size()); ++i) {
      if (!SameForSimulation(changed.tasks[i], last_.tasks[i])) diff.push_back(i);
    }
  }
  if (diff.empty() && changed.tasks.size() == last_.tasks.size() &&
      changed.num_devices == last_.num_devices && changed.num_channels == last_.num_channels &&
      changed.comm_order == last_.comm_order &&
      changed.compute_slowdown == last_.compute_slowdown &&
      changed.comm_slowdown == last_.comm_slowdown &&
      changed.resident_bytes == last_.resident_bytes) {
    replayed_steps_ = 0;
    return result_;
  }
  return Resimulate(changed, diff);
}

}  // namespace braid::costmodel
