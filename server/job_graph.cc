#include "server/job_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "search/overlap_plan.h"
#include "search/parallel_graph.h"

namespace braid::server {

absl::StatusOr<graph::Graph> ParallelTrainingGraph(const ParallelSection& parallel) {
  absl::StatusOr<graph::Graph> forward = graph::ParseText(parallel.forward_text);
  if (!forward.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored per-device graph: ", forward.status().message()));
  }
  if (parallel.data_degree < 1 || parallel.degree < parallel.data_degree) {
    return absl::DataLossError(absl::StrCat("stored parallel plan: data degree ",
                                            parallel.data_degree, " of ", parallel.degree));
  }
  nlohmann::json j = base::ParseBoundedJsonOrDiscarded(parallel.json, base::kPlanJsonLimits);
  if (!j.is_object() || !j.contains("grad_group") || !j["grad_group"].is_object()) {
    return absl::DataLossError("stored parallel plan JSON lacks its gradient groups");
  }
  search::PerDeviceGraph pd;
  pd.forward = *std::move(forward);
  pd.degree = parallel.degree;
  pd.data_degree = parallel.data_degree;
  pd.model_degree = parallel.model_degree;
  for (const auto& [param, group] : j["grad_group"].items()) {
    if (!group.is_number_integer()) {
      return absl::DataLossError(absl::StrCat("stored parallel plan: grad_group of ", param));
    }
    pd.grad_group[param] = group.get<int>();
  }
  if (j.contains("grad_devices")) {
    if (!j["grad_devices"].is_object()) {
      return absl::DataLossError("stored parallel plan: grad_devices is not an object");
    }
    for (const auto& [param, n] : j["grad_devices"].items()) {
      if (!n.is_number_integer()) {
        return absl::DataLossError(absl::StrCat("stored parallel plan: grad_devices of ", param));
      }
      pd.grad_devices[param] = n.get<int>();
    }
  }
  // The optimizer the service builds every training graph with.
  ASSIGN_OR_RETURN(graph::Graph train,
                   search::BuildPerDeviceTraining(pd, graph::TrainingOptions{}.optimizer));
  ASSIGN_OR_RETURN(std::string fp, graph::FingerprintHex(train));
  if (fp != parallel.training_fingerprint) {
    return absl::DataLossError(absl::StrCat("stored per-device graph rebuilds to fingerprint ", fp,
                                            ", the plan recorded ",
                                            parallel.training_fingerprint));
  }
  // The plan's overlap choices (plan data, like its buckets): their
  // collectives charge the chosen method's effective communication time, so
  // re-costing the plan gives what the search predicted.
  if (j.contains("overlap")) {
    absl::StatusOr<std::vector<search::OverlapChoice>> overlaps =
        search::OverlapChoicesFromJson(j["overlap"]);
    if (!overlaps.ok()) {
      return absl::DataLossError(absl::StrCat("stored parallel plan: ", overlaps.status().message()));
    }
    RETURN_IF_ERROR(search::ApplyOverlaps(*overlaps, train));
  }
  return train;
}

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
  StoredJobGraph out;
  out.cluster = *std::move(cluster);
  if (job.options.parallel) {
    ASSIGN_OR_RETURN(std::optional<ParallelSection> par, store.GetJobParallel(job.id));
    // Planned: the job records the per-device graph's fingerprint.
    if (par.has_value() && !job.graph_fingerprint.empty() &&
        par->training_fingerprint == job.graph_fingerprint) {
      ASSIGN_OR_RETURN(out.training, ParallelTrainingGraph(*par));
      out.parallel = std::move(par);
      out.forward = *std::move(forward);
      return out;
    }
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
  out.training = std::move(train);
  out.forward = *std::move(forward);
  return out;
}

JobCostModel::JobCostModel(costmodel::CostModel& base, const costmodel::ClusterSpec& cluster,
                           const std::optional<ParallelSection>& parallel)
    : base_(base) {
  if (parallel.has_value()) {
    per_device_ = std::make_unique<search::DataGroupCostModel>(base, cluster, parallel->degree);
  }
}

}  // namespace braid::server
