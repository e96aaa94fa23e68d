#include "server/plan_cache.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "costmodel/sim_graph.h"
#include "search/baselines.h"
#include "search/lowering.h"
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
  p.compute_s = r.sim.compute_s;
  p.comm_s = r.sim.comm_s;
  p.origin = r.origin;
  p.baselines_json = r.baselines ? BaselinesJson(*r.baselines).dump() : "[]";
  p.fo_bound_s = r.fo_bound_s;
  if (r.baselines) {
    if (const search::EvaluatedPlan* ddp = r.baselines->Find("ddp")) {
      p.ddp_buckets_json = search::PlanToJson(g, ddp->plan)["buckets"].dump();
    }
  }
  return p;
}

std::string CostSourcesJson(const graph::Graph& g, const search::Plan& plan,
                            costmodel::CostModel& cm) {
  absl::StatusOr<costmodel::SimGraph> sg = search::Lower(g, plan, cm);
  if (!sg.ok()) return "";
  const costmodel::KernelSources k = costmodel::CountKernelSources(*sg);
  return nlohmann::json{{"measured", k.Share(costmodel::TimeSource::kMeasured)},
                        {"gnn", k.Share(costmodel::TimeSource::kGnn)},
                        {"corrected_roofline", k.Share(costmodel::TimeSource::kCorrectedRoofline)},
                        {"prior", k.Share(costmodel::TimeSource::kPrior)}}
      .dump();
}

absl::StatusOr<PlanRecord> MakeRollbackRecord(const PlanRecord& replaced, const graph::Graph& g,
                                              const search::BaselineResults& b,
                                              costmodel::CostModel& cm, const RollbackInfo& why) {
  std::optional<search::EvaluatedPlan> measured;
  if (!replaced.ddp_buckets_json.empty()) {
    // The DDP buckets the ranks measured the plan against.
    nlohmann::json j = {
        {"groups", nlohmann::json::array()},
        {"buckets",
         base::ParseBoundedJsonOrDiscarded(replaced.ddp_buckets_json, base::kPlanJsonLimits)}};
    absl::StatusOr<search::Plan> plan = search::PlanFromJson(g, j);
    absl::StatusOr<costmodel::SimResult> sim =
        plan.ok() ? search::EvaluatePlan(g, *plan, cm) : plan.status();
    if (sim.ok()) {
      measured = search::EvaluatedPlan{"ddp", *std::move(plan), *std::move(sim)};
    } else {
      LOG(WARNING) << "plan cache: the stored DDP buckets of " << replaced.key
                   << " no longer resolve (" << sim.status() << "): rolling back to a fresh one";
    }
  }
  const search::EvaluatedPlan* ddp = measured.has_value() ? &*measured : b.Find("ddp");
  if (ddp == nullptr) {
    return absl::InternalError("the DDP-bucket baseline did not finish: nothing to roll back to");
  }
  const std::string generation = cm.Generation();
  PlanRecord p;
  p.key = replaced.key;
  p.generation = generation;
  p.plan_json = search::PlanToJson(g, ddp->plan).dump();
  p.predicted_s = ddp->sim.iteration_s;
  p.compute_s = ddp->sim.compute_s;
  p.comm_s = ddp->sim.comm_s;
  p.origin = "baseline:ddp";
  p.baselines_json = BaselinesJson(b).dump();
  p.fo_bound_s = b.fo_bound_s;
  p.ddp_buckets_json = search::PlanToJson(g, ddp->plan)["buckets"].dump();
  p.rolled_back = true;
  p.rollback_reason = why.reason;
  p.rollback_job = why.job_id;
  p.rolled_back_from = why.replaced_digest;
  p.rolled_back_predicted_s = replaced.predicted_s;
  p.parallel = replaced.parallel;  // the baseline runs on the same per-device graph
  p.cost_sources_json = CostSourcesJson(g, ddp->plan, cm);
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
  nlohmann::json j = base::ParseBoundedJsonOrDiscarded(out.record.plan_json, base::kPlanJsonLimits);
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
  PlanRecord recosted = MakePlanRecord(key, g, r, generation);
  // A rolled-back entry stays rolled back: its plan (the DDP baseline then)
  // is re-costed, not replaced.
  recosted.rolled_back = out.record.rolled_back;
  recosted.rollback_reason = out.record.rollback_reason;
  recosted.rollback_job = out.record.rollback_job;
  recosted.rolled_back_from = out.record.rolled_back_from;
  recosted.rolled_back_predicted_s = out.record.rolled_back_predicted_s;
  // The baseline a plan is measured against stays the one it was served
  // with (it is part of the plan's digest); only the costs change.
  if (!out.record.ddp_buckets_json.empty()) recosted.ddp_buckets_json = out.record.ddp_buckets_json;
  recosted.parallel = out.record.parallel;
  recosted.cost_sources_json = CostSourcesJson(g, r.plan, cm);
  out.record = std::move(recosted);
  out.recosted = true;
  RETURN_IF_ERROR(store_->PutPlan(out.record));
  return std::optional<CachedPlan>(std::move(out));
}

absl::StatusOr<PlanRecord> PlanCache::Insert(const std::string& key, const graph::Graph& g,
                                             const search::SearchResult& r,
                                             const std::string& generation,
                                             const std::optional<ParallelSection>& parallel,
                                             const std::string& cost_sources_json) {
  ASSIGN_OR_RETURN(std::optional<PlanRecord> existing, store_->GetPlan(key));
  if (existing.has_value() && existing->rolled_back && existing->generation == generation) {
    LOG(INFO) << "plan cache: keeping the rolled-back entry " << key << " over a new search's plan";
    return *std::move(existing);
  }
  PlanRecord rec = MakePlanRecord(key, g, r, generation);
  rec.parallel = parallel;
  rec.cost_sources_json = cost_sources_json;
  RETURN_IF_ERROR(store_->PutPlan(rec));
  return rec;
}

}  // namespace braid::server
