#include "costmodel/sim_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

double KernelSources::Share(TimeSource s) const {
  const double total_s = seconds[0] + seconds[1] + seconds[2] + seconds[3];
  return total_s > 0 ? seconds[static_cast<int>(s)] / total_s : 0.0;
}

KernelSources CountKernelSources(const SimGraph& g) {
  KernelSources k;
  // One device's kernels: the simulator replicates every rank's tasks.
  for (const SimTask& t : g.tasks) {
    // Kernels of graph ops (bucket packing copies carry no op ids).
    if (t.kind != TaskKind::kCompute || t.op_ids.empty() || t.device != 0) continue;
    const int s = static_cast<int>(t.source);
    ++k.count[s];
    k.seconds[s] += t.duration_s;
  }
  return k;
}

namespace {
constexpr TimeSource kSourceOrder[] = {TimeSource::kMeasured, TimeSource::kGnn,
                                       TimeSource::kCorrectedRoofline, TimeSource::kPrior};
}  // namespace

nlohmann::json KernelSourcesJson(const KernelSources& k) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json kernels = nlohmann::json::object();
  for (TimeSource s : kSourceOrder) {
    const std::string name(TimeSourceName(s));
    j[name] = k.Share(s);
    kernels[name] = k.of(s);
  }
  j["kernels"] = kernels;
  return j;
}

std::string KernelSourcesLine(const KernelSources& k) {
  std::string out;
  for (TimeSource s : kSourceOrder) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(TimeSourceName(s)), " ",
                    absl::StrFormat("%.1f%%", 100 * k.Share(s)));
  }
  return out;
}

}  // namespace braid::costmodel
