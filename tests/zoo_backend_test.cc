// Every zoo model on every cluster preset: the plans braid and its baselines
// produce hold only groups the preset's fusion backend can run
// (costmodel::FusionBackend::CanImplement), checked group by group. The
// search is short (a few steps): its moves are what is checked, not its
// convergence; tests/plan_equivalence.sh runs the full search on disco-a.
#include <iostream>
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/fusion_backend.h"
#include "costmodel/op_cost.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "search/backtracking.h"
#include "search/validity.h"

namespace braid {
namespace {

int checked = 0;

void ExpectImplementable(const graph::Graph& g, const search::Plan& plan,
                         const costmodel::FusionBackend& backend, const std::string& what) {
  for (const search::FusionGroup& grp : plan.groups) {
    ++checked;
    absl::Status s = backend.CanImplement(g, grp.ops);
    EXPECT_TRUE(s.ok()) << what << ": " << s;
  }
  EXPECT_TRUE(search::ValidatePlan(g, plan, &backend).ok()) << what;
}

TEST(ZooBackendTest, EveryGroupOfEveryPlanIsImplementable) {
  for (const char* preset : {"disco-a", "disco-b", "summit", "dgx-h100", "cpu-local"}) {
    absl::StatusOr<costmodel::ClusterSpec> spec = costmodel::ClusterPreset(preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const costmodel::FusionBackend& backend = costmodel::BackendFor(*spec);
    for (const graph::ZooEntry& z : graph::ZooModels()) {
      absl::StatusOr<graph::Graph> fwd = graph::BuildZooModel(z.name);
      ASSERT_TRUE(fwd.ok()) << z.name << ": " << fwd.status();
      graph::TrainingOptions topts;
      topts.ranks = spec->num_ranks;
      absl::StatusOr<graph::Graph> g = graph::BuildTrainingGraph(*fwd, topts);
      ASSERT_TRUE(g.ok()) << z.name << ": " << g.status();
      absl::StatusOr<costmodel::CommModel> comm = costmodel::CommModelFromStore(*spec, nullptr);
      ASSERT_TRUE(comm.ok());
      costmodel::ClusterCostModel cm(*spec, nullptr, nullptr, *comm);
      search::SearchConfig cfg;
      cfg.max_steps = 3;
      cfg.patience = 3;
      cfg.seed = 1;
      absl::StatusOr<search::SearchResult> r = search::RunFusionSearch(*g, cm, cfg);
      ASSERT_TRUE(r.ok()) << z.name << " on " << preset << ": " << r.status();
      const std::string what = z.name + " on " + preset;
      ExpectImplementable(*g, r->plan, backend, what + " (braid)");
      ASSERT_TRUE(r->baselines.has_value());
      for (const search::EvaluatedPlan& b : r->baselines->baselines) {
        ExpectImplementable(*g, b.plan, backend, what + " (" + b.name + ")");
      }
    }
  }
  // Plans do fuse: the check is not over empty plans.
  EXPECT_GT(checked, 1000);
  std::cout << checked << " fused groups checked\n";
}

}  // namespace
}  // namespace braid
