#include "search/parallelize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "costmodel/parallel_comm.h"
#include "graph/parallel_ops.h"
#include "graph/parallel_shape.h"
#include "search/machine_mapping.h"

namespace braid::search {
namespace {

using costmodel::ClusterSpec;
using costmodel::Collective;
using costmodel::MachineView;
using costmodel::RingCost;
using costmodel::ViewDimLink;
using graph::Graph;
using graph::OpId;
using graph::ParallelTensorShape;

constexpr int kDataPart = 0, kModelPart = 1, kBothParts = 2;

// One physical sub-dim of a view: a run of ranks whose groups all use `link`.
struct PhysDim {
  int size = 1;
  ViewDimLink link;
};
// The sub-dims of the data and the model part, innermost (fastest link) first.
struct PhysView {
  std::vector<PhysDim> data, model;
  // Collectives measured on this cluster (a fitted CommModel), used instead
  // of the link priors where a (collective, group size) has a fit; set only
  // on a single-node cluster, where every group of n ranks is laid out as
  // the first n ranks the fit was measured on.
  const costmodel::CommModel* measured = nullptr;
};

// Cuts the [d, m] / [m, 1] view at node boundaries: a dim of stride t < node
// width whose extent passes the node is split into an inter-node sub-dim
// (stride = node width) and the intra-node rest.
absl::StatusOr<PhysView> MakePhysView(const ClusterSpec& c, int d, int m) {
  const int dpn = c.devices_per_node;
  MachineView v;
  std::vector<int> part;
  auto add = [&](int size, int stride, int p) {
    if (size <= 1) return;
    const int64_t extent = int64_t{size} * stride;
    if (stride < dpn && extent > dpn && dpn % stride == 0 && extent % dpn == 0) {
      v.dims.push_back(static_cast<int>(extent / dpn));
      v.strides.push_back(dpn);
      part.push_back(p);
      v.dims.push_back(dpn / stride);
      v.strides.push_back(stride);
      part.push_back(p);
    } else {
      v.dims.push_back(size);
      v.strides.push_back(stride);
      part.push_back(p);
    }
  };
  add(d, m, kDataPart);
  add(m, 1, kModelPart);
  PhysView pv;
  for (int k = static_cast<int>(v.dims.size()) - 1; k >= 0; --k) {
    ASSIGN_OR_RETURN(ViewDimLink link, costmodel::ViewDimensionLink(v, c, k));
    (part[k] == kDataPart ? pv.data : pv.model).push_back({v.dims[k], link});
  }
  return pv;
}

// MakePhysView per (d, m), computed once per pass run: ViewDimensionLink
// is called for every movement and gradient-sync cost otherwise (most of
// BERT-Large's search time at 96 devices before this cache).
class PhysViews {
 public:
  // `measured`: the cost model's fitted collectives, when it has them.
  PhysViews(const ClusterSpec& c, const costmodel::CommModel* measured)
      : cluster_(c),
        measured_(c.num_ranks <= c.devices_per_node ? measured : nullptr) {}
  absl::StatusOr<const PhysView*> Get(int d, int m) {
    auto it = views_.find({d, m});
    if (it == views_.end()) {
      ASSIGN_OR_RETURN(PhysView pv, MakePhysView(cluster_, d, m));
      pv.measured = measured_;
      it = views_.emplace(std::make_pair(d, m), std::move(pv)).first;
    }
    return &it->second;
  }

