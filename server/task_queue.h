// Profiling tasks and the workers that run them. A task asks for the time of
// one op (device kind, op type, OpSignature) that the profile store lacks; it
// is created when a job's cost look-ups miss the store for a device kind that
// has a live remote worker (no worker: no task; the embedded CPU worker
// profiles in-process, outside this queue). Workers lease tasks with a
// deadline; an expired lease goes back to the queue, so delivery is at least
// once, and ReportResult is idempotent: a second report of a finished task is
// acknowledged as a duplicate and changes nothing.
//
//   TaskQueue q(store, profiles, {});
//   WorkerRecord w = *q.Register("gpu-node-3", "cuda:NVIDIA H100 80GB HBM3", 1);
//   int created = *q.CreateTasksForMisses(train_graph, w.device_kind);
//   std::vector<TaskRecord> leased = *q.Lease(w.id, 4, 60);
//   bool dup = *q.Report(w.id, leased[0].id, leased[0].lease_id, sample, "");
#ifndef BRAID_SERVER_TASK_QUEUE_H_
#define BRAID_SERVER_TASK_QUEUE_H_

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "server/store.h"

namespace braid::server {

struct TaskQueueOptions {
  double default_lease_s = 60;
  double max_lease_s = 600;
  double heartbeat_interval_s = 10;
  // A worker without a heartbeat (or lease call) for this long is not live:
  // no new tasks are created for its device kind.
  double worker_timeout_s = 30;
  int max_attempts = 3;  // failed measurements before a task is given up
  int max_lease_tasks = 64;
  // Unix seconds; tests inject a fake clock.
  std::function<double()> clock;
};

// The op alone as a graph (op 0), its inputs as graph inputs (parameters and
// constants keep their role), its outputs as activations.
graph::Graph SingleOpGraph(const graph::Graph& g, graph::OpId op);

// A fused group alone as a graph: its ops in id order, the tensors it reads
// from outside as inputs (parameters and constants keep their role), and
// every tensor it writes that is read outside the group (or is a graph
// output, or is never read) as a graph output, so that
// costmodel::FusedSignature of the whole subgraph equals the group's.
graph::Graph FusedGroupGraph(const graph::Graph& g, std::span<const graph::OpId> ops);

class TaskQueue {
 public:
  // `store` and `profiles` must outlive the queue.
  TaskQueue(Store* store, costmodel::ProfileStore* profiles, TaskQueueOptions options);

  // InvalidArgument naming device_kind / slots.
  absl::StatusOr<WorkerRecord> Register(const std::string& name, const std::string& device_kind,
                                        int slots);
  absl::Status Heartbeat(const std::string& worker_id);  // NotFound for unknown ids
  bool HasLiveWorker(const std::string& device_kind);

  // One task per distinct (op type, signature) of the graph's compute ops
  // that the profile store lacks for `device_kind`; returns how many were new.
  absl::StatusOr<int> CreateTasksForMisses(const graph::Graph& g, const std::string& device_kind);
  // One fused-op task (op type costmodel::kFusedOp, key FusedSignature) per
  // distinct group the profile store lacks for `device_kind`: the fused
  // kernels of a plan, measured by workers so that later plans cost them
  // from measurements. Returns how many were new.
  absl::StatusOr<int> CreateFusedTasks(const graph::Graph& g,
                                       const std::vector<std::vector<graph::OpId>>& groups,
                                       const std::string& device_kind);

  // Re-queues expired leases, then leases up to max_tasks queued tasks of the
  // worker's device kind for lease_s (0: default; capped at max_lease_s).
  absl::StatusOr<std::vector<TaskRecord>> Lease(const std::string& worker_id, int max_tasks,
                                                double lease_s);
  // `result` set: stores the sample in the profile store and finishes the
  // task. Accepted only from `worker_id` holding the task's current lease
  // `lease_id` (FailedPrecondition otherwise) and only with a finite time
  // within costmodel::kMaxProfileSeconds (InvalidArgument otherwise).
  // `result` empty: a failure report; counts only from the current lease.
  // Returns true when the task was already finished (duplicate report).
  absl::StatusOr<bool> Report(const std::string& worker_id, const std::string& task_id,
                              const std::string& lease_id,
                              const std::optional<costmodel::ProfileSample>& result,
                              const std::string& error);
  absl::StatusOr<int> RequeueExpired();
  // At server start: every lease was granted by a previous process.
  absl::StatusOr<int> RequeueAllLeased();

  const TaskQueueOptions& options() const { return options_; }

 private:
  double Now() const { return options_.clock ? options_.clock() : NowUnixSeconds(); }
  absl::StatusOr<WorkerRecord> KnownWorker(const std::string& worker_id);

  Store* store_;
  costmodel::ProfileStore* profiles_;
  TaskQueueOptions options_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_TASK_QUEUE_H_
