#include "worker/profile_graph.h"

#include <set>
#include <utility>

#include "base/status_macros.h"
#include "graph/ops.h"

namespace braid::worker {

absl::StatusOr<ProfileGraphReport> ProfileDistinctOps(const graph::Graph& g,
                                                      costmodel::ProfileStore& store,
                                                      const std::string& device_kind,
                                                      const OpProfileFn& measure) {
  ProfileGraphReport report;
  std::set<std::pair<std::string, std::string>> seen;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    const graph::Op& op = g.op(id);
    if (graph::IsCollectiveKind(op.kind)) {
      ++report.communication;
      continue;
    }
    costmodel::ProfileKey key{device_kind, op.type, costmodel::OpSignature(g, id)};
    if (!seen.insert({key.op_type, key.signature}).second) continue;
    if (store.GetOwn(key).has_value()) {  // measured here before (not a shipped row)
      ++report.skipped;
      continue;
    }
    absl::StatusOr<OpProfile> p = measure(g, id);
    if (!p.ok()) {
      if (p.status().code() == absl::StatusCode::kUnimplemented) {
        ++report.unsupported;
      } else {
        ++report.failed;
      }
      report.errors.push_back(std::string(p.status().message()));
      continue;
    }
    RETURN_IF_ERROR(store.Put(key, p->sample));
    ++report.profiled;
  }
  return report;
}

}  // namespace braid::worker
