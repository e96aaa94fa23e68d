// braid-torch's pricing of `braid plan --parallel` strategies as cpu-local's
// Gloo ranks execute them (client/cli.h LocalExecutedCost).
#include <atomic>
#include <iostream>
#include <thread>

#include "client/cli.h"
#include "worker/parallel_plan_exec.h"
#include "worker/parallel_predict.h"

namespace braid::client {

// The kernels a strategy's ranks run, profiled into `store` when it lacks
// them: first every kernel by itself (ProfileExecutedOps: also the loss,
// update and noise keys), with a second thread profiling the same kernels
// into a scratch overlay meanwhile (on cpu-local the ranks compute side by
// side, and a kernel beside another ran about 2x slower than alone), as
// braid-parallel-measure's co-runner does; then a few training steps of the
// strategy on its ranks with every op clocked, whose in-step times replace
// the ops' (ProfileInSteps: inside the steps they run 5-20% longer).
search::ExecutedCostFn LocalExecutedCost(const costmodel::ClusterSpec& cluster,
                                         costmodel::CostModel& cm, costmodel::ProfileStore& store) {
  auto profile = [&cluster, &store](const worker::ParallelTrainSpec& spec) -> absl::Status {
    std::cerr << "braid: profiling the kernels of " << spec.data_degree << " x "
              << spec.model_degree
              << (spec.pipeline_stages > 1 ? " (pipeline)" : "")
              << " beside a co-runner, then in a few steps on its ranks\n";
    std::atomic<bool> stop{false};
    std::thread co([&] {
      costmodel::OverlayProfileStore scratch(store);
      worker::ExecutedProfileOptions once;
      once.passes = 1;
      while (!stop.load()) {
        if (!worker::ProfileExecutedOps(spec, cluster, scratch, once).ok()) return;
      }
    });
    absl::Status st = worker::ProfileExecutedOps(spec, cluster, store);
    stop.store(true);
    co.join();
    if (!st.ok()) return st;
    return worker::ProfileInSteps(spec, cluster, store);
  };
  return worker::ExecutedPlanCost(cluster, cm, &store, profile);
}

}  // namespace braid::client