 private:
  const ClusterSpec& cluster_;
  const costmodel::CommModel* measured_;
  std::map<std::pair<int, int>, PhysView> views_;
};

// A collective over the sub-dims `dims` (innermost first): one ring when
// there is one; hierarchical over several (ReduceScatter inner-first, the
// outermost stage on what is left, AllGather back), as NCCL runs across
// nodes. AllToAll and the rest: one ring on the slowest link.
double HierTime(Collective c, int64_t bytes, const std::vector<PhysDim>& dims) {
  if (dims.empty()) return 0;
  if (dims.size() == 1) return RingCost(c, dims[0].size, dims[0].link).At(bytes);
  double t = 0, b = static_cast<double>(bytes);
  switch (c) {
    case Collective::kAllReduce:
      for (size_t k = 0; k + 1 < dims.size(); ++k) {
        t += RingCost(Collective::kReduceScatter, dims[k].size, dims[k].link)
                 .At(static_cast<int64_t>(b)) +
             RingCost(Collective::kAllGather, dims[k].size, dims[k].link)
                 .At(static_cast<int64_t>(b));
        b /= dims[k].size;
      }
      return t + RingCost(Collective::kAllReduce, dims.back().size, dims.back().link)
                     .At(static_cast<int64_t>(b));
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      for (const PhysDim& d : dims) {
        t += RingCost(c, d.size, d.link).At(static_cast<int64_t>(b));
        b /= d.size;
      }
      return t;
    default: {
      int n = 1;
      const PhysDim* slow = &dims[0];
      for (const PhysDim& d : dims) {
        n *= d.size;
        if (d.link.bandwidth < slow->link.bandwidth) slow = &d;
      }
      return RingCost(c, n, slow->link).At(bytes);
    }
  }
}

// A group of `group` ranks acting on `part` of the view: the innermost
// sub-dims of that part whose sizes multiply to `group`; failing that, one
// ring of `group` ranks on the part's slowest link.
// `bucketed`: the collective joins others in one call (weight gradients,
// which the fusion search buckets): with a measured fit it is charged its
// bytes at the fitted rate, the fit's per-call overhead being the bucket's.
double PartTime(const PhysView& pv, int part, Collective c, int64_t bytes, int group,
                bool bucketed = false) {
  if (group <= 1) return 0;
  if (pv.measured != nullptr) {
    if (std::optional<costmodel::LinearCost> f = pv.measured->Fitted(c, group)) {
      return bucketed ? f->seconds_per_byte * static_cast<double>(bytes) : f->At(bytes);
    }
  }
  std::vector<PhysDim> cand;
  if (part != kDataPart) cand = pv.model;
  if (part != kModelPart) cand.insert(cand.end(), pv.data.begin(), pv.data.end());
  if (cand.empty()) {
    cand = pv.model;
    cand.insert(cand.end(), pv.data.begin(), pv.data.end());
  }
  if (cand.empty()) return 0;
  std::vector<PhysDim> use;
  int prod = 1;
  for (const PhysDim& d : cand) {
    if (prod == group) break;
    prod *= d.size;
    use.push_back(d);
  }
  if (prod == group) return HierTime(c, bytes, use);
  const PhysDim* slow = &cand[0];
  for (const PhysDim& d : cand)
    if (d.link.bandwidth < slow->link.bandwidth) slow = &d;
  return RingCost(c, group, slow->link).At(bytes);
}

// The part of the view a collective step of `ops` acts on.
int StepPart(const std::vector<graph::ParallelOp>& ops, const costmodel::CollectiveStep& s) {
  bool dim0 = false, other = false;
  for (int i = s.first_op; i < s.first_op + s.num_ops && i < static_cast<int>(ops.size()); ++i) {
    const graph::ParallelOp& op = ops[i];
    if (graph::TakesDim(op.kind) && op.dim == 0) {
      dim0 = true;
    } else {
      other = true;
    }
  }
  if (dim0 && other) return kBothParts;
  return dim0 ? kDataPart : kModelPart;
}

int DataDegree(const ParallelConfig& c) {
  return c.output_degrees.empty() ? 1 : c.output_degrees[0];
}

// Everything the pass knows about one op's candidates.
struct OpInfo {
  OpId op = graph::kNoId;
  bool opaque = false;
  // A fan-out node: the layout `tensor` is brought to once for all its
  // consumers (Unity's PCG has one Combine/Replicate there, not one per
  // consumer). `configs` are placeholders; `fanout_layouts` are its choices.
  bool fanout = false;
  // A block of strands collapsed into one node (index into the run's
  // blocks): choice k is the block's BlockOption k (`configs` holds one
  // default ParallelConfig per option, only to size the choices); `compute`
  // is the option's busiest group; the edge to the sink is the AllToAll.
  int block = -1;
  // The tensor a fan-out node supplies; an op node's output 0.
  graph::TensorId tensor = graph::kNoId;
  // A fan-out node: the node of the op producing `tensor`, and which of its
  // outputs `tensor` is.
  int from_node = -1;
  int output_index = 0;
  std::vector<ParallelTensorShape> fanout_layouts;
  std::vector<ParallelConfig> configs;
  std::vector<OpLayouts> layouts;
  std::vector<double> compute;    // fwd + bwd, per config
  std::vector<double> grad_sync;  // per config
  // Per config, for an op producing a graph output: bringing it to the
  // loss's layout (LossInputLayout), forward and backward; else empty.
  std::vector<double> output_move;
  double OutputMove(int c) const { return output_move.empty() ? 0.0 : output_move[c]; }
};

// Whether normalized `axes` of a rank-`rank` tensor include dim 0; true
// when they are unknown (absent).
bool TouchesDimZero(const graph::Op& o, std::string_view attr, int64_t rank) {
  if (!o.attrs.contains(attr)) return true;
  for (int64_t a : o.GetInts(attr))
    if (a == 0 || a + rank == 0) return true;
  return false;
}

// Broadcasting kinds: an input of lower rank is right-aligned to the
// output, so its dim 0 is not the output's.
bool Broadcasts(graph::OpKind k) {
  return graph::IsElementwiseKind(k) || k == graph::OpKind::kExpand;
}

// Whether an opaque op computes exactly its rows of every output from row
// blocks of dim 0 (every activation input whose dim 0 is the output's
// split with it, the rest copied): the kinds whose dim 0 is a batch dim
// they never mix across, with attributes showing dim 0 untouched. LSTM, GRU
// and RNN are not (ONNX's X is [seq, batch, in]: dim 0 is the recurrence),
// nor are unknown ops: those run replicated.
bool RowsAreIndependent(const Graph& g, const graph::Op& o) {
  if (o.outputs.empty() || o.inputs.empty()) return false;
  const std::vector<int64_t>& y = g.tensor(o.outputs[0]).shape;
  if (y.empty()) return false;
  for (graph::TensorId t : o.outputs) {
    const std::vector<int64_t>& s = g.tensor(t).shape;
    if (s.empty() || s[0] != y[0]) return false;
  }
  const int64_t in_rank = static_cast<int64_t>(g.tensor(o.inputs[0]).shape.size());
  const int64_t out_rank = static_cast<int64_t>(y.size());
  using graph::OpKind;
  switch (o.kind) {
    case OpKind::kExpand:
      return in_rank == out_rank;
    case OpKind::kIdentity:
    case OpKind::kConv:
    case OpKind::kConvTranspose:
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
    case OpKind::kLpPool:
    case OpKind::kGlobalAveragePool:
    case OpKind::kGlobalMaxPool:
    case OpKind::kInstanceNormalization:
    case OpKind::kGroupNormalization:
    case OpKind::kDepthToSpace:
    case OpKind::kSpaceToDepth:
      return true;
    case OpKind::kSqueeze:
      return !TouchesDimZero(o, "axes", in_rank);
    case OpKind::kUnsqueeze:
      return !TouchesDimZero(o, "axes", out_rank);
    case OpKind::kSlice:
      return !TouchesDimZero(o, "axes", in_rank);
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd:
    case OpKind::kReduceL1:
    case OpKind::kReduceL2:
    case OpKind::kReduceSumSquare:
    case OpKind::kReduceLogSum:
    case OpKind::kReduceLogSumExp:
    case OpKind::kReduceSum:
    case OpKind::kReduceMean:
      return !TouchesDimZero(o, "axes", in_rank);
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kArgMax:
    case OpKind::kArgMin:
    case OpKind::kConcat: {
      int64_t axis = o.GetInt("axis", o.kind == OpKind::kSoftmax || o.kind == OpKind::kLogSoftmax
                                          ? -1 : 0);
      if (axis < 0) axis += in_rank;
      return axis != 0;
    }
    case OpKind::kLayerNormalization: {
      int64_t axis = o.GetInt("axis", -1);
      if (axis < 0) axis += in_rank;
      return axis > 0;
    }
    case OpKind::kTranspose: {
      const std::vector<int64_t> perm = o.GetInts("perm");
      return !perm.empty() && perm[0] == 0;
    }
    case OpKind::kPad: {
      const std::vector<int64_t> pads = o.GetInts("pads");
      return static_cast<int64_t>(pads.size()) == 2 * in_rank && pads[0] == 0 &&
             pads[in_rank] == 0;
    }
    case OpKind::kTile: {
      const std::vector<int64_t> r = o.GetInts("repeats");
      return !r.empty() && r[0] == 1;
    }
    default:
      return graph::IsElementwiseKind(o.kind);
  }
}

// Whether input `i` of an opaque op run on row blocks is split with the
// output's dim 0 (else every device holds a copy).
bool CarriesRows(const Graph& g, const graph::Op& o, size_t i) {
  const graph::Tensor& x = g.tensor(o.inputs[i]);
  if (x.role == graph::TensorRole::kParameter || x.role == graph::TensorRole::kConstant) {
    return false;
  }
  const std::vector<int64_t>& y = g.tensor(o.outputs[0]).shape;
  if (x.shape.empty() || x.shape[0] != y[0]) return false;
  return !Broadcasts(o.kind) || x.shape.size() == y.size();
}

// The opaque fallback's layouts at degree `degree`: with d > 1 (only where
// RowsAreIndependent), every output and the inputs carrying rows split on
// dim 0 by d; everything else copied on every device. Parameters are
// copied.
OpLayouts OpaqueLayouts(const Graph& g, OpId op, int degree, int d) {
  const graph::Op& o = g.op(op);
  auto shape = [&](graph::TensorId t, bool split) {
    const graph::Tensor& x = g.tensor(t);
    ParallelTensorShape s = graph::UnpartitionedShape(x.shape, x.dtype);
    if (split && d > 1) {
      s.dims[0].degree = d;
      s.replica_degree = degree / d;
    } else {
      s.replica_degree = degree;
    }
    return s;
  };
  OpLayouts l;
  for (size_t i = 0; i < o.inputs.size(); ++i)
    l.inputs.push_back(shape(o.inputs[i], CarriesRows(g, o, i)));
  for (graph::TensorId t : o.outputs) l.outputs.push_back(shape(t, true));
  l.output = l.outputs[0];
  return l;
}

// One strand on q devices: its ops' candidates there and the configs the
// strand's chain DP chose.
struct StrandSolution {
  std::vector<OpInfo> infos;  // per op of the strand
  std::vector<int> configs;   // chosen, per op
  double compute_s = 0, grad_sync_s = 0, movement_s = 0;
  double cost() const { return compute_s + grad_sync_s + movement_s; }
};

// One way to run a block side by side: q devices per strand.
struct BlockOption {
  int q = 1;
  int groups = 1;
  std::vector<int> group_of;  // per strand
  int per_group = 0;
  std::vector<StrandSolution> strands;
  double busiest_s = 0, busiest_compute_s = 0, busiest_sync_s = 0;
};

struct BlockNode {
  const StrandBlock* block = nullptr;
  std::vector<graph::TensorId> outputs;  // per strand: what the sink reads
  std::vector<BlockOption> options;
};

// Seconds to bring every strand's output (on its group of q devices) to the
// sink's input layouts over all `degree` devices, forward and backward: one
// AllToAll over the devices, each sending its share of its group's outputs
// to every device holding a piece (a replicated piece to each copy) and
// receiving its pieces of all of them; priced with the larger of the two
// buffers on the slowest link the devices span.
absl::StatusOr<double> RedistributeTime(const Graph& g, const BlockNode& b, const BlockOption& o,
                                        const OpInfo& sink, int sink_config, int degree,
                                        PhysViews& views, const ParallelizeOptions& opt) {
  if (degree <= 1) return 0.0;
  const graph::Op& so = g.op(sink.op);
  const OpLayouts& l = sink.layouts[sink_config];
  double in = 0;
  std::vector<double> out(o.groups, 0.0);
  for (size_t s = 0; s < b.outputs.size(); ++s) {
    const double bytes = static_cast<double>(g.tensor(b.outputs[s]).Bytes());
    for (size_t i = 0; i < so.inputs.size(); ++i) {
      if (so.inputs[i] != b.outputs[s]) continue;
      const ParallelTensorShape& want = l.inputs[i];
      double pieces = 1;
      for (const graph::ParallelDim& d : want.dims) pieces *= d.degree;
      in += bytes / pieces;
      out[o.group_of[s]] += bytes * want.replica_degree / o.q;
    }
  }
  // The larger buffer, a device's own piece included: the AllToAll's cost
  // charges (n-1)/n of it to the links.
  const double buffer = std::max(in, *std::max_element(out.begin(), out.end()));
  ASSIGN_OR_RETURN(const PhysView* pv, views.Get(1, degree));
  const double t =
      PartTime(*pv, kModelPart, Collective::kAllToAll, static_cast<int64_t>(buffer), degree);
  return t * (1 + opt.backward_comm_factor);
}

class ViewAwareCosts final : public MachineMappingCostModel {
 public:
  // `supplier`: the node each tensor's consumers read it from.
  ViewAwareCosts(const Graph& g, PhysViews& views, const ParallelizeOptions& o,
                 const std::vector<OpInfo>& infos, const std::vector<BlockNode>& blocks,
                 const std::map<graph::TensorId, int>& supplier, int degree)
      : g_(g), views_(views), opt_(o), infos_(infos), blocks_(blocks), supplier_(supplier),
        degree_(degree) {}

