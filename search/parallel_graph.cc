#include "search/parallel_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops.h"
#include "graph/parallel_ops.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::ParallelOp;
using graph::ParallelOpKind;
using graph::ParallelTensorShape;
using graph::TensorId;
using graph::TensorRole;

std::string CollectiveOpType(costmodel::Collective c) {
  switch (c) {
    case costmodel::Collective::kAllReduce: return "AllReduce";
    case costmodel::Collective::kAllGather: return "AllGather";
    case costmodel::Collective::kReduceScatter: return "ReduceScatter";
    case costmodel::Collective::kBroadcast: return "Broadcast";
    case costmodel::Collective::kAllToAll: return "AllToAll";
    case costmodel::Collective::kSendRecv: return "Send";
  }
  return "AllReduce";
}

class Builder {
 public:
  Builder(const Graph& fwd, const costmodel::ClusterSpec& cluster, PerDeviceGraph& out)
      : fwd_(fwd), cluster_(cluster), out_(out) {}

  // The per-device tensor holding `t` in layout `want`, for a consumer on the
  // [d, m] view.
  absl::StatusOr<TensorId> Need(TensorId t, const ParallelTensorShape& want, int d, int m) {
    const std::string key = graph::ParallelShapeString(want);
    if (auto it = avail_.find({t, key}); it != avail_.end()) return it->second;
    const graph::Tensor& src = fwd_.tensor(t);
    auto held = held_.find(t);
    if (held == held_.end()) {
      ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(want));
      if (src.role == TensorRole::kActivation) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", src.name, " is read before its producer ran"));
      }
      if (src.role == TensorRole::kInput) {
        // Every device reads its own piece of the batch: one input per layout.
        const bool first = inputs_seen_.insert(t).second;
        const std::string name = first ? src.name : absl::StrCat(src.name, "@", key);
        TensorId id = out_.forward.AddTensor(name, std::move(piece), src.dtype, src.role);
        avail_[{t, key}] = id;
        return id;
      }
      // A parameter or constant exists once, in its first consumer's layout.
      TensorId id = out_.forward.AddTensor(src.name, std::move(piece), src.dtype, src.role);
      held_.emplace(t, Held{want, false, id});
      avail_[{t, key}] = id;
      return id;
    }
    const Held h = held->second;
    ASSIGN_OR_RETURN(Transition tr,
                     LayoutTransition(h.layout, want,
                                      h.partial ? ReplicaKind::kPartialSums : ReplicaKind::kCopies));
    ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, TransitionComm(tr));
    // Walk the parallel ops: a step's ops become one collective; ops in no
    // step move nothing (a Partition of copies: local slicing).
    std::vector<int> step_of(tr.ops.size(), -1);
    for (size_t s = 0; s < steps.size(); ++s)
      for (int k = 0; k < steps[s].num_ops; ++k) step_of[steps[s].first_op + k] = static_cast<int>(s);
    ParallelTensorShape cur = tr.start;
    TensorId cur_id = h.id;
    ASSIGN_OR_RETURN(std::vector<int64_t> cur_piece, graph::PieceShape(cur));
    if (cur_piece != out_.forward.tensor(cur_id).shape) {
      // Copies the target does not need were dropped: a local slice.
      ASSIGN_OR_RETURN(cur_id, Slice(src, cur_id, cur_piece));
    }
    size_t k = 0;
    while (k < tr.ops.size()) {
      const int s = step_of[k];
      const size_t n = s >= 0 ? static_cast<size_t>(steps[s].num_ops) : 1;
      ASSIGN_OR_RETURN(ParallelTensorShape next,
                       graph::ApplyParallelOps(std::span<const ParallelOp>(&tr.ops[k], n), cur));
      ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(next));
      if (s >= 0) {
        const costmodel::CollectiveStep& step = steps[s];
        ASSIGN_OR_RETURN(double secs, ViewTransitionStepTime(cluster_, d, m, tr, step));
        const std::string name = absl::StrCat(src.name, ".", CollectiveOpType(step.collective),
                                              ".", ++counter_);
        TensorId y = out_.forward.AddTensor(name, std::move(piece), src.dtype,
                                            TensorRole::kActivation);
        OpId op = out_.forward.AddOp(name, CollectiveOpType(step.collective), {cur_id}, {y},
                                     {{"group_size", static_cast<int64_t>(step.group_size)},
                                      {"comm_time_s", secs}},
                                     graph::Phase::kForward);
        graph::AnnotateCost(out_.forward, op);
        ++out_.collectives;
        out_.forward_comm_s += secs;
        cur_id = y;
      } else if (piece != out_.forward.tensor(cur_id).shape) {
        ASSIGN_OR_RETURN(cur_id, Slice(src, cur_id, piece));
      }
      cur = std::move(next);
      k += n;
    }
    avail_[{t, key}] = cur_id;
    return cur_id;
  }

  // The per-device tensor holding `t` as produced here, if any.
  std::optional<TensorId> HeldId(TensorId t) const {
    auto it = held_.find(t);
    if (it == held_.end()) return std::nullopt;
    return it->second.id;
  }
  // `id` holds `t` in layout `want` (brought there by the caller).
  void Provide(TensorId t, const ParallelTensorShape& want, TensorId id) {
    avail_[{t, graph::ParallelShapeString(want)}] = id;
  }

  void Produced(TensorId t, const ParallelTensorShape& layout, bool partial, TensorId id) {
    held_[t] = Held{layout, partial, id};
    // Partial sums are no layout a consumer reads (inputs hold copies).
    if (!partial) avail_[{t, graph::ParallelShapeString(layout)}] = id;
  }

 private:
  struct Held {
    ParallelTensorShape layout;
    bool partial = false;
    TensorId id = graph::kNoId;
  };

  // Local slicing of `x` to `piece` (the leading part of each shrunk dim:
  // what one device keeps; every device keeps its own, at the same cost).
  absl::StatusOr<TensorId> Slice(const graph::Tensor& src, TensorId x,
                                 const std::vector<int64_t>& piece) {
    const std::vector<int64_t> xs = out_.forward.tensor(x).shape;
    if (xs.size() != piece.size()) {
      return absl::InternalError(absl::StrCat("slice of ", src.name, " changes its rank"));
    }
    std::vector<int64_t> starts, ends, axes;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] == piece[i]) continue;
      axes.push_back(static_cast<int64_t>(i));
      starts.push_back(0);
      ends.push_back(piece[i]);
    }
    const std::string name = absl::StrCat(src.name, ".slice.", ++counter_);
    TensorId y = out_.forward.AddTensor(name, piece, src.dtype, TensorRole::kActivation);
    OpId op = out_.forward.AddOp(name, "Slice", {x}, {y},
                                 {{"starts", starts}, {"ends", ends}, {"axes", axes}},
                                 graph::Phase::kForward);
    graph::AnnotateCost(out_.forward, op);
    ++out_.slices;
    return y;
  }

  const Graph& fwd_;
  const costmodel::ClusterSpec& cluster_;
  PerDeviceGraph& out_;
  std::map<TensorId, Held> held_;
  std::map<std::pair<TensorId, std::string>, TensorId> avail_;
  std::set<TensorId> inputs_seen_;
  int counter_ = 0;
};

}  // namespace

