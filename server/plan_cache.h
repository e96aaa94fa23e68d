// The plan cache: finished plans keyed by what determines them -- the training
// graph's fingerprint, the cluster's fingerprint and the search options -- and
// stamped with the cost-model generation (braid version, profile-store
// generation, estimator version: CostModel::Generation()) they were costed
// under. A hit under the current generation is served as stored; a hit under
// an older one is re-validated against the graph and re-simulated with the
// current cost model (plan and baselines) before it is served, and the entry
// is rewritten under the new generation.
//
// Rollback. When a plan's training ranks measure it slower than the
// DDP-bucket baseline beyond the measured spread (server/plan_feedback.h),
// the entry under its key is replaced by that baseline, marked rolled back
// (MakeRollbackRecord). The cache then serves the baseline to every job of
// the key, new ones included, instead of dropping the entry: the search is
// deterministic for a key (same graph, cluster, options and seed), so a
// fresh search would find the losing plan again. A rolled-back entry keeps
// its mark when it is re-costed.
//
//   PlanCache cache(store);
//   std::string key = PlanCacheKey(graph_fp, cluster_fp, options);
//   absl::StatusOr<std::optional<CachedPlan>> hit = cache.Lookup(key, train, cm);
//   if (!*hit) { SearchResult r = ...; cache.Insert(key, train, r, cm.Generation()); }
#ifndef BRAID_SERVER_PLAN_CACHE_H_
#define BRAID_SERVER_PLAN_CACHE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"
#include "search/backtracking.h"
#include "server/store.h"

namespace braid::server {

std::string PlanCacheKey(const std::string& graph_fingerprint,
                         const std::string& cluster_fingerprint, const JobOptions& options);

// The record stored for a finished search.
PlanRecord MakePlanRecord(const std::string& key, const graph::Graph& g,
                          const search::SearchResult& r, const std::string& generation);

// Shares of `plan`'s predicted compute time by source (measured, GNN,
// corrected roofline, prior: costmodel::CountKernelSources of its lowering
// with `cm`) as the JSON object PlanRecord::cost_sources_json keeps; "" when
// the plan does not lower.
std::string CostSourcesJson(const graph::Graph& g, const search::Plan& plan,
                            costmodel::CostModel& cm);

// Why a cached plan is replaced by the DDP-bucket baseline.
struct RollbackInfo {
  std::string reason;
  std::string job_id;           // whose ranks measured it
  std::string replaced_digest;  // PlanDigest of the plan served until now
};

// The DDP-bucket baseline as the entry that replaces `replaced` under its
// key, marked rolled back and costed with `cm`: the DDP buckets `replaced`
// was served with (what the ranks measured it against), or where it has
// none, those of `b` (RunBaselines on `g` with `cm`, which also gives the
// entry's baseline table). Internal when neither exists.
absl::StatusOr<PlanRecord> MakeRollbackRecord(const PlanRecord& replaced, const graph::Graph& g,
                                              const search::BaselineResults& b,
                                              costmodel::CostModel& cm, const RollbackInfo& why);

struct CachedPlan {
  PlanRecord record;
  bool recosted = false;  // was under an older generation
};

class PlanCache {
 public:
  explicit PlanCache(Store* store) : store_(store) {}

  // Only the generation, no re-costing: a hit that can be served as is.
  absl::StatusOr<std::optional<PlanRecord>> LookupFresh(const std::string& key,
                                                        const std::string& generation);
  // nullopt on a miss, and on a stale entry whose plan no longer resolves
  // against `g` or fails ValidatePlan (then it is a miss and will be
  // replaced). For a parallel entry, `g` and `cm` are the per-device
  // training graph its section names and a search::DataGroupCostModel.
  absl::StatusOr<std::optional<CachedPlan>> Lookup(const std::string& key, const graph::Graph& g,
                                                   costmodel::CostModel& cm);
  // Stores the search result under `key` and returns what the key serves
  // now: the result, or a rolled-back entry made under the same generation
  // while this search ran (it is kept: the plan it replaced is the one this
  // search found again). A parallel plan's `parallel` section (`g` is then
  // its per-device training graph) is stored with it; every later form of
  // the entry (re-costed, rolled back) keeps it.
  // `cost_sources_json` (CostSourcesJson of the result's plan) is kept with it.
  absl::StatusOr<PlanRecord> Insert(const std::string& key, const graph::Graph& g,
                                    const search::SearchResult& r, const std::string& generation,
                                    const std::optional<ParallelSection>& parallel = std::nullopt,
                                    const std::string& cost_sources_json = "");

 private:
  Store* store_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_PLAN_CACHE_H_