  absl::StatusOr<double> OpCost(const MappedOp& op, const OpConfig& config,
                                const MachineView&) override {
    const OpInfo& info = infos_[op.id];
    const int k = ConfigIndex(op, config);
    return info.compute[k] + info.grad_sync[k] + info.OutputMove(k);
  }

  absl::StatusOr<double> MovementCost(const BoundaryTensor&, const MappedOp& producer,
                                      const OpPlacement& pp, const MappedOp& consumer,
                                      const OpPlacement& cp) override {
    const auto key = std::make_tuple(producer.id, pp.config, consumer.id, cp.config);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const OpInfo& pi = infos_[producer.id];
    const OpInfo& ci = infos_[consumer.id];
    if (pi.block >= 0) {
      const BlockNode& b = blocks_[pi.block];
      ASSIGN_OR_RETURN(double t, RedistributeTime(g_, b, b.options[pp.config], ci, cp.config,
                                                  degree_, views_, opt_));
      memo_.emplace(key, t);
      return t;
    }
    // What the producer holds: a fan-out node its tensor, an op node each
    // output its consumers read from it (not through a fan-out node).
    std::vector<std::pair<graph::TensorId, const ParallelTensorShape*>> held;
    if (pi.fanout) {
      held.emplace_back(pi.tensor, &pi.fanout_layouts[pp.config]);
    } else {
      const graph::Op& po = g_.op(pi.op);
      for (size_t k = 0; k < po.outputs.size(); ++k) {
        auto sup = supplier_.find(po.outputs[k]);
        if (sup != supplier_.end() && sup->second == producer.id)
          held.emplace_back(po.outputs[k], &pi.layouts[pp.config].outputs[k]);
      }
    }
    const ReplicaKind kind = !pi.fanout && pi.layouts[pp.config].output_partial_sums
                                 ? ReplicaKind::kPartialSums
                                 : ReplicaKind::kCopies;
    // What the consumer needs, and the view it runs on.
    std::vector<std::pair<const ParallelTensorShape*, const ParallelTensorShape*>> moves;
    int d = 1, m = 1;
    if (ci.fanout) {
      const ParallelTensorShape* want = &ci.fanout_layouts[cp.config];
      for (const auto& [t, from] : held)
        if (t == ci.tensor) moves.emplace_back(from, want);
      d = want->dims.empty() ? 1 : want->dims[0].degree;
      m = *graph::TotalDegree(*want) / d;
    } else {
      const graph::Op& co = g_.op(ci.op);
      for (const auto& [t, from] : held)
        for (size_t i = 0; i < co.inputs.size(); ++i)
          if (co.inputs[i] == t) moves.emplace_back(from, &ci.layouts[cp.config].inputs[i]);
      const ParallelConfig& cc = ci.configs[cp.config];
      d = DataDegree(cc);
      m = cc.TotalDegree() / d;
    }
    ASSIGN_OR_RETURN(const PhysView* pvp, views_.Get(d, m));
    const PhysView& pv = *pvp;
    double t = 0;
    for (const auto& [from, want] : moves) {
      ASSIGN_OR_RETURN(Transition tr, LayoutTransition(*from, *want, kind));
      ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, TransitionComm(tr));
      for (const costmodel::CollectiveStep& s : steps)
        t += PartTime(pv, StepPart(tr.ops, s), s.collective, s.bytes, s.group_size);
    }
    t *= 1 + opt_.backward_comm_factor;
    memo_.emplace(key, t);
    return t;
  }

 private:
  int ConfigIndex(const MappedOp& op, const OpConfig& config) const {
    for (size_t k = 0; k < op.configs.size(); ++k)
      if (&op.configs[k] == &config || op.configs[k].name == config.name) return static_cast<int>(k);
    return 0;
  }

  const Graph& g_;
  PhysViews& views_;
  const ParallelizeOptions& opt_;
  const std::vector<OpInfo>& infos_;
  const std::vector<BlockNode>& blocks_;
  const std::map<graph::TensorId, int>& supplier_;
  int degree_ = 1;
  std::map<std::tuple<int, int, int, int>, double> memo_;
};

absl::StatusOr<double> GradSyncTime(PhysViews& views, const Graph& g, const OpInfo& info,
                                    const ParallelConfig& c) {
  const int d = DataDegree(c), m = c.TotalDegree() / d;
  ASSIGN_OR_RETURN(const PhysView* pvp, views.Get(d, m));
  const PhysView& pv = *pvp;
  double t = 0;
  if (info.opaque) {
    // Parameters are copied on every device; their gradients are partial
    // sums over all of them (each device's rows, or each copy's share of
    // the output gradient), as WeightGradSync treats a weight's replicas.
    const graph::Op& o = g.op(info.op);
    const int r = c.TotalDegree();
    const int part = r == d ? kDataPart : (d == 1 ? kModelPart : kBothParts);
    for (graph::TensorId w : o.inputs) {
      if (g.tensor(w).role != graph::TensorRole::kParameter) continue;
      t += PartTime(pv, part, Collective::kAllReduce, g.tensor(w).Bytes(), r,
                    /*bucketed=*/true);
    }
    return t;
  }
  ASSIGN_OR_RETURN(std::vector<GradSync> syncs, WeightGradSync(g, info.op, c));
  for (const GradSync& s : syncs) {
    const int r = s.transition.start.replica_degree;
    const int part = r == d ? kDataPart : (d == 1 ? kModelPart : kBothParts);
    ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, TransitionComm(s.transition));
    for (const costmodel::CollectiveStep& st : steps)
      t += PartTime(pv, part, st.collective, st.bytes, st.group_size, /*bucketed=*/true);
  }
  return t;
}

absl::StatusOr<OpInfo> BuildOpInfo(const Graph& g, OpId op, PhysViews& views,
                                   costmodel::CostModel& cm, int degree,
                                   const ParallelizeOptions& opt) {
  OpInfo info;
  info.op = op;
  info.tensor = g.op(op).outputs.empty() ? graph::kNoId : g.op(op).outputs[0];
  absl::StatusOr<std::vector<ParallelConfig>> cands = CandidateConfigs(g, op, degree);
  if (!cands.ok() && cands.status().code() != absl::StatusCode::kUnimplemented) {
    return cands.status();
  }
  const double fb = 1 + opt.backward_factor;
  // No split of the op's dims divides the degree (BERT's position embedding,
  // [512, 1024] at 24 devices): it runs as an opaque op, replicated (or
  // split on dim 0 where that divides), like the kinds without configs.
  // The kinds' own configs; with ParallelizeOptions::filtered_fallback, an
  // op none of whose configs passes the filter gets the fallback below too.
  if (cands.ok() && !cands->empty()) {
    for (ParallelConfig& c : *cands) {
      int model_dims = c.reduction_degree > 1 ? 1 : 0;
      for (size_t j = 1; j < c.output_degrees.size(); ++j) model_dims += c.output_degrees[j] > 1;
      if (opt.max_model_dims > 0 && model_dims > opt.max_model_dims) continue;
      if (opt.filter && !opt.filter(g, op, c)) continue;
      ASSIGN_OR_RETURN(OpLayouts l, ConfigLayouts(g, op, c));
      ASSIGN_OR_RETURN(costmodel::OpTime t, OpTimeUnderConfig(cm, g, op, c));
      info.configs.push_back(std::move(c));
      info.layouts.push_back(std::move(l));
      info.compute.push_back(fb * t.seconds);
    }
  }
  if (info.configs.empty() && (!cands.ok() || cands->empty() || opt.filtered_fallback)) {
    const graph::Op& o = g.op(op);
    if (o.outputs.empty()) {
      return absl::UnimplementedError(absl::StrCat("op ", o.name, ": no outputs"));
    }
    // Row blocks where that is exact for the kind, else every device runs
    // the whole op (exact for any op).
    const auto& shape = g.tensor(o.outputs[0]).shape;
    const int d =
        !shape.empty() && shape[0] % degree == 0 && RowsAreIndependent(g, o) ? degree : 1;
    ParallelConfig c;
    c.output_degrees.assign(shape.size(), 1);
    if (!shape.empty()) c.output_degrees[0] = d;
    c.replica_degree = degree / d;
    if (shape.empty()) c.replica_degree = degree;
    info.opaque = true;
    info.configs.push_back(c);
    info.layouts.push_back(OpaqueLayouts(g, op, degree, d));
    info.compute.push_back(fb * cm.ComputeTime(g, op).seconds / d);
  }
  if (info.configs.empty()) {
    return absl::NotFoundError(
        absl::StrCat("op ", g.op(op).name, ": no parallel config at degree ", degree));
  }
  for (size_t k = 0; k < info.configs.size(); ++k) {
    ASSIGN_OR_RETURN(double s, GradSyncTime(views, g, info, info.configs[k]));
    info.grad_sync.push_back(s);
  }
  return info;
}

