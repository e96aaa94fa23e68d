#include "server/plan_cache.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "search/baselines.h"
#include "search/plan.h"
#include "search/validity.h"

namespace braid::server {

namespace {

nlohmann::json BaselineJson(const std::string& name, const costmodel::SimResult& s) {
  return {{"name", name},
          {"iteration_s", s.iteration_s},
          {"compute_s", s.compute_s},
          {"comm_s", s.comm_s},
          {"overlap_ratio", s.overlap_ratio}};
}

nlohmann::json BaselinesJson(const search::BaselineResults& b) {
  nlohmann::json arr = nlohmann::json::array();
  for (const search::EvaluatedPlan& e : b.baselines) arr.push_back(BaselineJson(e.name, e.sim));
  return arr;
}

}  // namespace

std::string PlanCacheKey(const std::string& graph_fingerprint,
                         const std::string& cluster_fingerprint, const JobOptions& options) {
  return absl::StrCat(graph_fingerprint, "|", cluster_fingerprint, "|", JobOptionsToJson(options));
}

PlanRecord MakePlanRecord(const std::string& key, const graph::Graph& g,
                          const search::SearchResult& r, const std::string& generation) {
  PlanRecord p;
  p.key = key;
  p.generation = generation;
  p.plan_json = search::PlanToJson(g, r.plan).dump();
  p.predicted_s = r.sim.iteration_s;
  p.origin = r.origin;
  p.baselines_json = r.baselines ? BaselinesJson(*r.baselines).dump() : "[]";
  p.fo_bound_s = r.fo_bound_s;
  return p;
}

absl::StatusOr<std::optional<PlanRecord>> PlanCache::LookupFresh(const std::string& key,
                                                                 const std::string& generation) {
  ASSIGN_OR_RETURN(std::optional<PlanRecord> rec, store_->GetPlan(key));
  if (!rec.has_value() || rec->generation != generation) return std::optional<PlanRecord>();
  return rec;
}

absl::StatusOr<std::optional<CachedPlan>> PlanCache::Lookup(const std::string& key,
                                                            const graph::Graph& g,
                                                            costmodel::CostModel& cm) {
  ASSIGN_OR_RETURN(std::optional<PlanRecord> rec, store_->GetPlan(key));
  if (!rec.has_value()) return std::optional<CachedPlan>();
  CachedPlan out{*rec, false};
  const std::string generation = cm.Generation();
  if (out.record.generation == generation) return std::optional<CachedPlan>(std::move(out));

  // Stale: re-validate and re-simulate under the current cost model.
  nlohmann::json j = nlohmann::json::parse(out.record.plan_json, nullptr, false);
  absl::StatusOr<search::Plan> plan = search::PlanFromJson(g, j);
  absl::Status valid = plan.ok() ? search::ValidatePlan(g, *plan, cm.fusion_backend()) : plan.status();
  if (!valid.ok()) {
    LOG(WARNING) << "plan cache: dropping stale plan " << key << ": " << valid;
    return std::optional<CachedPlan>();
  }
  absl::StatusOr<costmodel::SimResult> sim = search::EvaluatePlan(g, *plan, cm);
  if (!sim.ok()) {
    LOG(WARNING) << "plan cache: stale plan " << key << " no longer lowers: " << sim.status();
    return std::optional<CachedPlan>();
  }
  search::SearchResult r;
  r.plan = *std::move(plan);
  r.sim = *std::move(sim);
  r.origin = out.record.origin;
  ASSIGN_OR_RETURN(search::BaselineResults b, search::RunBaselines(g, cm));
  std::vector<costmodel::SimResult> sims;
  for (const search::EvaluatedPlan& e : b.baselines) sims.push_back(e.sim);
  sims.push_back(r.sim);
  r.fo_bound_s = search::FullyOverlappedBound(sims);
  r.baselines = std::move(b);
  out.record = MakePlanRecord(key, g, r, generation);
  out.recosted = true;
  RETURN_IF_ERROR(store_->PutPlan(out.record));
  return std::optional<CachedPlan>(std::move(out));
}

absl::Status PlanCache::Insert(const std::string& key, const graph::Graph& g,
                               const search::SearchResult& r, const std::string& generation) {
  return store_->PutPlan(MakePlanRecord(key, g, r, generation));
}

}  // namespace braid::server
