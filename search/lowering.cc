#include "search/lowering.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops.h"

namespace braid::search {

using costmodel::Collective;
using graph::Graph;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;

absl::StatusOr<Collective> CollectiveOf(const graph::Op& op) {
  switch (op.kind) {
    case graph::OpKind::kAllReduce:
      return Collective::kAllReduce;
    case graph::OpKind::kAllGather:
      return Collective::kAllGather;
    case graph::OpKind::kReduceScatter:
      return Collective::kReduceScatter;
    case graph::OpKind::kBroadcast:
      return Collective::kBroadcast;
    case graph::OpKind::kAllToAll:
      return Collective::kAllToAll;
    case graph::OpKind::kSend:
    case graph::OpKind::kRecv:
      return Collective::kSendRecv;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("op '", op.name, "' (type ", op.type, ") is not a collective"));
}

namespace {

absl::StatusOr<int> GroupSizeOf(const graph::Op& op) {
  const int64_t n = op.GetInt("group_size", -1);
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("communication op '", op.name, "' has no positive 'group_size' attribute"));
  }
  return static_cast<int>(n);
}

std::string TaskName(const Graph& g, const Plan& plan, const TaskNode& n) {
  switch (n.kind) {
    case TaskNode::Kind::kGroup:
      return n.ops.size() == 1
                 ? absl::StrCat("fused:", g.op(n.ops[0]).name)
                 : absl::StrCat("fused:", g.op(n.ops[0]).name, "+", n.ops.size() - 1);
    case TaskNode::Kind::kOp:
      return g.op(n.index).name;
    case TaskNode::Kind::kBucket:
      return absl::StrCat("allreduce.bucket", n.index, "(", plan.buckets[n.index].grads.size(),
                          " grads)");
  }
  return "?";
}

}  // namespace

int64_t ResidentBytes(const Graph& g) {
  int64_t resident = 0;
  for (const graph::Tensor& t : g.tensors()) {
    if (t.role == TensorRole::kParameter || t.role == TensorRole::kOptimizerState ||
        t.role == TensorRole::kInput || t.role == TensorRole::kConstant) {
      resident += t.Bytes();
    }
  }
  return resident;
}