// The strand's chain DP on q devices (`views`: the first q ranks; strand
// groups are node-aligned, so every group's links are theirs). The caller's
// filter is over all the devices and does not apply here. NotFound when no
// config chain fits; the last op may not leave partial sums (the AllToAll
// moves whole values).
absl::StatusOr<StrandSolution> SolveStrand(const Graph& g, const std::vector<OpId>& strand,
                                           PhysViews& views, costmodel::CostModel& cm, int q,
                                           const ParallelizeOptions& opt) {
  ParallelizeOptions so = opt;
  so.filter = nullptr;
  StrandSolution out;
  for (OpId op : strand) {
    if (opt.stop.StopRequested()) return opt.stop.ToStatus("parallelize");
    ASSIGN_OR_RETURN(OpInfo info, BuildOpInfo(g, op, views, cm, q, so));
    out.infos.push_back(std::move(info));
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int n = static_cast<int>(strand.size());
  std::vector<std::vector<double>> best(n);
  std::vector<std::vector<int>> from(n);
  for (int i = 0; i < n; ++i) {
    const OpInfo& info = out.infos[i];
    const int cn = static_cast<int>(info.configs.size());
    best[i].assign(cn, kInf);
    from[i].assign(cn, -1);
    for (int c = 0; c < cn; ++c) {
      if (i + 1 == n && info.layouts[c].output_partial_sums) continue;
      const double own = info.compute[c] + info.grad_sync[c];
      if (i == 0) {
        best[i][c] = own;
        continue;
      }
      const OpInfo& pi = out.infos[i - 1];
      const graph::Op& o = g.op(info.op);
      const int d = DataDegree(info.configs[c]), m = info.configs[c].TotalDegree() / d;
      ASSIGN_OR_RETURN(const PhysView* pv, views.Get(d, m));
      for (int pc = 0; pc < static_cast<int>(pi.configs.size()); ++pc) {
        if (best[i - 1][pc] == kInf) continue;
        double mv = 0;
        for (size_t k = 0; k < o.inputs.size(); ++k) {
          if (o.inputs[k] != pi.tensor) continue;
          ASSIGN_OR_RETURN(Transition tr, LayoutTransition(pi.layouts[pc].output,
                                                           info.layouts[c].inputs[k],
                                                           pi.layouts[pc].output_partial_sums
                                                               ? ReplicaKind::kPartialSums
                                                               : ReplicaKind::kCopies));
          ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, TransitionComm(tr));
          for (const costmodel::CollectiveStep& st : steps)
            mv += PartTime(*pv, StepPart(tr.ops, st), st.collective, st.bytes, st.group_size);
        }
        const double t = best[i - 1][pc] + mv * (1 + opt.backward_comm_factor) + own;
        if (t < best[i][c]) {
          best[i][c] = t;
          from[i][c] = pc;
        }
      }
    }
  }
  const auto last = std::min_element(best[n - 1].begin(), best[n - 1].end());
  if (last == best[n - 1].end() || *last == kInf) {
    return absl::NotFoundError(absl::StrCat("strand ending at ", g.op(strand.back()).name,
                                            ": no config chain on ", q, " devices"));
  }
  out.configs.assign(n, 0);
  int c = static_cast<int>(last - best[n - 1].begin());
  for (int i = n - 1; i >= 0; --i) {
    out.configs[i] = c;
    out.compute_s += out.infos[i].compute[c];
    out.grad_sync_s += out.infos[i].grad_sync[c];
    c = from[i][c];
  }
  out.movement_s = std::max(0.0, *last - out.compute_s - out.grad_sync_s);
  return out;
}

// The side-by-side options of a block: per q (ParallelizeOptions::
// strand_devices, else every node-aligned divisor of the degree below it),
// each strand solved on q devices and the strands dealt to the degree / q
// groups longest first, each to the least loaded group. Options where some
// strand has no config chain are left out.
absl::StatusOr<BlockNode> BuildBlock(const Graph& g, const StrandBlock& b,
                                     const ClusterSpec& cluster, costmodel::CostModel& cm,
                                     const costmodel::CommModel* measured, int degree,
                                     const ParallelizeOptions& opt) {
  BlockNode node;
  node.block = &b;
  for (const std::vector<OpId>& st : b.strands) node.outputs.push_back(g.op(st.back()).outputs[0]);
  const int dpn = cluster.devices_per_node;
  std::vector<int> qs = opt.strand_devices;
  if (qs.empty())
    for (int q = 1; q < degree; ++q) qs.push_back(q);
  for (int q : qs) {
    if (q < 1 || q >= degree || degree % q != 0) continue;
    if (opt.stop.StopRequested()) return opt.stop.ToStatus("parallelize");
    if (dpn % q != 0 && q % dpn != 0) continue;  // a group would straddle nodes
    ASSIGN_OR_RETURN(ClusterSpec sub, costmodel::WithRanks(cluster, q));
    PhysViews sv(sub, measured);
    BlockOption o;
    o.q = q;
    o.groups = degree / q;
    bool ok = true;
    for (const std::vector<OpId>& st : b.strands) {
      absl::StatusOr<StrandSolution> ss = SolveStrand(g, st, sv, cm, q, opt);
      if (!ss.ok()) {
        if (ss.status().code() != absl::StatusCode::kNotFound) return ss.status();
        ok = false;
        break;
      }
      o.strands.push_back(*std::move(ss));
    }
    if (!ok) continue;
    const int n = static_cast<int>(o.strands.size());
    std::vector<int> by_cost(n);
    for (int i = 0; i < n; ++i) by_cost[i] = i;
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int c) {
      return o.strands[a].cost() > o.strands[c].cost();
    });
    std::vector<double> load(o.groups, 0.0), compute(o.groups, 0.0), sync(o.groups, 0.0);
    std::vector<int> count(o.groups, 0);
    o.group_of.assign(n, 0);
    for (int i : by_cost) {
      const int gi = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      o.group_of[i] = gi;
      load[gi] += o.strands[i].cost();
      compute[gi] += o.strands[i].compute_s;
      sync[gi] += o.strands[i].grad_sync_s;
      ++count[gi];
    }
    const int busiest = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    o.busiest_s = load[busiest];
    o.busiest_compute_s = compute[busiest];
    o.busiest_sync_s = sync[busiest];
    o.per_group = *std::max_element(count.begin(), count.end());
    node.options.push_back(std::move(o));
  }
  return node;
}

}  // namespace