absl::StatusOr<PerDeviceGraph> BuildPerDeviceForward(const graph::Graph& forward,
                                                     const costmodel::ClusterSpec& cluster,
                                                     const ParallelizeResult& r,
                                                     const StopToken& stop) {
  constexpr int kStopPollOps = 256;
  std::map<OpId, const OpParallelization*> by_op;
  for (const OpParallelization& o : r.ops) by_op[o.op] = &o;
  // Strands side by side: the graph is the program of the device whose
  // strands take longest (the others wait for it at the AllToAll), among
  // the devices running a strand of every block.
  int device = -1;
  if (!r.strand_blocks.empty()) {
    std::map<int, double> load;
    std::map<int, std::set<std::string>> blocks_on;  // device -> sinks of its strands
    std::map<OpId, std::string> sink_of;            // strand op -> its block's sink
    for (const StrandBlock& blk : IndependentStrands(forward))
      for (const std::vector<OpId>& st : blk.strands)
        for (OpId op : st) sink_of[op] = forward.op(blk.sink).name;
    for (const OpParallelization& o : r.ops) {
      if (o.num_devices <= 0) continue;
      for (int dv = o.first_device; dv < o.first_device + o.num_devices; ++dv) {
        load[dv] += o.compute_s + o.grad_sync_s;
        if (auto it = sink_of.find(o.op); it != sink_of.end()) blocks_on[dv].insert(it->second);
      }
    }
    for (const auto& [dv, l] : load) {
      if (blocks_on[dv].size() != r.strand_blocks.size()) continue;
      if (device < 0 || l > load[device]) device = dv;
    }
    if (device < 0) {
      return absl::UnimplementedError(
          "strands side by side: no device runs a strand of every block, so no one device's "
          "program stands for the plan");
    }
  }
  auto here = [&](const OpParallelization& o) {
    return o.num_devices <= 0 ||
           (device >= o.first_device && device < o.first_device + o.num_devices);
  };
  PerDeviceGraph out;
  out.forward = Graph(absl::StrCat(forward.name(), ".device"));
  ASSIGN_OR_RETURN(std::vector<OpId> order, forward.TopologicalOrder());
  Builder b(forward, cluster, out);
  int degree = 1;
  int visited = 0;
  for (OpId id : order) {
    if (visited++ % kStopPollOps == 0 && stop.StopRequested()) {
      return stop.ToStatus("per-device graph");
    }
    const graph::Op& op = forward.op(id);
    auto it = by_op.find(id);
    if (it == by_op.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the parallelization has no config for op ", op.name));
    }
    const OpParallelization& p = *it->second;
    const OpLayouts& l = p.layouts;
    if (l.inputs.size() != op.inputs.size() || l.outputs.size() != op.outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op ", op.name, ": the parallelization holds no layouts for it"));
    }
    if (!here(p)) continue;  // another group's strand
    ASSIGN_OR_RETURN(const int op_degree, graph::TotalDegree(l.output));
    if (p.num_devices <= 0) degree = op_degree;
    const int d = p.data_degree, m = op_degree / p.data_degree;
    if (auto sp = std::find_if(r.strand_blocks.begin(), r.strand_blocks.end(),
                               [&](const StrandPlacement& s) { return s.sink == op.name; });
        sp != r.strand_blocks.end()) {
      // The strands' outputs reach the sink's layout in the block's
      // AllToAll: one op per output this device receives a piece of, fed by
      // what it sends (its own strands' outputs: the collective cannot end
      // before they do); together they carry the AllToAll's time.
      std::vector<size_t> moved;
      TensorId local = graph::kNoId;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const OpId prod = forward.tensor(op.inputs[i]).producer;
        if (prod == graph::kNoId || !by_op.contains(prod) || by_op.at(prod)->num_devices <= 0)
          continue;
        if (std::any_of(moved.begin(), moved.end(),
                        [&](size_t k) { return op.inputs[k] == op.inputs[i]; }))
          continue;  // read twice: moved once
        moved.push_back(i);
        if (local == graph::kNoId) {
          if (std::optional<TensorId> id = b.HeldId(op.inputs[i])) local = *id;
        }
      }
      if (local == graph::kNoId) {
        return absl::InternalError(absl::StrCat("device ", device, " holds no strand into ", op.name));
      }
      for (size_t i : moved) {
        const graph::Tensor& src = forward.tensor(op.inputs[i]);
        ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(l.inputs[i]));
        const std::string name = absl::StrCat(src.name, ".strands.AllToAll");
        TensorId from = local;
        if (std::optional<TensorId> id = b.HeldId(op.inputs[i])) from = *id;
        TensorId y = out.forward.AddTensor(name, std::move(piece), src.dtype, TensorRole::kActivation);
        const double secs = sp->redistribute_forward_s / static_cast<double>(moved.size());
        OpId cop = out.forward.AddOp(name, "AllToAll", {from}, {y},
                                     {{"group_size", static_cast<int64_t>(op_degree)},
                                      {"comm_time_s", secs}},
                                     graph::Phase::kForward);
        graph::AnnotateCost(out.forward, cop);
        ++out.collectives;
        out.forward_comm_s += secs;
        b.Provide(op.inputs[i], l.inputs[i], y);
      }
    }
    std::vector<TensorId> ins;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      ASSIGN_OR_RETURN(TensorId t, b.Need(op.inputs[i], l.inputs[i], d, m));
      ins.push_back(t);
    }
    // Every output at its piece shape; consumers of output k read it.
    std::vector<TensorId> yids;
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const graph::Tensor& y = forward.tensor(op.outputs[k]);
      ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(l.outputs[k]));
      yids.push_back(out.forward.AddTensor(y.name, std::move(piece), y.dtype, y.role));
    }
    // Attributes that state a full size are restated for the piece.
    graph::Attrs attrs = p.opaque ? op.attrs : PieceAttrs(forward, id, p.config);
    if (op.kind == graph::OpKind::kReshape) attrs["shape"] = out.forward.tensor(yids[0]).shape;
    OpId nid = out.forward.AddOp(op.name, op.type, ins, yids, std::move(attrs), op.phase);
    graph::AnnotateCost(out.forward, nid);
    for (size_t k = 0; k < op.outputs.size(); ++k)
      b.Produced(op.outputs[k], l.outputs[k], l.output_partial_sums, yids[k]);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const graph::Tensor& w = forward.tensor(op.inputs[i]);
      if (w.role != TensorRole::kParameter) continue;
      // The gradient's AllReduce spans the weight's copies: the data group,
      // or every device for a weight of a replicated op.
      out.grad_group.emplace(w.name, std::max(d, l.inputs[i].replica_degree));
      if (p.num_devices > 0) out.grad_devices.emplace(w.name, p.num_devices);
    }
    out.mixed_data_degrees = out.mixed_data_degrees || (id != order.front() && d != out.data_degree);
    out.data_degree = std::max(out.data_degree, d);
    out.degree = degree;
  }
  out.model_degree = out.degree / out.data_degree;
  // The graph outputs, whole rows for the loss.
  for (TensorId t : forward.outputs()) {
    const ParallelTensorShape* y = nullptr;
    const OpParallelization* p = nullptr;
    for (const OpParallelization& o : r.ops) {
      const std::vector<TensorId>& outs = forward.op(o.op).outputs;
      for (size_t k = 0; k < outs.size() && k < o.layouts.outputs.size(); ++k)
        if (outs[k] == t) {
          p = &o;
          y = &o.layouts.outputs[k];
        }
    }
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output ", forward.tensor(t).name, " has no producing op"));
    }
    const int d = p->data_degree, m = *graph::TotalDegree(*y) / p->data_degree;
    ASSIGN_OR_RETURN(TensorId id, b.Need(t, LossInputLayout(*y), d, m));
    out.forward.AddOutput(id);
  }
  RETURN_IF_ERROR(out.forward.Validate());
  return out;
}

