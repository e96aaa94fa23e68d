// The simulator's time of a per-device program (graph/program.h) as the
// runtime runs it: the program's own graph, its fusion groups as fused
// kernels, its gradient buckets one AllReduce each (in the order their last
// gradient is made), every other gradient AllReduce alone, and its
// tensor-parallel collectives on their own channel (search/lowering.h).
// Collectives are priced by the cost model's communication model: the
// comm_time_s the planner's per-device graph left on them is dropped.
//
//   ASSIGN_OR_RETURN(ProgramSimulation s, SimulateProgram(program, cost_model));
//   // s.result.iteration_s, s.result.compute_s, s.result.comm_s; s.plan
#ifndef BRAID_SEARCH_PROGRAM_SIM_H_
#define BRAID_SEARCH_PROGRAM_SIM_H_

#include <string>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "costmodel/sim_graph.h"
#include "costmodel/simulator.h"
#include "graph/program.h"
#include "search/plan.h"

namespace braid::search {

struct ProgramSimulation {
  costmodel::SimResult result;
  Plan plan;  // the program's groups and buckets on its graph
  // Why the program's fusion groups were not all priced as fused kernels
  // (the cost model's fusion backend refused one: then none are); empty
  // when they were.
  std::string groups_note;
  // Where its kernels' times came from (measured, GNN, roofline, prior).
  costmodel::KernelSources sources;
};

// InvalidArgument when a group or bucket names an op the graph lacks.
absl::StatusOr<ProgramSimulation> SimulateProgram(const graph::Program& p, costmodel::CostModel& cm);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PROGRAM_SIM_H_
