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
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  // Tasks that never ran because of a dependency cycle or a comm_order that
  // contradicts the dependencies; iteration_s is +inf then, and their
  // start_s/end_s are +inf. 0 for a valid graph.
  int unfinished_tasks = 0;
};

// Scheduling rules (sim_graph.h): per device one compute stream taking the head
// of a FIFO ready queue (tasks enter it when their last dependency finishes,
// in the order those finish events are processed: by time, then task index,
// then the finishing task's successor order; tasks without dependencies enter
// at time 0 in index order). Per channel, comm tasks are issued in the order
// of `comm_order` (its entries on that channel first, then the channel's
// unlisted comm tasks in index order), each starting once its dependencies are
// done and the previous one in that order has finished. While at least one
// comm task whose `device` is d runs, compute on d progresses at
// 1/compute_slowdown[d] of its speed (rates are piecewise constant; the
// factor does not compound for concurrent collectives); symmetrically, while
// d runs a compute task, the comm tasks whose `device` is d progress at
// 1/comm_slowdown[d] (CPU ranks: computing and reducing share the cores).
// compute_s and comm_s are wall-clock busy times, so they include the slowdowns.
// Memory: a non-persistent task's bytes are held from its start until it and
// every task in its release_after have finished; persistent bytes and
// resident_bytes are held all iteration.
// Critical path: from the last-finishing task (lowest index on ties), each
// step goes to the dependency whose finish made the task ready if the task
// started right then, else to the task that last held its stream/channel.
// Times: the simulator computes in integer ticks of 2^-e s, e chosen per graph
// so that the whole schedule fits in 2^60 ticks (for a 1 s iteration a tick is
// below 1e-18 s); each duration is rounded to a tick once and every reported
// time is the exact tick sum rounded once to double. Durations and slowdowns
// must be finite.
// Malformed ids are programmer bugs (CHECK); ValidateSimGraph gives a Status.

SimResult Simulate(const SimGraph& g);

// Chrome trace-event JSON of a simulated iteration: one complete ("X") event
// per finished task (pid = device, tid 0 = compute stream, tid 1+c = channel
// c; args: task index and op_ids), plus thread-name metadata events.
std::string ChromeTrace(const SimGraph& g, const SimResult& r);

// InvalidArgument naming the first bad task: resource/device/dependency ids
// out of range, negative durations or bytes, comm_order entries that are not
// comm tasks or repeat, a dependency cycle, or a comm_order that makes a
// channel wait for a task that depends on a later task of that channel.
absl::Status ValidateSimGraph(const SimGraph& g);

namespace internal {
class SimEngine;
}

// Re-simulates after local changes, replaying from the first step of the last
// run that the changed tasks affect, and only until the replayed state equals
// a recorded one shifted by a constant time (sim_engine_replay.cc); the rest
// of the recording, shifted, is reused. The result equals Simulate(changed)
// bit for bit. The cost is the replayed steps plus a few O(tasks) passes:
// typically a change converges as soon as the changed task has finished,
// unless a collective backlog or compute slowdown carries its effect further.
//
//   IncrementalSimulator sim(sg);            // full run, recorded
//   sg.tasks[42].duration_s = 3e-3;
//   SimResult r = sim.Resimulate(sg, {42});  // == Simulate(sg)
class IncrementalSimulator {
 public:
  explicit IncrementalSimulator(const SimGraph& g);
  ~IncrementalSimulator();
  IncrementalSimulator(const IncrementalSimulator&) = delete;
  IncrementalSimulator& operator=(const IncrementalSimulator&) = delete;

  // `changed` must equal the graph of the last run except for the tasks in
  // `changed_tasks` (any field may change). A change that alters the task
  // count, devices, channels, comm_order, compute_slowdown, comm_slowdown, resident_bytes or
  // a task's kind or comm channel falls back to a full (recorded) run.
  SimResult Resimulate(const SimGraph& changed, std::span<const int> changed_tasks);
  SimResult Resimulate(const SimGraph& changed, std::initializer_list<int> changed_tasks) {
    return Resimulate(changed, std::span<const int>(changed_tasks.begin(), changed_tasks.size()));
  }
  // Finds the changed tasks by comparing with the last graph (O(graph)).
  SimResult Resimulate(const SimGraph& changed);

  const SimResult& result() const { return result_; }
  // Steps of the last run and how many of them the last call simulated.
  int total_steps() const;
  int replayed_steps() const { return replayed_steps_; }

 private:
  SimResult Full(const SimGraph& g);

  std::unique_ptr<internal::SimEngine> engine_;
  SimGraph last_;  // kept for the compatibility checks and the diffing overload
  SimResult result_;
  int replayed_steps_ = 0;
};
}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_SIMULATOR_H_