absl::StatusOr<costmodel::SimGraph> LowerContraction(const Graph& g, const Plan& plan,
                                                     const Contraction& c,
                                                     costmodel::CostModel& cm,
                                                     std::vector<int>* node_task_out,
                                                     const LowerOptions& options) {
  costmodel::SimGraph sg;
  sg.num_devices = 1;
  sg.num_channels = 1;
  sg.compute_slowdown = {cm.ComputeSlowdownDuringComm()};
  sg.comm_slowdown = {cm.CommSlowdownDuringCompute()};
  sg.resident_bytes = {options.resident_bytes >= 0 ? options.resident_bytes : ResidentBytes(g)};

  const int nn = static_cast<int>(c.nodes.size());
  std::vector<int> node_task(nn, -1);
  std::vector<int> pack_task(nn, -1);  // per bucket node with a packing copy
  std::vector<int> other_comm;
  sg.tasks.reserve(nn);
  int visited = 0;
  for (int ni : c.order) {
    if (options.stop != nullptr && visited++ % LowerOptions::kStopPollTasks == 0 &&
        options.stop->StopRequested()) {
      return options.stop->ToStatus("lowering");
    }
    const TaskNode& n = c.nodes[ni];
    std::string name = options.task_names ? TaskName(g, plan, n) : std::string();
    int task = -1;
    if (n.kind == TaskNode::Kind::kBucket) {
      int64_t bytes = 0;
      // Bytes per group size: gradients whose weights are replicated over
      // different data groups (a parallel plan mixing data degrees) cannot
      // share one collective; the bucket issues one per group, back to back.
      // Keyed by (group size, devices the group lives among: 0 = all).
      std::map<std::pair<int, int>, int64_t> by_group;
      for (OpId ar : n.ops) {
        ASSIGN_OR_RETURN(int gs, GroupSizeOf(g.op(ar)));
        const int devices = static_cast<int>(g.op(ar).GetInt("group_devices", 0));
        const int64_t b = g.tensor(g.op(ar).inputs[0]).Bytes();
        by_group[{gs, devices}] += b;
        bytes += b;
      }
      if (const double pack = cm.BucketPackTime(bytes); pack > 0) {
        pack_task[ni] = sg.AddCompute(options.task_names ? "pack." + name : std::string(), 0, pack);
      }
      double secs = 0;
      for (const auto& [key, b] : by_group) {
        const auto [gs, devices] = key;
        secs += devices > 0 ? cm.CollectiveTimeOnDevices(Collective::kAllReduce, b, gs, devices)
                            : cm.CollectiveTime(Collective::kAllReduce, b, gs);
      }
      task = sg.AddComm(std::move(name), 0, secs);
    } else if (n.kind == TaskNode::Kind::kOp &&
               graph::IsCollectiveKind(g.op(n.index).kind)) {
      const graph::Op& op = g.op(n.index);
      ASSIGN_OR_RETURN(Collective kind, CollectiveOf(op));
      ASSIGN_OR_RETURN(int gs, GroupSizeOf(op));
      // nccl-tests' buffer (comm_model.h): the gathered output of an
      // AllGather, the input of the others.
      int64_t bytes = 0;
      for (TensorId t : kind == Collective::kAllGather ? op.outputs : op.inputs) bytes += g.tensor(t).Bytes();
      // A collective of a per-device graph (search/parallel_graph.h) carries
      // its time on the links its group really uses.
      const double priced = op.GetFloat("comm_time_s", -1);
      // Collectives other than the gradient buckets (a tensor-parallel
      // group's, in a per-device graph) run on a channel of their own, as
      // frameworks give each process group its own stream/communicator: they
      // do not queue behind the data-parallel buckets.
      task = sg.AddComm(std::move(name), 1,
                        priced >= 0 ? priced : cm.CollectiveTime(kind, bytes, gs));
      sg.num_channels = 2;
      other_comm.push_back(task);
    } else {
      const costmodel::OpTime t = cm.ComputeTime(g, n.ops);
      // The runtime's own time per node, where measured.
      task = sg.AddCompute(std::move(name), 0, t.seconds + cm.NodeOverheadSeconds());
      sg.tasks[task].source = t.source;
    }
    node_task[ni] = task;
    costmodel::SimTask& st = sg.tasks[task];
    st.device = 0;
    st.op_ids.assign(n.ops.begin(), n.ops.end());
  }
  for (int ni = 0; ni < nn; ++ni) {
    const TaskNode& n = c.nodes[ni];
    costmodel::SimTask& st = sg.tasks[node_task[ni]];
    for (int d : n.deps) st.deps.push_back(node_task[d]);
    std::sort(st.deps.begin(), st.deps.end());
    if (pack_task[ni] >= 0) {  // the copy waits for the gradients, the collective for the copy
      sg.tasks[pack_task[ni]].deps = std::move(st.deps);
      st.deps = {pack_task[ni]};
    }
    if (n.kind == TaskNode::Kind::kBucket) continue;  // in place: no new buffer
    for (TensorId t : n.materialized) st.alloc_bytes += g.tensor(t).Bytes();
    for (int r : n.readers) {
      if (c.nodes[r].kind == TaskNode::Kind::kBucket && !c.nodes[r].readers.empty()) {
        for (int rr : c.nodes[r].readers) st.release_after.push_back(node_task[rr]);
      } else {
        st.release_after.push_back(node_task[r]);
      }
    }
    std::sort(st.release_after.begin(), st.release_after.end());
    st.release_after.erase(std::unique(st.release_after.begin(), st.release_after.end()),
                           st.release_after.end());
  }
  for (int bn : c.bucket_node) sg.comm_order.push_back(node_task[bn]);
  sg.comm_order.insert(sg.comm_order.end(), other_comm.begin(), other_comm.end());
  if (node_task_out != nullptr) *node_task_out = std::move(node_task);
  return sg;
}

absl::StatusOr<costmodel::SimGraph> Lower(const Graph& g, const Plan& plan,
                                          costmodel::CostModel& cm) {
  ASSIGN_OR_RETURN(Contraction c, Contract(g, plan, cm.fusion_backend()));
  return LowerContraction(g, plan, c, cm);
}

}  // namespace braid::search