std::vector<StrandBlock> IndependentStrands(const Graph& g) {
  absl::StatusOr<std::vector<OpId>> order = g.TopologicalOrder();
  if (!order.ok()) return {};
  auto is_output = [&](graph::TensorId t) {
    return std::find(g.outputs().begin(), g.outputs().end(), t) != g.outputs().end();
  };
  // Fed from outside the graph's ops: a graph input, or a parameter or
  // constant no other op reads.
  auto fed = [&](graph::TensorId t) {
    const graph::Tensor& x = g.tensor(t);
    if (x.producer != graph::kNoId) return false;
    return x.role != graph::TensorRole::kParameter || x.consumers.size() == 1;
  };
  auto distinct_consumers = [&](graph::TensorId t) {
    std::vector<OpId> cs = g.tensor(t).consumers;
    std::sort(cs.begin(), cs.end());
    cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
    return cs;
  };
  std::map<OpId, std::vector<std::vector<OpId>>> by_sink;
  std::vector<bool> used(g.num_ops(), false);
  for (OpId op : *order) {
    const graph::Op& o = g.op(op);
    if (o.phase != graph::Phase::kForward || used[op] || o.inputs.empty()) continue;
    bool reads_input = false, starts = true;
    for (graph::TensorId t : o.inputs) {
      starts = starts && fed(t);
      reads_input = reads_input || g.tensor(t).role == graph::TensorRole::kInput;
    }
    if (!starts || !reads_input) continue;
    std::vector<OpId> chain = {op};
    OpId sink = graph::kNoId;
    for (OpId cur = op;;) {
      const graph::Op& c = g.op(cur);
      if (c.outputs.size() != 1 || is_output(c.outputs[0])) break;
      const std::vector<OpId> next = distinct_consumers(c.outputs[0]);
      if (next.size() != 1 || g.op(next[0]).phase != graph::Phase::kForward) break;
      bool continues = g.op(next[0]).outputs.size() == 1;
      for (graph::TensorId t : g.op(next[0]).inputs)
        continues = continues && (t == c.outputs[0] || fed(t));
      if (!continues) {
        sink = next[0];
        break;
      }
      chain.push_back(next[0]);
      cur = next[0];
    }
    if (sink == graph::kNoId) continue;
    for (OpId x : chain) used[x] = true;
    by_sink[sink].push_back(std::move(chain));
  }
  std::vector<StrandBlock> out;
  for (auto& [sink, strands] : by_sink) {
    if (strands.size() < 2) continue;
    out.push_back({.sink = sink, .strands = std::move(strands)});
  }
  return out;
}

const OpParallelization* ParallelizeResult::Find(std::string_view op_name) const {
  for (const OpParallelization& o : ops)
    if (o.name == op_name) return &o;
  return nullptr;
}

const DataDegreeCandidate* ParallelizeResult::Candidate(int data_degree) const {
  for (const DataDegreeCandidate& c : candidates)
    if (c.data_degree == data_degree) return &c;
  return nullptr;
}

std::string CandidateTableString(const ParallelizeResult& r) {
  std::string out;
  for (const DataDegreeCandidate& c : r.candidates) {
    absl::StrAppendFormat(&out, "D=%-2d M=%-2d ", c.data_degree, c.model_degree);
    for (const StrandPlacement& b : c.strand_blocks)
      absl::StrAppendFormat(&out, "%d strands side by side on %d devices each  ", b.strands,
                            b.devices_per_strand);
    if (c.has_plan) {
      absl::StrAppendFormat(&out, "%10.3f ms  %.2f GiB/device  %s  ", c.time_s * 1e3,
                            c.memory.total_bytes / double{1 << 30},
                            DeviceMemoryString(c.memory));
    }
    absl::StrAppend(&out, c.status.ok() ? "fits" : absl::StrCat("dropped: ", c.status.message()),
                    "\n");
  }
  return out;
}

MachineView ConfigView(int d, int m) {
  MachineView v;
  if (d > 1) {
    v.dims.push_back(d);
    v.strides.push_back(m);
  }
  if (m > 1) {
    v.dims.push_back(m);
    v.strides.push_back(1);
  }
  if (v.dims.empty()) {
    v.dims = {1};
    v.strides = {1};
  }
  return v;
}

absl::StatusOr<double> ViewCollectiveTime(const ClusterSpec& cluster, int d, int m, int part,
                                          Collective c, int64_t bytes, int group_size) {
  ASSIGN_OR_RETURN(PhysView pv, MakePhysView(cluster, d, m));
  return PartTime(pv, part, c, bytes, group_size);
}

graph::ParallelTensorShape LossInputLayout(const graph::ParallelTensorShape& output) {
  ParallelTensorShape want =
      graph::UnpartitionedShape(graph::LogicalShape(output), output.dtype);
  const absl::StatusOr<int> total = graph::TotalDegree(output);
  const int n = total.ok() ? *total : 1;
  if (want.dims.empty()) {
    want.replica_degree = n;
    return want;
  }
  // Rows over every device where they divide (a ReduceScatter from partial
  // sums, a local slice from copies), else the output's own row split.
  const int rows = want.dims[0].size % n == 0 ? n : output.dims[0].degree;
  want.dims[0].degree = rows;
  want.replica_degree = n / rows;
  return want;
}

absl::StatusOr<double> ViewTransitionStepTime(const ClusterSpec& cluster, int d, int m,
                                              const Transition& transition,
                                              const costmodel::CollectiveStep& step) {
  ASSIGN_OR_RETURN(PhysView pv, MakePhysView(cluster, d, m));
  return PartTime(pv, StepPart(transition.ops, step), step.collective, step.bytes,
                  step.group_size);
}

namespace {

struct ChainSolution {
  double cost = 0;
  std::vector<int> configs;  // per node
};

// The machine-mapping DP of the left-deep chain, solved as a frontier DP:
// the state after node k is the configs of the nodes some later node reads
// (the "live" nodes; a bottleneck tensor leaves one), so a stretch between
// bottlenecks is solved once per state instead of once per placement of
// everything before it. It computes the same minimum as
// FindOptimalMachineMapping on the series tree built beside it (every op
// spans all `degree` devices, so a placement is its config; OpCost and
// MovementCost ignore the view), without carrying every prefix's placement
// map through each combination: that copying made BERT-Large's 1,000-node
// chain take minutes. Movement costs are tabulated per edge and config pair.
// ResourceExhausted when a step holds more than `max_states` states;
// StopToken::ToStatus once `stop` fires (polled per node and every
// kStopPollStates states).
absl::StatusOr<ChainSolution> SolveChain(const MachineMappingProblem& p,
                                         const std::vector<OpInfo>& infos,
                                         const std::vector<std::vector<BoundaryTensor>>& reads_of,
                                         const std::vector<int>& last_use, ViewAwareCosts& costs,
                                         int64_t max_states, const StopToken& stop) {
  constexpr int64_t kStopPollStates = 1 << 12;
  const int n = static_cast<int>(infos.size());
  const MachineView none;
  // An edge j -> k: movement[cj * |Ck| + ck].
  struct Edge {
    int from = 0;
    std::vector<double> movement;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (int k = 0; k < n; ++k) {
    if (stop.StopRequested()) return stop.ToStatus("parallelize");
    const int ck_n = static_cast<int>(infos[k].configs.size());
    for (const BoundaryTensor& b : reads_of[k]) {
      Edge e;
      e.from = b.producer_op;
      const int cj_n = static_cast<int>(infos[e.from].configs.size());
      e.movement.resize(static_cast<size_t>(cj_n) * ck_n);
      for (int cj = 0; cj < cj_n; ++cj)
        for (int ck = 0; ck < ck_n; ++ck) {
          ASSIGN_OR_RETURN(double m, costs.MovementCost(b, p.ops[e.from], {cj, none}, p.ops[k],
                                                        {ck, none}));
          e.movement[static_cast<size_t>(cj) * ck_n + ck] = m;
        }
      edges[k].push_back(std::move(e));
    }
  }
  // The states of a step are every combination of the live nodes' configs,
  // numbered in mixed radix (live node i has stride stride[i]): dense arrays
  // indexed by that number, no hashing.
  std::vector<int> live;
  std::vector<int64_t> stride;  // per live node
  std::vector<double> cost = {0.0};
  // Per step: for each state, the previous step's state and this node's config.
  struct Back {
    int32_t prev = -1;
    int32_t config = -1;
  };
  std::vector<std::vector<Back>> back(n);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int k = 0; k < n; ++k) {
    if (stop.StopRequested()) return stop.ToStatus("parallelize");
    const OpInfo& info = infos[k];
    const int ck_n = static_cast<int>(info.configs.size());
    auto radix = [&](int node) { return static_cast<int64_t>(infos[node].configs.size()); };
    std::vector<int> pos(edges[k].size());
    for (size_t e = 0; e < edges[k].size(); ++e) {
      pos[e] = static_cast<int>(std::find(live.begin(), live.end(), edges[k][e].from) -
                                live.begin());
      if (pos[e] >= static_cast<int>(live.size())) {
        return absl::InternalError(absl::StrCat("parallelize: node ", k, " reads node ",
                                                edges[k][e].from, ", which is not live"));
      }
    }
    // Live after k: the old ones still read later, then k if it is.
    std::vector<int> keep, next_live;
    std::vector<int64_t> next_stride;
    int64_t states = 1;
    for (size_t i = 0; i < live.size(); ++i)
      if (last_use[live[i]] > k) {
        keep.push_back(static_cast<int>(i));
        next_live.push_back(live[i]);
        next_stride.push_back(states);
        states *= radix(live[i]);
      }
    const bool k_live = last_use[k] > k;
    const int64_t k_stride = states;
    if (k_live) {
      next_live.push_back(k);
      next_stride.push_back(states);
      states *= ck_n;
    }
    if (states > max_states || states > std::numeric_limits<int32_t>::max()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "parallelize: more than ", max_states, " DP states at ", p.ops[k].name));
    }
    if (ck_n == 0) {
      return absl::NotFoundError(absl::StrCat("parallelize: no config for ", p.ops[k].name));
    }
    std::vector<double> ncost(states, kInf);
    std::vector<Back>& nback = back[k];
    nback.assign(states, Back{});
    std::vector<int> producer_cfg(edges[k].size());
    for (int64_t st = 0; st < static_cast<int64_t>(cost.size()); ++st) {
      if (st % kStopPollStates == kStopPollStates - 1 && stop.StopRequested())
        return stop.ToStatus("parallelize");
      if (cost[st] == kInf) continue;
      int64_t base = 0;
      for (size_t i = 0; i < keep.size(); ++i)
        base += (st / stride[keep[i]]) % radix(live[keep[i]]) * next_stride[i];
      for (size_t e = 0; e < edges[k].size(); ++e)
        producer_cfg[e] = static_cast<int>((st / stride[pos[e]]) % radix(live[pos[e]]));
      for (int c = 0; c < ck_n; ++c) {
        double t = cost[st] + info.compute[c] + info.grad_sync[c] + info.OutputMove(c);
        for (size_t e = 0; e < edges[k].size(); ++e)
          t += edges[k][e].movement[static_cast<size_t>(producer_cfg[e]) * ck_n + c];
        const int64_t to = base + (k_live ? c * k_stride : 0);
        if (t < ncost[to]) {
          ncost[to] = t;
          nback[to] = {static_cast<int32_t>(st), c};
        }
      }
    }
    live = std::move(next_live);
    stride = std::move(next_stride);
    cost = std::move(ncost);
  }
  int best = 0;
  for (size_t st = 1; st < cost.size(); ++st)
    if (cost[st] < cost[best]) best = static_cast<int>(st);
  if (cost[best] == kInf) return absl::NotFoundError("parallelize: no feasible plan");
  ChainSolution out;
  out.cost = cost[best];
  out.configs.assign(n, 0);
  for (int k = n - 1, st = best; k >= 0; --k) {
    out.configs[k] = back[k][st].config;
    st = back[k][st].prev;
  }
  return out;
}

}  // namespace

