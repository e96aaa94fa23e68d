// The simulator's input: a task graph of compute and communication tasks with
// durations, resources and dependencies. The search lowers (training graph,
// plan) into a SimGraph; the simulator (costmodel/simulator.h) schedules it.
//
// Compute tasks run on a device's compute stream, chosen from its ready queue
// in FIFO order of readiness (DisCo §4.4). Communication tasks run on a channel
// in the order given by `comm_order` (the order their tensors are produced),
// each starting once its dependencies are done and its channel is free; they
// overlap compute. On CPU clusters a communication task may also slow compute
// (`compute_slowdown` of the device while it runs): Gloo's threads take cores.
//
//   SimGraph sg;
//   sg.num_devices = 1; sg.num_channels = 1;
//   int a = sg.AddCompute("fwd", 0, 1e-3);
//   int c = sg.AddComm("allreduce", 0, 2e-3, {a});
#ifndef BRAID_COSTMODEL_SIM_GRAPH_H_
#define BRAID_COSTMODEL_SIM_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/cost_model.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {

enum class TaskKind : uint8_t { kCompute, kComm };

struct SimTask {
  std::string name;
  TaskKind kind = TaskKind::kCompute;
  int resource = 0;          // device index (compute) or channel index (comm)
  double duration_s = 0;     // uncontended duration
  std::vector<int> deps;     // tasks that must finish first
  // Memory on `device` (for comm: the device whose buffer it is): bytes
  // allocated when the task starts and released when every task listed in
  // `release_after` has finished (or at once if that list is empty and
  // `persistent` is false). Persistent bytes (parameters, optimizer state)
  // count from the start of the iteration.
  int device = 0;
  int64_t alloc_bytes = 0;
  std::vector<int> release_after;
  bool persistent = false;
  // Free-form ids the lowering wants back in the timeline (graph op ids).
  std::vector<int32_t> op_ids;
  // Compute tasks: where duration_s came from (a measured profile, the
  // fused-op estimator, or the roofline prior), so a plan can say how much
  // of its predicted time rests on measurements.
  TimeSource source = TimeSource::kPrior;
};


struct SimGraph {
  int num_devices = 1;
  int num_channels = 1;
  // Slowdown factor of compute on a device while one of its comm tasks runs
  // (1.0 = no contention). Indexed by device; missing entries mean 1.0.
  std::vector<double> compute_slowdown;
  // Slowdown factor of a comm task whose `device` is d while d computes (CPU
  // collectives need cores too). Indexed by device; missing entries mean 1.0.
  std::vector<double> comm_slowdown;
  std::vector<SimTask> tasks;
  // Order in which comm tasks are issued per channel; tasks not listed are
  // issued in task-index order.
  std::vector<int> comm_order;
  // Bytes resident on each device before the iteration starts (parameters,
  // optimizer state), indexed by device.
  std::vector<int64_t> resident_bytes;

  int AddCompute(std::string name, int device, double duration_s, std::vector<int> deps = {});
  int AddComm(std::string name, int channel, double duration_s, std::vector<int> deps = {},
              int device = 0);
};

// Kernels (compute tasks of graph ops) of a simulated graph by the source of
// their time: how many, and how much of the predicted compute time (summed
// kernel durations, one device's view: every rank runs the same kernels).
struct KernelSources {
  int count[4] = {0, 0, 0, 0};       // by TimeSource
  double seconds[4] = {0, 0, 0, 0};  // by TimeSource
  int total() const { return count[0] + count[1] + count[2] + count[3]; }
  int of(TimeSource s) const { return count[static_cast<int>(s)]; }
  // Share of the predicted compute time from `s`, in [0, 1]; 0 for no kernels.
  double Share(TimeSource s) const;
};
KernelSources CountKernelSources(const SimGraph& g);
// Shares of predicted compute time by source with kernel counts
// ({"measured": 0.12, ..., "kernels": {"measured": 3, ...}}), and as one line
// ("measured 12.0%, gnn 0.0%, corrected_roofline 30.1%, prior 57.9%").
nlohmann::json KernelSourcesJson(const KernelSources& k);
std::string KernelSourcesLine(const KernelSources& k);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_SIM_GRAPH_H_
