#include "server/task_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/op_cost.h"
#include "graph/text_format.h"
#include "nlohmann/json.hpp"

namespace braid::server {

namespace {

nlohmann::json ShapesJson(const graph::Graph& g, const std::vector<graph::TensorId>& ids) {
  nlohmann::json arr = nlohmann::json::array();
  for (graph::TensorId t : ids) {
    arr.push_back({std::string(graph::DTypeName(g.tensor(t).dtype)), g.tensor(t).shape});
  }
  return arr;
}

}  // namespace

graph::Graph SingleOpGraph(const graph::Graph& g, graph::OpId op_id) {
  // Every output of a lone op leaves it: the one-op group's graph.
  graph::Graph out = FusedGroupGraph(g, std::span<const graph::OpId>(&op_id, 1));
  out.set_name(g.op(op_id).name);
  return out;
}

graph::Graph FusedGroupGraph(const graph::Graph& g, std::span<const graph::OpId> ops) {
  std::vector<graph::OpId> members(ops.begin(), ops.end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  auto in_group = [&](graph::OpId o) {
    return o != graph::kNoId && std::binary_search(members.begin(), members.end(), o);
  };
  graph::Graph out(absl::StrCat("fused:", g.op(members.front()).name));
  std::map<graph::TensorId, graph::TensorId> ids;
  auto add = [&](graph::TensorId t) {
    auto it = ids.find(t);
    if (it != ids.end()) return it->second;
    const graph::Tensor& src = g.tensor(t);
    graph::TensorRole role = graph::TensorRole::kActivation;
    if (!in_group(src.producer)) {
      role = (src.role == graph::TensorRole::kParameter || src.role == graph::TensorRole::kConstant)
                 ? src.role
                 : graph::TensorRole::kInput;
    }
    graph::TensorId n = out.AddTensor(src.name, src.shape, src.dtype, role);
    ids.emplace(t, n);
    return n;
  };
  for (graph::OpId id : members) {
    const graph::Op& op = g.op(id);
    std::vector<graph::TensorId> ins, outs;
    for (graph::TensorId t : op.inputs) ins.push_back(add(t));
    for (graph::TensorId t : op.outputs) outs.push_back(add(t));
    graph::OpId n = out.AddOp(op.name, op.type, ins, outs, op.attrs, op.phase);
    graph::Op& copy = out.mutable_op(n);
    copy.flops = op.flops;
    copy.bytes_read = op.bytes_read;
    copy.bytes_written = op.bytes_written;
    copy.opaque = op.opaque;
  }
  for (graph::OpId id : members) {
    for (graph::TensorId t : g.op(id).outputs) {
      if (graph::LeavesGroup(g, t, in_group)) out.AddOutput(ids.at(t));
    }
  }
  return out;
}

TaskQueue::TaskQueue(Store* store, costmodel::ProfileStore* profiles, TaskQueueOptions options)
    : store_(store), profiles_(profiles), options_(std::move(options)) {}

absl::StatusOr<WorkerRecord> TaskQueue::Register(const std::string& name,
                                                 const std::string& device_kind, int slots) {
  if (device_kind.empty()) return absl::InvalidArgumentError("device_kind must be set");
  if (slots < 1) return absl::InvalidArgumentError(absl::StrCat("slots must be >= 1, got ", slots));
  if (name.size() > 256) return absl::InvalidArgumentError("name: longer than 256 bytes");
  WorkerRecord w{RandomId("worker-"), name, device_kind, slots, Now()};
  RETURN_IF_ERROR(store_->UpsertWorker(w));
  return w;
}

absl::StatusOr<WorkerRecord> TaskQueue::KnownWorker(const std::string& worker_id) {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id must be set");
  ASSIGN_OR_RETURN(std::optional<WorkerRecord> w, store_->GetWorker(worker_id));
  if (!w.has_value()) {
    return absl::NotFoundError(absl::StrCat("worker_id: unknown worker '", worker_id,
                                            "' (register again)"));
  }
  return *w;
}

absl::Status TaskQueue::Heartbeat(const std::string& worker_id) {
  ASSIGN_OR_RETURN(WorkerRecord w, KnownWorker(worker_id));
  w.last_heartbeat_unix_s = Now();
  return store_->UpsertWorker(w);
}

bool TaskQueue::HasLiveWorker(const std::string& device_kind) {
  absl::StatusOr<std::vector<std::string>> kinds =
      store_->LiveDeviceKinds(Now() - options_.worker_timeout_s);
  return kinds.ok() && std::find(kinds->begin(), kinds->end(), device_kind) != kinds->end();
}

absl::StatusOr<int> TaskQueue::CreateTasksForMisses(const graph::Graph& g,
                                                    const std::string& device_kind) {
  if (profiles_ == nullptr) return 0;
  std::set<std::pair<std::string, std::string>> seen;
  int created = 0;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    const graph::Op& op = g.op(id);
    if (costmodel::IsCommunicationOp(op) || op.opaque) continue;
    costmodel::ProfileKey key{device_kind, op.type, costmodel::OpSignature(g, id)};
    if (!seen.insert({key.op_type, key.signature}).second) continue;
    if (profiles_->GetOwn(key).has_value()) continue;  // shipped rows are re-measured here
    TaskRecord t;
    t.id = RandomId("task-");
    t.device_kind = device_kind;
    t.op_type = op.type;
    t.signature = key.signature;
    t.shapes_json =
        nlohmann::json{{"inputs", ShapesJson(g, op.inputs)}, {"outputs", ShapesJson(g, op.outputs)}}
            .dump();
    t.op_graph_text = graph::ToText(SingleOpGraph(g, id));
    ASSIGN_OR_RETURN(bool inserted, store_->InsertTaskIfAbsent(t));
    created += inserted ? 1 : 0;
  }
  return created;
}

absl::StatusOr<int> TaskQueue::CreateFusedTasks(const graph::Graph& g,
                                                const std::vector<std::vector<graph::OpId>>& groups,
                                                const std::string& device_kind) {
  if (profiles_ == nullptr) return 0;
  std::set<std::string> seen;
  int created = 0;
  for (const std::vector<graph::OpId>& ops : groups) {
    if (ops.size() < 2) continue;
    costmodel::ProfileKey key{device_kind, costmodel::kFusedOp, costmodel::FusedSignature(g, ops)};
    if (!seen.insert(key.signature).second) continue;
    if (profiles_->GetOwn(key).has_value()) continue;  // shipped rows are re-measured here
    const graph::Graph sub = FusedGroupGraph(g, ops);
    TaskRecord t;
    t.id = RandomId("task-");
    t.device_kind = device_kind;
    t.op_type = costmodel::kFusedOp;
    t.signature = key.signature;
    std::vector<graph::TensorId> ins;
    for (graph::TensorId id = 0; id < sub.num_tensors(); ++id) {
      if (sub.tensor(id).producer == graph::kNoId) ins.push_back(id);
    }
    t.shapes_json = nlohmann::json{{"inputs", ShapesJson(sub, ins)},
                                   {"outputs", ShapesJson(sub, sub.outputs())}}
                        .dump();
    t.op_graph_text = graph::ToText(sub);
    ASSIGN_OR_RETURN(bool inserted, store_->InsertTaskIfAbsent(t));
    created += inserted ? 1 : 0;
  }
  return created;
}

absl::StatusOr<std::vector<TaskRecord>> TaskQueue::Lease(const std::string& worker_id,
                                                         int max_tasks, double lease_s) {
  if (max_tasks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tasks must be >= 1, got ", max_tasks));
  }
  if (!(lease_s >= 0)) return absl::InvalidArgumentError("lease_s must be >= 0");
  ASSIGN_OR_RETURN(WorkerRecord w, KnownWorker(worker_id));
  const double now = Now();
  w.last_heartbeat_unix_s = now;
  RETURN_IF_ERROR(store_->UpsertWorker(w));
  RETURN_IF_ERROR(store_->RequeueExpired(now));
  const double length =
      std::min(lease_s == 0 ? options_.default_lease_s : lease_s, options_.max_lease_s);
  return store_->LeaseTasks(w.device_kind, worker_id,
                            std::min(max_tasks, options_.max_lease_tasks), now + length);
}

absl::StatusOr<bool> TaskQueue::Report(const std::string& worker_id, const std::string& task_id,
                                       const std::string& lease_id,
                                       const std::optional<costmodel::ProfileSample>& result,
                                       const std::string& error) {
  RETURN_IF_ERROR(KnownWorker(worker_id));
  if (task_id.empty()) return absl::InvalidArgumentError("task_id must be set");
  ASSIGN_OR_RETURN(TaskRecord t, store_->GetTask(task_id));
  if (t.state == TaskState::kDone || t.state == TaskState::kFailed) return true;
  if (result.has_value()) {
    // Bounds first (a worker token is not trust in the numbers): one
    // non-finite or absurd time in the profile store would reach every
    // later search that costs this op.
    if (!std::isfinite(result->median_s) || !(result->median_s > 0) ||
        result->median_s > costmodel::kMaxProfileSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "result.median_s must be in (0, ", costmodel::kMaxProfileSeconds, "] s, got ",
          result->median_s));
    }
    if (!std::isfinite(result->spread_s) || !(result->spread_s >= 0) ||
        result->spread_s > costmodel::kMaxProfileSeconds) {
      return absl::InvalidArgumentError(absl::StrCat("result.spread_s must be in [0, ",
                                                     costmodel::kMaxProfileSeconds, "] s, got ",
                                                     result->spread_s));
    }
    if (result->repetitions < 1 || result->repetitions > costmodel::kMaxProfileRepetitions) {
      return absl::InvalidArgumentError(absl::StrCat("result.repetitions must be in [1, ",
                                                     costmodel::kMaxProfileRepetitions, "], got ",
                                                     result->repetitions));
    }
    // Only the worker holding the task's current lease may finish it: a
    // result under an expired lease, or for a task leased to another
    // worker, is refused (the task is re-run by its current holder).
    if (t.state != TaskState::kLeased || t.lease_id != lease_id || t.worker_id != worker_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "task ", task_id, " is not leased to worker ", worker_id, " under lease '", lease_id,
          "' (", t.state == TaskState::kLeased ? "it is leased elsewhere or anew" : "its lease expired",
          "): result refused"));
    }
    if (profiles_ == nullptr) return absl::FailedPreconditionError("server has no profile store");
    // Profile first, then the task: a crash in between re-runs the task,
    // and Put of the same key is an overwrite.
    RETURN_IF_ERROR(profiles_->Put({t.device_kind, t.op_type, t.signature}, *result));
    t.state = TaskState::kDone;
    t.error.clear();
  } else {
    if (error.empty()) return absl::InvalidArgumentError("outcome: result or error must be set");
    if (t.state != TaskState::kLeased || t.lease_id != lease_id) return false;  // stale lease
    t.error = error;
    t.state = t.attempts >= options_.max_attempts ? TaskState::kFailed : TaskState::kQueued;
  }
  t.lease_id.clear();
  RETURN_IF_ERROR(store_->UpdateTask(t));
  return false;
}

absl::StatusOr<int> TaskQueue::RequeueExpired() { return store_->RequeueExpired(Now()); }

absl::StatusOr<int> TaskQueue::RequeueAllLeased() {
  return store_->RequeueExpired(std::numeric_limits<double>::infinity());
}

}  // namespace braid::server
