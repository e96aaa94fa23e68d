// What a stored job was planned on, rebuilt from the store: its forward
// graph (text format) through the training-graph builder with the job's
// ranks -- checked against the job's training-graph fingerprint -- and its
// cluster. The job manager resumes and rolls back jobs with it; the status
// API re-simulates their plans.
//
// Parallel jobs (JobOptions::parallel). Once planned, a parallel job's plan
// names the per-device training graph of the chosen strategy, and the job
// records that graph's fingerprint (jobs.graph_fingerprint, switched from
// the whole-model one it was submitted with when the plan is stored, in the
// same update that marks it done). LoadJobGraph then rebuilds the per-device
// graph from the job's ParallelSection (Store::GetJobParallel: the per-device
// forward text and gradient groups, search::BuildPerDeviceTraining) whenever
// the section's fingerprint is the job's; before that (queued, searching, or
// the section stored but the job not yet updated) it rebuilds the
// whole-model graph as for any job.
// Prices of a per-device graph come from JobCostModel (a
// search::DataGroupCostModel: gradient buckets on the data group).
//
//   absl::StatusOr<StoredJobGraph> jg = LoadJobGraph(store, job);
//   JobCostModel cm(*cluster_cm, jg->cluster, jg->parallel);
//   search::RunBaselines(jg->training, cm.get());
#ifndef BRAID_SERVER_JOB_GRAPH_H_
#define BRAID_SERVER_JOB_GRAPH_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"
#include "server/store.h"

namespace braid::server {

struct StoredJobGraph {
  graph::Graph training{""};  // the per-device one when `parallel` is set
  costmodel::ClusterSpec cluster;
  graph::Graph forward{""};   // the job's forward graph as submitted
  // Set when `training` is a parallel plan's per-device training graph.
  std::optional<ParallelSection> parallel;
};

// NotFound when the graph or cluster is missing; DataLoss when a stored piece
// does not parse or the graph rebuilds to another fingerprint than the
// job's (a job without one, not yet imported, is not checked).
absl::StatusOr<StoredJobGraph> LoadJobGraph(Store& store, const JobRecord& job);

// A parallel section's training graph: its per-device forward text and
// gradient groups through search::BuildPerDeviceTraining. DataLoss when the text does not
// parse or the graph rebuilds to another fingerprint than the section's.
// The section's overlap choices are then applied (search::ApplyOverlaps:
// the chosen collectives' comm_time_s), so a plan re-costs to what the
// search predicted; with any pair overlapped the returned graph's own
// fingerprint differs from the section's (checked before).
absl::StatusOr<graph::Graph> ParallelTrainingGraph(const ParallelSection& parallel);

// The cost model for a job's training graph: `base` itself for a whole-model
// graph; for a per-device one (`parallel` set) a search::DataGroupCostModel
// over `base` with the section's degree. Keep `base` alive; not movable.
class JobCostModel {
 public:
  JobCostModel(costmodel::CostModel& base, const costmodel::ClusterSpec& cluster,
               const std::optional<ParallelSection>& parallel);
  costmodel::CostModel& get() { return per_device_ ? *per_device_ : base_; }

 private:
  costmodel::CostModel& base_;
  std::unique_ptr<costmodel::CostModel> per_device_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_JOB_GRAPH_H_
