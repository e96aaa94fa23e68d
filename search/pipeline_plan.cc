#include "search/pipeline_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops.h"
#include "graph/parallel_shape.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;

absl::StatusOr<std::vector<OpId>> ForwardOrder(const Graph& g) {
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  std::vector<OpId> out;
  for (OpId op : order)
    if (g.op(op).phase == graph::Phase::kForward) out.push_back(op);
  return out;
}

// Ops [b, e) of `order` as a graph of their own: activations produced
// earlier become inputs; graph outputs and tensors read later are outputs.
Graph StageGraph(const Graph& g, const std::vector<OpId>& order, int b, int e, int stage) {
  Graph s(absl::StrCat(g.name(), ".stage", stage));
  std::map<TensorId, TensorId> ids;
  std::set<TensorId> produced_here;
  for (int k = b; k < e; ++k)
    for (TensorId t : g.op(order[k]).outputs) produced_here.insert(t);
  auto id_of = [&](TensorId t) {
    auto it = ids.find(t);
    if (it != ids.end()) return it->second;
    const graph::Tensor& x = g.tensor(t);
    TensorRole role = x.role;
    if (role == TensorRole::kActivation && !produced_here.count(t)) role = TensorRole::kInput;
    return ids.emplace(t, s.AddTensor(x.name, x.shape, x.dtype, role)).first->second;
  };
  for (int k = b; k < e; ++k) {
    const graph::Op& op = g.op(order[k]);
    std::vector<TensorId> ins, outs;
    for (TensorId t : op.inputs) ins.push_back(id_of(t));
    for (TensorId t : op.outputs) outs.push_back(id_of(t));
    const OpId id = s.AddOp(op.name, op.type, ins, outs, op.attrs, op.phase);
    graph::AnnotateCost(s, id);
  }
  // Outputs: what later stages read, and the graph's own outputs.
  std::set<TensorId> later;
  for (size_t k = e; k < order.size(); ++k)
    for (TensorId t : g.op(order[k]).inputs) later.insert(t);
  for (TensorId t : g.outputs()) later.insert(t);
  for (TensorId t : produced_here)
    if (later.count(t)) s.AddOutput(ids.at(t));
  return s;
}

