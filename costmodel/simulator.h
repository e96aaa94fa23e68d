// The event simulator (DisCo §4.4, generalized to several devices and
// channels): schedules a SimGraph and reports the iteration time and its
// breakdown.
//
//   SimResult r = Simulate(sim_graph);
//   std::string trace = ChromeTrace(sim_graph, r);  // Perfetto / chrome://tracing
//
// IncrementalSimulator keeps the event log of the last run so that after a
// local change the search re-simulates from the first affected event.
#ifndef BRAID_COSTMODEL_SIMULATOR_H_
#define BRAID_COSTMODEL_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/sim_graph.h"

namespace braid::costmodel {

struct SimResult {
  double iteration_s = 0;     // makespan
  double compute_s = 0;       // sum of compute busy time (max over devices)
  double comm_s = 0;          // sum of comm busy time (max over channels)
  double overlap_ratio = 0;   // (compute_s + comm_s) / iteration_s (DisCo §6.3)
  std::vector<int64_t> peak_memory_bytes;  // per device
  std::vector<int> critical_path;          // task ids, first to last
  std::vector<double> start_s;             // per task
  std::vector<double> end_s;               // per task
};

SimResult Simulate(const SimGraph& g);

// DisCo §6.2's fully-overlapped bound: compute and communication overlapped
// completely, ignoring their dependencies: max over resources of busy time.
double FullyOverlappedTime(const SimGraph& g);

// Chrome trace-event JSON of a simulated iteration.
std::string ChromeTrace(const SimGraph& g, const SimResult& r);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_SIMULATOR_H_
