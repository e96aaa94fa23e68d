#include "search/program_sim.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "search/lowering.h"

namespace braid::search {

absl::StatusOr<ProgramSimulation> SimulateProgram(const graph::Program& p, costmodel::CostModel& cm) {
  graph::Graph g = p.graph;
  std::map<std::string, graph::OpId, std::less<>> by_name;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    by_name[g.op(id).name] = id;
    if (graph::IsCollectiveKind(g.op(id).kind)) g.mutable_op(id).attrs.erase("comm_time_s");
  }
  auto find = [&](const std::string& n) -> absl::StatusOr<graph::OpId> {
    auto it = by_name.find(n);
    if (it == by_name.end()) return absl::InvalidArgumentError(absl::StrCat("program: no op ", n));
    return it->second;
  };
  ProgramSimulation out;
  // Buckets: one per gradient in production order, the program's buckets
  // merged at their last member's place.
  const Plan singles = NoFusionPlan(g);
  std::map<graph::TensorId, int> bucket_of;
  std::vector<int> left(p.buckets.size(), 0);
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    for (const std::string& n : p.buckets[b]) {
      ASSIGN_OR_RETURN(graph::OpId ar, find(n));
      if (g.op(ar).inputs.size() != 1) return absl::InvalidArgumentError(absl::StrCat("program: bucket member ", n));
      bucket_of[g.op(ar).inputs[0]] = static_cast<int>(b);
      ++left[b];
    }
  }
  std::vector<Bucket> pending(p.buckets.size());
  for (const Bucket& s : singles.buckets) {
    for (graph::TensorId t : s.grads) {
      auto it = bucket_of.find(t);
      if (it == bucket_of.end()) {
        out.plan.buckets.push_back({.grads = {t}});
        continue;
      }
      pending[it->second].grads.push_back(t);
      if (--left[it->second] == 0) out.plan.buckets.push_back(std::move(pending[it->second]));
    }
  }
  for (const std::vector<std::string>& names : p.groups) {
    FusionGroup fg;
    for (const std::string& n : names) {
      ASSIGN_OR_RETURN(graph::OpId id, find(n));
      fg.ops.push_back(id);
    }
    out.plan.groups.push_back(std::move(fg));
  }
  absl::StatusOr<costmodel::SimGraph> sg = Lower(g, out.plan, cm);
  if (!sg.ok() && !out.plan.groups.empty()) {
    out.groups_note = std::string(sg.status().message());
    out.plan.groups.clear();
    sg = Lower(g, out.plan, cm);
  }
  if (!sg.ok()) return sg.status();
  out.result = costmodel::Simulate(*sg);
  out.sources = costmodel::CountKernelSources(*sg);
  return out;
}

}  // namespace braid::search
