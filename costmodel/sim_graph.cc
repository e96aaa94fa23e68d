#include "costmodel/sim_graph.h"

#include <utility>

namespace braid::costmodel {

int SimGraph::AddCompute(std::string name, int device, double duration_s, std::vector<int> deps) {
  SimTask t;
  t.name = std::move(name);
  t.kind = TaskKind::kCompute;
  t.resource = device;
  t.device = device;
  t.duration_s = duration_s;
  t.deps = std::move(deps);
  tasks.push_back(std::move(t));
  return static_cast<int>(tasks.size()) - 1;
}

int SimGraph::AddComm(std::string name, int channel, double duration_s, std::vector<int> deps,
                      int device) {
  SimTask t;
  t.name = std::move(name);
  t.kind = TaskKind::kComm;
  t.resource = channel;
  t.device = device;
  t.duration_s = duration_s;
  t.deps = std::move(deps);
  tasks.push_back(std::move(t));
  return static_cast<int>(tasks.size()) - 1;
}

KernelSources CountKernelSources(const SimGraph& g) {
  KernelSources k;
  for (const SimTask& t : g.tasks) {
    // Kernels of graph ops (bucket packing copies carry no op ids).
    if (t.kind != TaskKind::kCompute || t.op_ids.empty()) continue;
    switch (t.source) {
      case TimeSource::kMeasured: ++k.measured; break;
      case TimeSource::kEstimated: ++k.estimated; break;
      case TimeSource::kRoofline: ++k.roofline; break;
    }
  }
  return k;
}

}  // namespace braid::costmodel