// One DP run at total degree `degree` (validated by the caller).
// An op's entry in the plan under its candidate config `c`.
static OpParallelization Chosen(const Graph& forward, const OpInfo& info, int c) {
  OpParallelization o;
  o.op = info.op;
  o.name = forward.op(info.op).name;
  o.config = info.configs[c];
  o.opaque = info.opaque;
  o.data_degree = DataDegree(o.config);
  o.model_degree = o.config.TotalDegree() / o.data_degree;
  o.view = ConfigView(o.data_degree, o.model_degree);
  o.compute_s = info.compute[c];
  o.grad_sync_s = info.grad_sync[c];
  o.layouts = info.layouts[c];
  return o;
}

// `side_by_side`: blocks of strands collapsed into one DP node each, whose
// choices are BuildBlock's options (blocks without one stay as they are);
// NotFound when none has one.
static absl::StatusOr<ParallelizeResult> ParallelizeOnce(
    const Graph& forward, const ClusterSpec& cluster, costmodel::CostModel& cm, int degree,
    const ParallelizeOptions& options, const std::vector<StrandBlock>* side_by_side = nullptr) {
  ASSIGN_OR_RETURN(std::vector<OpId> order, forward.TopologicalOrder());
  // The collectives as measured on these ranks where the cost model has
  // them (`braid profile comm`, the parallel measurements' benchmark): the
  // link priors put cpu-local's reduce-scatter chain of row layers at a
  // fifth of what the ranks spend in it (BENCHMARKS.md, parallel training
  // on cpu-local).
  const auto* ccm = dynamic_cast<const costmodel::ClusterCostModel*>(&cm);
  const costmodel::CommModel* measured = ccm != nullptr ? &ccm->comm() : nullptr;
  PhysViews views(cluster, measured);
  std::vector<BlockNode> blocks;
  std::map<OpId, int> block_at_sink;      // sink op -> its block
  std::vector<bool> in_block(forward.num_ops(), false);
  if (side_by_side != nullptr) {
    for (const StrandBlock& b : *side_by_side) {
      ASSIGN_OR_RETURN(BlockNode node, BuildBlock(forward, b, cluster, cm, measured, degree, options));
      if (node.options.empty()) continue;
      for (const std::vector<OpId>& st : b.strands)
        for (OpId op : st) in_block[op] = true;
      block_at_sink[b.sink] = static_cast<int>(blocks.size());
      blocks.push_back(std::move(node));
    }
    if (blocks.empty()) {
      return absl::NotFoundError("parallelize: no block of strands can run side by side here");
    }
  }
  std::map<OpId, OpInfo> built;
  for (OpId op : order) {
    if (forward.op(op).phase != graph::Phase::kForward || in_block[op]) continue;
    if (options.stop.StopRequested()) return options.stop.ToStatus("parallelize");
    ASSIGN_OR_RETURN(OpInfo info, BuildOpInfo(forward, op, views, cm, degree, options));
    // The loss reads whole rows: a graph output split on another dim, or
    // holding partial sums, is moved first (what a per-device graph does,
    // search/parallel_graph.h).
    const std::vector<graph::TensorId>& outs = forward.op(op).outputs;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (std::find(forward.outputs().begin(), forward.outputs().end(), outs[k]) ==
          forward.outputs().end()) {
        continue;
      }
      info.output_move.resize(info.configs.size(), 0.0);
      for (size_t c = 0; c < info.configs.size(); ++c) {
        const OpLayouts& l = info.layouts[c];
        const ParallelTensorShape& y = l.outputs[k];
        const int d = DataDegree(info.configs[c]);
        const int m = std::max(1, *graph::TotalDegree(y) / d);
        ASSIGN_OR_RETURN(Transition tr,
                         LayoutTransition(y, LossInputLayout(y),
                                          l.output_partial_sums ? ReplicaKind::kPartialSums
                                                                : ReplicaKind::kCopies));
        ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, TransitionComm(tr));
        ASSIGN_OR_RETURN(const PhysView* pv, views.Get(d, m));
        double t = 0;
        for (const costmodel::CollectiveStep& st : steps)
          t += PartTime(*pv, StepPart(tr.ops, st), st.collective, st.bytes, st.group_size);
        info.output_move[c] += t * (1 + options.backward_comm_factor);
      }
    }
    built.emplace(op, std::move(info));
  }
  // Problem ops in topological order, each op followed by a fan-out node for
  // an output read by several ops; `supplier` maps a tensor to the node its
  // consumers read it from.
  std::vector<OpInfo> infos;
  std::map<graph::TensorId, int> supplier;
  for (OpId op : order) {
    auto it = built.find(op);
    if (it == built.end()) continue;
    if (auto b = block_at_sink.find(op); b != block_at_sink.end()) {
      // The block's node, right before the sink: its strands read nothing
      // from other ops, so the chain may run them anywhere before.
      OpInfo bi;
      bi.block = b->second;
      for (const BlockOption& o : blocks[b->second].options) {
        bi.configs.emplace_back();
        bi.compute.push_back(o.busiest_s);
        bi.grad_sync.push_back(0.0);
      }
      for (graph::TensorId t : blocks[b->second].outputs) supplier[t] = static_cast<int>(infos.size());
      infos.push_back(std::move(bi));
    }
    const int node = static_cast<int>(infos.size());
    const std::vector<graph::TensorId> outs = forward.op(op).outputs;
    for (graph::TensorId t : outs) supplier[t] = node;
    infos.push_back(std::move(it->second));
    for (size_t k = 0; k < outs.size(); ++k) {
      const graph::TensorId t = outs[k];
      std::vector<OpId> readers;
      for (OpId c : forward.tensor(t).consumers)
        if (built.contains(c) && std::find(readers.begin(), readers.end(), c) == readers.end())
          readers.push_back(c);
      if (readers.size() < 2) continue;
      OpInfo f;
      f.fanout = true;
      f.tensor = t;
      f.op = op;
      f.from_node = node;
      f.output_index = static_cast<int>(k);
      for (OpId c : readers) {
        const OpInfo& ci = built.at(c);
        const graph::Op& co = forward.op(c);
        for (const OpLayouts& l : ci.layouts)
          for (size_t i = 0; i < co.inputs.size(); ++i)
            if (co.inputs[i] == t &&
                std::find(f.fanout_layouts.begin(), f.fanout_layouts.end(), l.inputs[i]) ==
                    f.fanout_layouts.end())
              f.fanout_layouts.push_back(l.inputs[i]);
      }
      f.configs.assign(f.fanout_layouts.size(), ParallelConfig{});
      f.compute.assign(f.fanout_layouts.size(), 0.0);
      f.grad_sync.assign(f.fanout_layouts.size(), 0.0);
      supplier[t] = static_cast<int>(infos.size());
      infos.push_back(std::move(f));
    }
  }
  if (infos.empty()) return ParallelizeResult{};
  MachineMappingProblem p;
  p.resources.num_devices = degree;
  for (size_t k = 0; k < infos.size(); ++k) {
    const OpInfo& info = infos[k];
    if (info.block >= 0) {
      MappedOp mo{.id = static_cast<int>(k),
                  .name = absl::StrCat(forward.op(blocks[info.block].block->sink).name,
                                       ".strands"),
                  .configs = {}};
      for (const BlockOption& o : blocks[info.block].options)
        mo.configs.push_back({absl::StrCat("side by side, ", o.q, " devices each"), degree});
      p.ops.push_back(std::move(mo));
      continue;
    }
    MappedOp mo{.id = static_cast<int>(k),
                .name = info.fanout ? absl::StrCat(forward.tensor(info.tensor).name, ".fanout")
                                    : forward.op(info.op).name,
                .configs = {}};
    for (size_t c = 0; c < info.configs.size(); ++c)
      mo.configs.push_back({info.fanout ? graph::ParallelShapeString(info.fanout_layouts[c])
                                        : ParallelConfigString(info.configs[c]),
                            degree});
    p.ops.push_back(std::move(mo));
  }
  // Left-deep series chain: the split before node k carries what node k
  // reads from earlier nodes.
  std::vector<int> last_use(infos.size(), -1);  // the last node reading node j
  std::vector<std::vector<BoundaryTensor>> reads_of(infos.size());
  int root = p.AddLeaf(0);
  for (int k = 1; k < static_cast<int>(infos.size()); ++k) {
    std::vector<BoundaryTensor> crossing;
    std::vector<graph::TensorId> reads;
    if (infos[k].fanout) {
      reads.push_back(infos[k].tensor);
    } else if (infos[k].block < 0) {
      reads = forward.op(infos[k].op).inputs;
    }
    for (graph::TensorId t : reads) {
      int from = -1;
      if (infos[k].fanout) {
        from = infos[k].from_node;  // the producer, just before its fan-outs
      } else if (auto it = supplier.find(t); it != supplier.end()) {
        from = it->second;
      }
      if (from < 0 || from >= k) continue;
      if (std::any_of(crossing.begin(), crossing.end(),
                      [&](const BoundaryTensor& b) { return b.producer_op == from; })) {
        continue;
      }
      crossing.push_back({.producer_op = from, .consumer_op = k,
                          .bytes = forward.tensor(t).Bytes()});
      last_use[from] = std::max(last_use[from], k);
    }
    reads_of[k] = crossing;
    root = p.AddSeries(root, p.AddLeaf(k), std::move(crossing));
  }
  p.root = root;
  if (options.max_frontier_states > 0) {
    // Nodes j < k read at or after k are fixed while the prefix before k is
    // solved: the prefix has one memo entry per combination of their choices.
    // Node j is such a node for k in [j + 1, last_use[j]]: the product is
    // kept as nodes enter and leave (one pass, not one per pair of nodes).
    const int n = static_cast<int>(infos.size());
    std::vector<std::vector<int>> leaving(n + 1);
    for (int j = 0; j < n; ++j)
      if (last_use[j] > j) leaving[last_use[j] + 1 < n ? last_use[j] + 1 : n].push_back(j);
    double peak = 0, fixed = 1;
    int at = 0;
    for (int k = 1; k < n; ++k) {
      if (last_use[k - 1] >= k) fixed *= static_cast<double>(infos[k - 1].configs.size());
      for (int j : leaving[k]) fixed /= static_cast<double>(infos[j].configs.size());
      const double states = static_cast<double>(infos[k].configs.size()) * fixed;
      if (states > peak) {
        peak = states;
        at = k;
      }
    }
    if (peak > options.max_frontier_states) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "parallelize: DP frontier peaks at %.3g placements (at %s), over max_frontier_states "
          "%.3g",
          peak, p.ops[at].name, options.max_frontier_states));
    }
  }
  ViewAwareCosts costs(forward, views, options, infos, blocks, supplier, degree);
  ChainSolution r;
  if (options.reference_solver) {
    ASSIGN_OR_RETURN(MachineMappingResult mm,
                     FindOptimalMachineMapping(p, costs, nullptr, options.max_boundary_choices));
    r.cost = mm.cost;
    for (size_t k = 0; k < infos.size(); ++k)
      r.configs.push_back(mm.placements.at(static_cast<int>(k)).config);
  } else {
    ASSIGN_OR_RETURN(r, SolveChain(p, infos, reads_of, last_use, costs,
                                   options.max_boundary_choices, options.stop));
  }
  ParallelizeResult out;
  out.time_s = r.cost;
  for (size_t k = 0; k < infos.size(); ++k) {
    const OpInfo& info = infos[k];
    if (info.fanout) continue;
    const int c = r.configs[k];
    if (info.block >= 0) {
      const BlockNode& b = blocks[info.block];
      const BlockOption& bo = b.options[c];
      const int sink = last_use[k];
      StrandPlacement sp;
      sp.sink = forward.op(b.block->sink).name;
      sp.strands = static_cast<int>(b.outputs.size());
      sp.devices_per_strand = bo.q;
      sp.groups = bo.groups;
      sp.per_group = bo.per_group;
      sp.compute_s = bo.busiest_compute_s;
      sp.grad_sync_s = bo.busiest_sync_s;
      ASSIGN_OR_RETURN(sp.redistribute_s, RedistributeTime(forward, b, bo, infos[sink],
                                                           r.configs[sink], degree, views,
                                                           options));
      sp.redistribute_forward_s = sp.redistribute_s / (1 + options.backward_comm_factor);
      out.strand_blocks.push_back(std::move(sp));
      for (size_t s = 0; s < bo.strands.size(); ++s) {
        const StrandSolution& ss = bo.strands[s];
        for (size_t j = 0; j < ss.infos.size(); ++j) {
          OpParallelization o = Chosen(forward, ss.infos[j], ss.configs[j]);
          o.first_device = bo.group_of[s] * bo.q;
          o.num_devices = bo.q;
          o.view.start = o.first_device;
          out.ops.push_back(std::move(o));
        }
      }
      continue;
    }
    out.ops.push_back(Chosen(forward, info, c));
  }
  if (!blocks.empty()) {
    std::vector<int> pos(forward.num_ops(), 0);
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
    std::stable_sort(out.ops.begin(), out.ops.end(),
                     [&](const OpParallelization& a, const OpParallelization& b) {
                       return pos[a.op] < pos[b.op];
                     });
  }
  return out;
}

