// What a stored job was planned on, rebuilt from the store: its forward
// graph (text format) through the training-graph builder with the job's
// ranks -- checked against the job's training-graph fingerprint -- and its
// cluster. The job manager resumes and rolls back jobs with it; the status
// API re-simulates their plans.
//
//   absl::StatusOr<StoredJobGraph> jg = LoadJobGraph(store, job);
//   search::RunBaselines(jg->training, cost_model);
#ifndef BRAID_SERVER_JOB_GRAPH_H_
#define BRAID_SERVER_JOB_GRAPH_H_

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "graph/graph.h"
#include "server/store.h"

namespace braid::server {

struct StoredJobGraph {
  graph::Graph training;
  costmodel::ClusterSpec cluster;
};

// NotFound when the graph or cluster is missing; DataLoss when a stored piece
// does not parse or the graph rebuilds to another fingerprint than the
// job's (a job without one, not yet imported, is not checked).
absl::StatusOr<StoredJobGraph> LoadJobGraph(Store& store, const JobRecord& job);

}  // namespace braid::server

#endif  // BRAID_SERVER_JOB_GRAPH_H_
