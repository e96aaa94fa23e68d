#include "client/planning.h"

#include <cstdlib>
#include <filesystem>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <set>
#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/cost_check.h"
#include "costmodel/comm_model.h"
#include "graph/model_source.h"
#include "graph/training.h"

namespace braid::client {

std::string DefaultDatabasePath() {
  if (const char* db = std::getenv("BRAID_DB"); db != nullptr && *db != '\0') return db;
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    cache = absl::StrCat(home, "/.cache");
  } else {
    cache = "/tmp";
  }
  return absl::StrCat(cache, "/braid/braid.db");
}

absl::StatusOr<std::unique_ptr<PlanningContext>> Prepare(const PlanningRequest& req) {
  auto ctx = std::make_unique<PlanningContext>();
  ASSIGN_OR_RETURN(auto cluster, costmodel::LoadCluster(req.cluster));
  if (req.ranks > 0) {
    ASSIGN_OR_RETURN(cluster, costmodel::WithRanks(cluster, req.ranks));
  }
  ctx->cluster = std::move(cluster);

  graph::LoadOptions lo;
  lo.batch = req.batch;
  ASSIGN_OR_RETURN(auto fwd, graph::LoadModel(req.model, lo, &ctx->warnings));
  ctx->forward = std::move(fwd);

  graph::TrainingOptions topts;
  topts.ranks = ctx->cluster.num_ranks;
  if (req.optimizer == "adam") {
    topts.optimizer = graph::Optimizer::kAdam;
  } else if (req.optimizer != "sgd") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", req.optimizer, "' (sgd or adam)"));
  }
  ASSIGN_OR_RETURN(auto train, graph::BuildTrainingGraph(ctx->forward, topts));
  ctx->training = std::move(train);

  if (req.db != "none") {
    const std::string path = req.db.empty() ? DefaultDatabasePath() : req.db;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    ASSIGN_OR_RETURN(auto store, costmodel::ProfileStore::Open(path));
    ctx->store = std::move(store);
  }
  ASSIGN_OR_RETURN(auto comm, costmodel::CommModelFromStore(ctx->cluster, ctx->store.get()));
  costmodel::FusedOpEstimator* estimator = nullptr;
  if (req.estimator == "auto") {
    if (ctx->store != nullptr) {
      estimator = costmodel::FusedOpEstimatorFor(
          ctx->cluster, req.db.empty() ? DefaultDatabasePath() : req.db);
    }
  } else if (req.estimator != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--estimator must be auto or none, got '", req.estimator, "'"));
  }
  ctx->cost_model = std::make_unique<costmodel::ClusterCostModel>(
      ctx->cluster, ctx->store.get(), estimator, std::move(comm));
  RETURN_IF_ERROR(
      costmodel::CheckCostsFinite(ctx->training, *ctx->cost_model, ctx->cluster.num_ranks));
  return ctx;
}

std::vector<graph::OpId> ComputeOrder(const graph::Graph& g, const costmodel::SimGraph& sg,
                                      const costmodel::SimResult& r,
                                      const search::Plan* plan) {
  // A fused task is matched to its plan group by its op set.
  std::map<std::vector<graph::OpId>, const search::FusionGroup*> group_of;
  if (plan != nullptr) {
    for (const search::FusionGroup& grp : plan->groups) {
      if (grp.duplicated.empty()) continue;
      std::vector<graph::OpId> key = grp.ops;
      std::sort(key.begin(), key.end());
      group_of[key] = &grp;
    }
  }
  std::vector<int> compute;
  for (int t = 0; t < static_cast<int>(sg.tasks.size()); ++t) {
    if (sg.tasks[t].kind == costmodel::TaskKind::kCompute) compute.push_back(t);
  }
  std::stable_sort(compute.begin(), compute.end(),
                   [&](int a, int b) { return r.start_s[a] < r.start_s[b]; });
  // Units: each task's ops without its duplicated copies, in start order.
  std::vector<std::vector<graph::OpId>> units;
  for (int t : compute) {
    const std::vector<int32_t>& ids = sg.tasks[t].op_ids;
    const search::FusionGroup* grp = nullptr;
    if (ids.size() > 1 && !group_of.empty()) {
      std::vector<graph::OpId> key(ids.begin(), ids.end());
      std::sort(key.begin(), key.end());
      auto it = group_of.find(key);
      if (it != group_of.end()) grp = it->second;
    }
    std::vector<graph::OpId> unit;
    for (int32_t op : ids) {
      if (grp != nullptr &&
          std::find(grp->duplicated.begin(), grp->duplicated.end(), op) != grp->duplicated.end()) {
        continue;
      }
      unit.push_back(op);
    }
    if (!unit.empty()) units.push_back(std::move(unit));
  }
  // A group that recomputes a duplicated op does not wait for that op's home
  // in the simulation, but the executor runs the op once, at its home: a
  // unit reading what another unit produces must come after it. Units are
  // emitted in start order, each as soon as the units it reads from are out.
  std::unordered_map<graph::OpId, int> unit_of;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    for (graph::OpId op : units[u]) unit_of[op] = u;
  }
  std::vector<std::vector<int>> readers(units.size());
  std::vector<int> waiting(units.size(), 0);
  if (!units.empty()) {
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      std::set<int> from;
      for (graph::OpId op : units[u]) {
        for (graph::TensorId t : g.op(op).inputs) {
          const graph::OpId p = g.tensor(t).producer;
          auto it = p == graph::kNoId ? unit_of.end() : unit_of.find(p);
          if (it != unit_of.end() && it->second != u) from.insert(it->second);
        }
      }
      waiting[u] = static_cast<int>(from.size());
      for (int f : from) readers[f].push_back(u);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (waiting[u] == 0) ready.push(u);
  }
  std::vector<graph::OpId> order;
  while (!ready.empty()) {
    const int u = ready.top();
    ready.pop();
    order.insert(order.end(), units[u].begin(), units[u].end());
    for (int r2 : readers[u]) {
      if (--waiting[r2] == 0) ready.push(r2);
    }
  }
  return order;
}

}  // namespace braid::client