namespace {

DeviceMemory Plus(DeviceMemory a, const DeviceMemory& b) {
  a.parameter_bytes += b.parameter_bytes;
  a.gradient_bytes += b.gradient_bytes;
  a.optimizer_bytes += b.optimizer_bytes;
  a.activation_bytes += b.activation_bytes;
  a.constant_bytes += b.constant_bytes;
  a.total_bytes += b.total_bytes;
  return a;
}

// Every variant of one DP run: all ops on all the devices, and (with
// `blocks`) the blocks side by side. NotFound (the first run's) when neither
// has a plan.
absl::StatusOr<std::vector<ParallelizeResult>> RunVariants(
    const Graph& forward, const ClusterSpec& cluster, costmodel::CostModel& cm, int degree,
    const ParallelizeOptions& o, const std::vector<StrandBlock>& blocks) {
  std::vector<ParallelizeResult> out;
  absl::StatusOr<ParallelizeResult> all = ParallelizeOnce(forward, cluster, cm, degree, o);
  if (all.ok()) {
    out.push_back(*std::move(all));
  } else if (all.status().code() != absl::StatusCode::kNotFound) {
    return all.status();
  }
  if (!blocks.empty()) {
    absl::StatusOr<ParallelizeResult> side =
        ParallelizeOnce(forward, cluster, cm, degree, o, &blocks);
    if (side.ok()) {
      out.push_back(*std::move(side));
    } else if (side.status().code() != absl::StatusCode::kNotFound) {
      return side.status();
    }
  }
  if (out.empty()) return all.status();
  return out;
}

}  // namespace

