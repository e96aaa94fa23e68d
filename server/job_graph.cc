#include "server/job_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "graph/training.h"

namespace braid::server {

absl::StatusOr<StoredJobGraph> LoadJobGraph(Store& store, const JobRecord& job) {
  ASSIGN_OR_RETURN(std::string cluster_json, store.GetClusterJson(job.cluster_fingerprint));
  absl::StatusOr<costmodel::ClusterSpec> cluster = costmodel::ParseClusterJson(cluster_json);
  if (!cluster.ok()) {
    return absl::DataLossError(absl::StrCat("stored cluster: ", cluster.status().message()));
  }
  ASSIGN_OR_RETURN(std::string text, store.GetGraphText(job.forward_fingerprint));
  absl::StatusOr<graph::Graph> forward = graph::ParseText(text);
  if (!forward.ok()) {
    return absl::DataLossError(absl::StrCat("stored graph: ", forward.status().message()));
  }
  graph::TrainingOptions topts;
  topts.ranks = job.options.ranks;
  ASSIGN_OR_RETURN(graph::Graph train, graph::BuildTrainingGraph(*forward, topts));
  if (!job.graph_fingerprint.empty()) {
    ASSIGN_OR_RETURN(std::string fp, graph::FingerprintHex(train));
    if (fp != job.graph_fingerprint) {
      return absl::DataLossError(absl::StrCat("stored graph rebuilds to fingerprint ", fp,
                                              ", job recorded ", job.graph_fingerprint));
    }
  }
  return StoredJobGraph{std::move(train), *std::move(cluster)};
}

}  // namespace braid::server
