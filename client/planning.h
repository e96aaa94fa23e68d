// What every planning command needs before it can simulate or search: the
// training graph of a model on a cluster, and a cost model reading the
// embedded profile store. The CLI and the embedded server share it.
//
//   PlanningRequest req{.model = "zoo:resnet50", .cluster = "disco-a"};
//   absl::StatusOr<std::unique_ptr<PlanningContext>> ctx = Prepare(req);
//   search::RunFusionSearch((*ctx)->training, *(*ctx)->cost_model, cfg);
#ifndef BRAID_CLIENT_PLANNING_H_
#define BRAID_CLIENT_PLANNING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "costmodel/sim_graph.h"
#include "costmodel/simulator.h"
#include "graph/graph.h"
#include "search/plan.h"

namespace braid::client {

struct PlanningRequest {
  std::string model;    // zoo:NAME, model.onnx, braid text graph
  std::string cluster;  // preset or JSON file
  int ranks = 0;        // 0: the cluster's own size
  int batch = 0;        // 0: the model's default
  std::string optimizer = "sgd";
  // SQLite file holding measured profiles; "" = DefaultDatabasePath(),
  // "none" = no profile store (roofline and priors only).
  std::string db;
  // Fused ops without a measured profile: "auto" = the GNN estimator when one
  // is trained for the cluster's device kind (costmodel::FusedOpEstimatorFor),
  // "none" = the corrected roofline.
  std::string estimator = "auto";
};

struct PlanningContext {
  graph::Graph forward;
  graph::Graph training;
  costmodel::ClusterSpec cluster;
  std::unique_ptr<costmodel::ProfileStore> store;  // may be null
  std::unique_ptr<costmodel::ClusterCostModel> cost_model;
  std::vector<std::string> warnings;
};

// $BRAID_DB, else $XDG_CACHE_HOME/braid/braid.db, else ~/.cache/braid/braid.db.
std::string DefaultDatabasePath();

absl::StatusOr<std::unique_ptr<PlanningContext>> Prepare(const PlanningRequest& req);

// The compute ops of a simulated schedule in the order they start (a fused
// task's ops in their group order): the order the timing executor runs them
// in, so that measured and simulated iterations execute the same sequence.
// With the `plan` that was lowered, a fused task leaves out its group's
// duplicated copies: a duplicated op runs once, at its home (alone or in its
// home group), which is how the executor runs it. So a task reading what
// another task produces comes after it even where the simulation overlapped
// them (a group recomputing a duplicated op does not wait for its home).
std::vector<graph::OpId> ComputeOrder(const graph::Graph& g, const costmodel::SimGraph& sg,
                                      const costmodel::SimResult& r,
                                      const search::Plan* plan = nullptr);

}  // namespace braid::client

#endif  // BRAID_CLIENT_PLANNING_H_