absl::StatusOr<DeviceMemory> PlanDeviceMemory(const Graph& forward,
                                              const std::vector<OpParallelization>& ops,
                                              const ParallelizeOptions& options) {
  std::map<OpId, ParallelConfig> configs;
  for (const OpParallelization& o : ops)
    if (!o.opaque) configs.emplace(o.op, o.config);
  std::vector<OpId> everywhere;
  std::map<int, std::vector<OpId>> by_group;  // first device -> a group's strand ops
  for (const OpParallelization& o : ops) {
    if (o.num_devices > 0) {
      by_group[o.first_device].push_back(o.op);
    } else {
      everywhere.push_back(o.op);
    }
  }
  if (by_group.empty()) return PerDeviceMemory(forward, configs, options.optimizer, options.memory);
  auto subset = [&](std::vector<OpId> ops_here) {
    MemoryOptions m = options.memory;
    if (!m.ops.empty()) {
      std::vector<OpId> keep;
      for (OpId op : ops_here)
        if (std::find(m.ops.begin(), m.ops.end(), op) != m.ops.end()) keep.push_back(op);
      ops_here = std::move(keep);
    }
    m.ops = std::move(ops_here);
    return m;
  };
  DeviceMemory base;
  if (!everywhere.empty()) {
    ASSIGN_OR_RETURN(base, PerDeviceMemory(forward, configs, options.optimizer, subset(everywhere)));
  }
  DeviceMemory busiest;
  for (auto& [first, group_ops] : by_group) {
    ASSIGN_OR_RETURN(DeviceMemory m,
                     PerDeviceMemory(forward, configs, options.optimizer, subset(group_ops)));
    if (m.total_bytes > busiest.total_bytes) busiest = m;
  }
  return Plus(base, busiest);
}

namespace {

// The config kinds CandidateConfigs leaves out for `forward`'s ops at
// `degree`, per (op type, config kind).
absl::StatusOr<std::vector<DroppedConfigKind>> DroppedKinds(const Graph& forward, int degree) {
  std::map<std::pair<std::string, std::string>, DroppedConfigKind> kinds;
  for (OpId op = 0; op < forward.num_ops(); ++op) {
    const graph::Op& o = forward.op(op);
    if (o.phase != graph::Phase::kForward) continue;
    std::vector<DroppedConfig> dropped;
    absl::StatusOr<std::vector<ParallelConfig>> c = CandidateConfigs(forward, op, degree, &dropped);
    if (!c.ok() && c.status().code() != absl::StatusCode::kUnimplemented) return c.status();
    std::set<std::string> seen;
    for (const DroppedConfig& d : dropped) {
      if (!seen.insert(d.config_kind).second) continue;
      DroppedConfigKind& k = kinds[{o.type, d.config_kind}];
      k.op_kind = o.type;
      k.config_kind = d.config_kind;
      k.why = d.why;
      ++k.ops;
    }
  }
  std::vector<DroppedConfigKind> out;
  for (auto& [key, k] : kinds) out.push_back(std::move(k));
  return out;
}

}  // namespace

absl::StatusOr<ParallelizeResult> ParallelizeForward(const Graph& forward,
                                                     const ClusterSpec& cluster,
                                                     costmodel::CostModel& cm,
                                                     const ParallelizeOptions& options) {
  RETURN_IF_ERROR(costmodel::ValidateCluster(cluster));
  const int degree = options.degree == 0 ? cluster.num_ranks : options.degree;
  if (degree < 1 || degree > cluster.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("parallelize: degree ", degree,
                                                   " outside [1, ", cluster.num_ranks, "]"));
  }
  // Unity's parallel split: blocks of independent strands are tried side by
  // side as well as on all the devices, and the faster kept.
  const std::vector<StrandBlock> blocks = options.parallel_strands && degree > 1
                                              ? IndependentStrands(forward)
                                              : std::vector<StrandBlock>{};
  if (!options.check_memory) {
    ASSIGN_OR_RETURN(std::vector<ParallelizeResult> rs,
                     RunVariants(forward, cluster, cm, degree, options, blocks));
    size_t best = 0;
    for (size_t i = 1; i < rs.size(); ++i)
      if (rs[i].time_s < rs[best].time_s) best = i;
    ParallelizeResult r = std::move(rs[best]);
    if (absl::StatusOr<DeviceMemory> m = PlanDeviceMemory(forward, r.ops, options); m.ok()) {
      r.memory = *m;
    }
    ASSIGN_OR_RETURN(r.dropped, DroppedKinds(forward, degree));
    return r;
  }
  // One DP run per data degree. (No MachineMappingCache is shared between
  // the runs: its entries are keyed by op ids and assume the same candidate
  // configs, which differ from one data degree to the next.)
  ParallelizeResult out;
  int best = -1;
  absl::Status last_error;
  for (int d = 1; d <= degree; ++d) {
    if (degree % d != 0) continue;
    // Stopped: the fastest fitting plan of the data degrees done so far.
    if (options.stop.StopRequested()) {
      if (best >= 0) break;
      return options.stop.ToStatus("parallelize");
    }
    ParallelizeOptions o = options;
    o.filter = [d, &options](const Graph& g, OpId op, const ParallelConfig& c) {
      return DataDegree(c) == d && (!options.filter || options.filter(g, op, c));
    };
    absl::StatusOr<std::vector<ParallelizeResult>> rs =
        RunVariants(forward, cluster, cm, degree, o, blocks);
    if (!rs.ok()) {
      if (StopToken::IsStop(rs.status()) && options.stop.StopRequested()) {
        if (best >= 0) break;
        return rs.status();
      }
      if (rs.status().code() != absl::StatusCode::kNotFound) return rs.status();
      DataDegreeCandidate cand;
      cand.data_degree = d;
      cand.model_degree = degree / d;
      cand.status = rs.status();
      last_error = rs.status();
      out.candidates.push_back(std::move(cand));
      continue;
    }
    for (ParallelizeResult& r : *rs) {
      DataDegreeCandidate cand;
      cand.data_degree = d;
      cand.model_degree = degree / d;
      ASSIGN_OR_RETURN(cand.memory, PlanDeviceMemory(forward, r.ops, options));
      cand.has_plan = true;
      cand.time_s = r.time_s;
      cand.ops = std::move(r.ops);
      cand.strand_blocks = std::move(r.strand_blocks);
      cand.status = CheckFitsDevice(cand.memory, cluster);
      if (cand.status.ok() && (best < 0 || cand.time_s < out.candidates[best].time_s)) {
        best = static_cast<int>(out.candidates.size());
      }
      out.candidates.push_back(std::move(cand));
    }
  }
  if (best < 0) {
    const DataDegreeCandidate* smallest = nullptr;
    for (const DataDegreeCandidate& c : out.candidates)
      if (c.has_plan && (!smallest || c.memory.total_bytes < smallest->memory.total_bytes))
        smallest = &c;
    if (smallest == nullptr) return last_error;
    return absl::ResourceExhaustedError(absl::StrCat(
        "parallelize: no data degree fits the device memory: the smallest plan (data degree ",
        smallest->data_degree, ", model degree ", smallest->model_degree, ") needs ",
        smallest->memory.total_bytes, " bytes per device but device '",
        cluster.device.kind, "' has ", cluster.device.memory_bytes, " bytes (",
        DeviceMemoryString(smallest->memory), ")"));
  }
  ASSIGN_OR_RETURN(out.dropped, DroppedKinds(forward, degree));
  const DataDegreeCandidate& b = out.candidates[best];
  out.time_s = b.time_s;
  out.ops = b.ops;
  out.strand_blocks = b.strand_blocks;
  out.memory = b.memory;
  return out;
}

}  // namespace braid::search