absl::StatusOr<graph::Graph> BuildPerDeviceTraining(const PerDeviceGraph& pd,
                                                    graph::Optimizer optimizer) {
  graph::TrainingOptions t;
  t.ranks = pd.data_degree;
  t.optimizer = optimizer;
  ASSIGN_OR_RETURN(Graph g, graph::BuildTrainingGraph(pd.forward, t));
  for (OpId id = 0; id < g.num_ops(); ++id) {
    graph::Op& op = g.mutable_op(id);
    if (op.phase != graph::Phase::kCommunication || op.kind != graph::OpKind::kAllReduce) continue;
    // "p.grad.allreduce" reduces "p.grad" (graph/training.h).
    const std::string& grad = g.tensor(op.inputs[0]).name;
    const std::string param = grad.substr(0, grad.size() - std::string_view(".grad").size());
    auto it = pd.grad_group.find(param);
    if (it == pd.grad_group.end()) {
      return absl::InternalError(absl::StrCat("gradient ", grad, " has no parameter group"));
    }
    op.attrs["group_size"] = static_cast<int64_t>(it->second);
    if (auto dv = pd.grad_devices.find(param); dv != pd.grad_devices.end())
      op.attrs["group_devices"] = static_cast<int64_t>(dv->second);
  }
  return g;
}

double DataGroupCostModel::CollectiveTime(costmodel::Collective c, int64_t bytes,
                                          int group_size) {
  // Part 0: the data part of the [g, degree / g] view (see ViewCollectiveTime).
  const int g = std::max(1, group_size);
  absl::StatusOr<double> t =
      ViewCollectiveTime(cluster_, g, std::max(1, degree_ / g), 0, c, bytes, group_size);
  // The view was valid when the graph was built; should pricing it fail, the
  // base model's contiguous-group time is the next best figure.
  if (t.ok()) return *t;
  return base_.CollectiveTime(c, bytes, group_size);
}

double DataGroupCostModel::CollectiveTimeOnDevices(costmodel::Collective c, int64_t bytes,
                                                   int group_size, int devices) {
  const int g = std::max(1, group_size);
  if (devices <= 0 || devices >= degree_ || devices % g != 0) {
    return CollectiveTime(c, bytes, group_size);
  }
  absl::StatusOr<double> t = ViewCollectiveTime(cluster_, g, devices / g, 0, c, bytes, group_size);
  if (t.ok()) return *t;
  return base_.CollectiveTime(c, bytes, group_size);
}

}  // namespace braid::search