// The graph at 1/m of the batch: dim 0 of every input and activation whose
// dim 0 is `batch` (braid's graphs put the batch first), and Reshape targets
// naming it. Parameters and constants keep their shapes.
Graph ScaleBatch(const Graph& g, int64_t batch, int m) {
  if (m == 1) return g;
  Graph s = g;
  for (TensorId t = 0; t < s.num_tensors(); ++t) {
    graph::Tensor& x = s.mutable_tensor(t);
    if (x.role == TensorRole::kParameter || x.role == TensorRole::kConstant) continue;
    if (!x.shape.empty() && x.shape[0] == batch) x.shape[0] = batch / m;
  }
  for (OpId id = 0; id < s.num_ops(); ++id) {
    graph::Op& op = s.mutable_op(id);
    if (op.kind == graph::OpKind::kReshape && op.attrs.count("shape")) {
      std::vector<int64_t> shape = op.GetInts("shape");
      if (!shape.empty() && shape[0] == batch) shape[0] = batch / m;
      op.attrs["shape"] = shape;
    }
    graph::AnnotateCost(s, id);
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<int>> PipelineCutPoints(const Graph& g) {
  ASSIGN_OR_RETURN(std::vector<OpId> order, ForwardOrder(g));
  const int n = static_cast<int>(order.size());
  std::vector<int> pos(g.num_ops(), -1);
  for (int k = 0; k < n; ++k) pos[order[k]] = k;
  // Per tensor: first and last position it is produced/read at.
  std::vector<int> first(g.num_tensors(), std::numeric_limits<int>::max());
  std::vector<int> last(g.num_tensors(), -1);
  std::vector<int> produced_at(g.num_tensors(), -1);
  for (int k = 0; k < n; ++k) {
    const graph::Op& op = g.op(order[k]);
    for (TensorId t : op.inputs) {
      first[t] = std::min(first[t], k);
      last[t] = std::max(last[t], k);
    }
    for (TensorId t : op.outputs) produced_at[t] = k;
  }
  // A cut at k is crossed by an activation produced before k and read at or
  // after it (k in [produced + 1, last read]) and shares a parameter read on
  // both sides (k in [first read + 1, last read]): counted per k by
  // difference arrays, one pass over the tensors.
  std::vector<int> crossing(n + 1, 0), shared(n + 1, 0);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    int from = -1;
    if (g.tensor(t).role == TensorRole::kParameter) {
      if (last[t] >= 0 && first[t] < last[t]) from = first[t] + 1;
      if (from >= 0) {
        ++shared[from];
        --shared[last[t] + 1];
      }
    } else if (produced_at[t] >= 0 && produced_at[t] < last[t]) {
      ++crossing[produced_at[t] + 1];
      --crossing[last[t] + 1];
    }
  }
  std::vector<int> cuts;
  int cross = 0, share = 0;
  for (int k = 0; k < n; ++k) {
    cross += crossing[k];
    share += shared[k];
    if (k >= 1 && cross == 1 && share == 0) cuts.push_back(k);
  }
  return cuts;
}

absl::StatusOr<std::vector<PipelineCandidate>> PipelineCandidates(
    const Graph& forward, const costmodel::ClusterSpec& cluster, costmodel::CostModel& cm,
    const PipelinePlanOptions& options) {
  ASSIGN_OR_RETURN(std::vector<OpId> order, ForwardOrder(forward));
  ASSIGN_OR_RETURN(std::vector<int> cuts, PipelineCutPoints(forward));
  const int degree = options.stage.degree > 0 ? options.stage.degree : cluster.num_ranks;
  std::vector<PipelineCandidate> out;
  if (cuts.empty()) return out;
  // Prefix sums of the forward compute, for balancing.
  std::vector<double> prefix(order.size() + 1, 0);
  for (size_t k = 0; k < order.size(); ++k)
    prefix[k + 1] = prefix[k] + cm.ComputeTime(forward, order[k]).seconds;
  // The batch: dim 0 of the graph inputs (micro-batches must divide it).
  int64_t batch = 0;
  for (const graph::Tensor& t : forward.tensors())
    if (t.role == TensorRole::kInput && !t.shape.empty()) batch = batch == 0 ? t.shape[0] : std::gcd(batch, t.shape[0]);
  const double bf = options.stage.backward_factor;
  const StopToken& stop = options.stage.stop;
  for (int S : options.stages) {
    if (stop.StopRequested()) break;
    if (S < 2 || degree % S != 0 || static_cast<int>(cuts.size()) < S - 1) continue;
    // S - 1 increasing cuts, each nearest to its share of the compute.
    std::vector<int> begin = {0};
    for (int j = 1; j < S; ++j) {
      const double target = prefix.back() * j / S;
      int best = -1;
      for (int k : cuts) {
        if (k <= begin.back()) continue;
        // Leave room for the remaining cuts.
        const auto rest = std::count_if(cuts.begin(), cuts.end(), [&](int c) { return c > k; });
        if (rest < S - 1 - j) continue;
        if (best < 0 || std::abs(prefix[k] - target) < std::abs(prefix[best] - target)) best = k;
      }
      if (best < 0) break;
      begin.push_back(best);
    }
    if (static_cast<int>(begin.size()) != S) continue;
    ASSIGN_OR_RETURN(costmodel::ClusterSpec sub, costmodel::WithRanks(cluster, degree / S));
    ParallelizeOptions so = options.stage;
    so.degree = degree / S;
    so.parallel_strands = false;  // a stage is one program on each of its devices
    std::vector<Graph> graphs;
    for (int s = 0; s < S; ++s) {
      const int e = s + 1 < S ? begin[s + 1] : static_cast<int>(order.size());
      graphs.push_back(StageGraph(forward, order, begin[s], e, s));
    }
    std::optional<PipelineCandidate> best;
    for (int m : options.micro_batches) {
      if (stop.StopRequested()) break;
      if (m < 1 || (batch > 0 && batch % m != 0) || (batch == 0 && m > 1)) continue;
      PipelineCandidate c;
      c.stages = S;
      c.micro_batches = m;
      c.stage_begin = begin;
      std::vector<PipelineStage> st(S);
      bool planned = true;
      for (int s = 0; s < S && planned; ++s) {
        // Each stage planned and costed at the micro-batch's own shapes.
        const Graph micro = ScaleBatch(graphs[s], batch, m);
        absl::StatusOr<ParallelizeResult> rs = ParallelizeForward(micro, sub, cm, so);
        if (!rs.ok()) {
          // Stopped: not a candidate either; the loops end above.
          // E.g. no data degree divides the micro-batch: not a candidate.
          planned = false;
          break;
        }
        const ParallelizeResult& r = *rs;
        double compute = 0, sync = 0;
        for (const OpParallelization& o : r.ops) {
          compute += o.compute_s;
          sync += o.grad_sync_s;
        }
        const double movement = std::max(0.0, r.time_s - compute - sync);
        st[s].forward_s = compute / (1 + bf) + movement / 2;
        st[s].backward_s = compute * bf / (1 + bf) + movement / 2;
        c.grad_sync_s = std::max(c.grad_sync_s, sync);
        // The boundary tensor this stage sends: its producer's output piece.
        if (s + 1 < S) {
          for (TensorId t : micro.outputs()) {
            for (const OpParallelization& o : r.ops) {
              const std::vector<TensorId>& outs = micro.op(o.op).outputs;
              for (size_t k = 0; k < outs.size() && k < o.layouts.outputs.size(); ++k) {
                if (outs[k] != t) continue;
                absl::StatusOr<int64_t> bytes = graph::PieceBytes(o.layouts.outputs[k]);
                if (bytes.ok()) {
                  c.transfer_s = std::max(
                      c.transfer_s, cm.CollectiveTime(costmodel::Collective::kSendRecv, *bytes, 2));
                }
              }
            }
          }
        }
        // Memory: the stage at the full batch's configs would double count;
        // the micro-batch graph holds one micro-batch's activations, times
        // the micro-batches in flight.
        std::map<OpId, ParallelConfig> configs;
        for (const OpParallelization& o : r.ops)
          if (!o.opaque) configs.emplace(o.op, o.config);
        MemoryOptions mo = so.memory;
        const int in_flight = options.order == PipelineOrder::kGPipe ? m : std::min(m, S - s);
        mo.micro_batches = 1;
        mo.in_flight_micro_batches = 1;
        absl::StatusOr<DeviceMemory> mem = PerDeviceMemory(micro, configs, so.optimizer, mo);
        if (mem.ok()) {
          DeviceMemory dm = *mem;
          dm.total_bytes += (in_flight - 1) * dm.activation_bytes;
          dm.activation_bytes *= in_flight;
          if (dm.total_bytes > c.memory.total_bytes) c.memory = dm;
        } else {
          c.status = mem.status();
        }
        c.stage_plans.push_back(r);
      }
      if (!planned) continue;
      ASSIGN_OR_RETURN(c.timing, SimulatePipeline(st, m, c.transfer_s, options.order));
      c.time_s = c.timing.iteration_s + c.grad_sync_s;
      if (c.status.ok()) c.status = CheckFitsDevice(c.memory, cluster);
      const bool better =
          !best || (c.status.ok() && !best->status.ok()) ||
          (c.status.ok() == best->status.ok() && c.time_s < best->time_s);
      if (better) best = std::move(c);
    }
    if (best) out.push_back(std::move(*best));
  }
  return out;
}

}  // namespace braid::search
