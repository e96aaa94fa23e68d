#include "search/baselines.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/ops.h"
#include "search/contraction.h"
#include "search/lowering.h"

namespace braid::search {

using graph::Graph;
using graph::OpCategory;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;

const EvaluatedPlan& BaselineResults::Best() const {
  CHECK(!baselines.empty());
  const EvaluatedPlan* best = &baselines[0];
  for (const EvaluatedPlan& b : baselines) {
    if (b.sim.iteration_s < best->sim.iteration_s) best = &b;
  }
  return *best;
}

const EvaluatedPlan* BaselineResults::Find(std::string_view name) const {
  for (const EvaluatedPlan& b : baselines) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

absl::StatusOr<costmodel::SimResult> EvaluatePlan(const Graph& g, const Plan& plan,
                                                  costmodel::CostModel& cm) {
  ASSIGN_OR_RETURN(costmodel::SimGraph sg, Lower(g, plan, cm));
  return costmodel::Simulate(sg);
}

double Speedup(double baseline_s, double plan_s) { return (baseline_s - plan_s) / plan_s; }

std::optional<double> FoGapClosed(double best_baseline_s, double plan_s, double fo_s) {
  const double gap = best_baseline_s - fo_s;
  if (!(gap > 1e-12 * best_baseline_s)) return std::nullopt;
  return (best_baseline_s - plan_s) / gap;
}

double FullyOverlappedBound(std::span<const costmodel::SimResult> results) {
  if (results.empty()) return 0;
  double compute = std::numeric_limits<double>::infinity();
  double comm = std::numeric_limits<double>::infinity();
  for (const costmodel::SimResult& r : results) {
    compute = std::min(compute, r.compute_s);
    comm = std::min(comm, r.comm_s);
  }
  return std::max(compute, comm);
}

// ---------------------------------------------------------------------------
// XLA instruction fusion.

namespace {

bool XlaLibraryCall(OpCategory c) { return c == OpCategory::kMatMul || c == OpCategory::kConv; }

bool XlaConsumerOk(const graph::Op& op) {
  const OpCategory c = graph::CategoryOf(op.kind);
  return MayFuse(op) && !XlaLibraryCall(c) && c != OpCategory::kGather;
}

// HloInstruction::IsExpensive / InstructionFusion::IsExpensive for the
// elementwise vocabulary of graph/ops.h: divisions, square roots,
// transcendentals and random numbers are expensive; add/mul/max/compare/
// select/convert and data movement are cheap. Gradients of expensive ops
// are expensive too, except SigmoidGrad and TanhGrad, which need only
// multiplications of the forward output.
bool XlaIsExpensive(const graph::Op& op) {
  using graph::OpKind;
  if (op.kind == OpKind::kSigmoidGrad || op.kind == OpKind::kTanhGrad) return false;
  switch (graph::IsGradientKind(op.kind) ? graph::GradOf(op.kind) : op.kind) {
    case OpKind::kDiv:
    case OpKind::kSqrt:
    case OpKind::kReciprocal:
    case OpKind::kMod:
    case OpKind::kPow:
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSigmoid:
    case OpKind::kErf:
    case OpKind::kSoftplus:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kTan:
    case OpKind::kAsin:
    case OpKind::kAcos:
    case OpKind::kAtan:
    case OpKind::kSinh:
    case OpKind::kCosh:
    case OpKind::kElu:
    case OpKind::kSelu:
    case OpKind::kCelu:
    case OpKind::kGelu:
    case OpKind::kMish:
    case OpKind::kSoftsign:
    case OpKind::kDropout:
      return true;
    default:
      return false;
  }
}

bool XlaProducerOk(const graph::Op& op) {
  const OpCategory c = graph::CategoryOf(op.kind);
  return MayFuse(op) && (c == OpCategory::kElementwise || c == OpCategory::kDataMovement);
}

// XLA's library-call rewriters, which gpu_compiler.cc runs before
// instruction fusion: GemmRewriter folds a bias add and a ReLU/GELU into the
// cuBLASLt epilogue of a dot, CudnnFusedConvRewriter folds the side input,
// bias and ReLU into a cuDNN fused convolution. Each follows the single-user
// chain below the library call while the device's fusion backend still runs
// the result as one kernel (so on CPU clusters the same folding happens with
// oneDNN post-ops, the backend braid's own plans use). Every intermediate
// must have one user: the rewriters match a pattern whose inner values are
// not read elsewhere.
std::vector<FusionGroup> LibraryEpilogueGroups(const Graph& g,
                                               const costmodel::FusionBackend& backend,
                                               std::span<const OpId> topo) {
  std::vector<FusionGroup> out;
  std::vector<char> taken(g.num_ops(), 0);
  for (OpId lib : topo) {
    if (taken[lib] || !graph::IsLibraryKind(g.op(lib).kind) || !MayFuse(g.op(lib))) continue;
    std::vector<OpId> ops = {lib};
    OpId cur = lib;
    while (true) {
      const graph::Op& op = g.op(cur);
      if (op.outputs.size() != 1) break;
      const graph::Tensor& t = g.tensor(op.outputs[0]);
      if (t.consumers.size() != 1) break;
      if (std::find(g.outputs().begin(), g.outputs().end(), op.outputs[0]) != g.outputs().end()) {
        break;
      }
      const OpId next = t.consumers[0];
      if (taken[next] || !MayFuse(g.op(next)) || graph::IsLibraryKind(g.op(next).kind)) break;
      ops.push_back(next);
      if (!backend.CanImplement(g, ops).ok()) {
        ops.pop_back();
        break;
      }
      cur = next;
    }
    if (ops.size() < 2) continue;
    for (OpId o : ops) taken[o] = 1;
    FusionGroup fg;
    fg.ops = ops;
    std::sort(fg.ops.begin(), fg.ops.end());
    out.push_back(std::move(fg));
  }
  return out;
}

class XlaFusion {
 public:
  XlaFusion(const Graph& g, const BaselineConfig& cfg, const StopToken& stop,
            const costmodel::FusionBackend* backend)
      : g_(g), cfg_(cfg), stop_(stop), backend_(backend) {}

  std::vector<FusionGroup> Run() {
    absl::StatusOr<std::vector<OpId>> topo = g_.TopologicalOrder();
    if (!topo.ok()) return {};
    const int n = g_.num_ops();
    pos_.assign(n, 0);
    for (size_t i = 0; i < topo->size(); ++i) pos_[(*topo)[i]] = static_cast<int>(i);
    home_group_.assign(n, -1);
    dup_groups_.assign(n, {});
    mark_.assign(n, 0);
    ComputeDoNotDuplicate();
    // The library calls with their folded epilogues are custom calls:
    // neither consumers nor producers of instruction fusion.
    if (backend_ != nullptr) {
      for (const FusionGroup& fg : LibraryEpilogueGroups(g_, *backend_, *topo)) {
        const int gi = static_cast<int>(groups_.size());
        groups_.push_back(Group{fg.ops, {}, /*library=*/true});
        for (OpId o : fg.ops) home_group_[o] = gi;
      }
    }
    // gpu_compiler.cc: GpuInstructionFusion(may_duplicate=false), then
    // GpuInstructionFusion(may_duplicate=true). In the second pass the
    // fusions of the first are consumers (visited at their root) but never
    // producers ("the producer is a fusion").
    // A stop leaves the groups formed so far: each is a valid fusion.
    for (bool may_duplicate : {false, true}) {
      for (auto it = topo->rbegin(); it != topo->rend() && !stop_.StopRequested(); ++it) {
        const OpId consumer = *it;
        int group = home_group_[consumer];
        if (group >= 0 && (groups_[group].library || groups_[group].ops.front() != consumer)) {
          continue;  // a library call, or not the root
        }
        if (!XlaConsumerOk(g_.op(consumer))) continue;
        while (!stop_.StopRequested() && FuseOneOperand(consumer, may_duplicate, &group)) {
        }
      }
    }
    std::vector<FusionGroup> out;
    for (const Group& grp : groups_) {
      FusionGroup fg;
      fg.ops = grp.ops;
      fg.ops.insert(fg.ops.end(), grp.dups.begin(), grp.dups.end());
      std::sort(fg.ops.begin(), fg.ops.end());
      fg.duplicated = grp.dups;
      std::sort(fg.duplicated.begin(), fg.duplicated.end());
      out.push_back(std::move(fg));
    }
    return out;
  }

 private:
  struct Group {
    std::vector<OpId> ops;   // non-duplicated members
    std::vector<OpId> dups;  // duplicated members
    bool library = false;    // a library call with its epilogue (LibraryEpilogueGroups)
  };

  bool Contains(int group, OpId op) const {
    if (home_group_[op] == group) return true;
    const std::vector<int>& d = dup_groups_[op];
    return std::find(d.begin(), d.end(), group) != d.end();
  }

  // XLA's ComputeGloballyUnfusible, with CanFuseOnAllPaths approximated by
  // "every direct user is a fusible consumer".
  void ComputeDoNotDuplicate() {
    do_not_dup_.assign(g_.num_ops(), 0);
    for (OpId p = 0; p < g_.num_ops(); ++p) {
      const graph::Op& op = g_.op(p);
      int non_scalar_inputs = 0;
      int64_t in_elems = 0, out_elems = 0;
      std::vector<TensorId> ins = op.inputs;
      std::sort(ins.begin(), ins.end());
      ins.erase(std::unique(ins.begin(), ins.end()), ins.end());
      for (TensorId t : ins) {
        if (g_.tensor(t).NumElements() > 1) ++non_scalar_inputs;
        in_elems += g_.tensor(t).NumElements();
      }
      if (non_scalar_inputs <= 1) continue;  // EffectivelyAtMostUnary
      for (TensorId t : op.outputs) out_elems += g_.tensor(t).NumElements();
      if (in_elems <= out_elems) continue;
      bool all_users_fuse = true;
      for (TensorId t : op.outputs) {
        for (OpId c : g_.tensor(t).consumers) {
          if (!XlaConsumerOk(g_.op(c))) all_users_fuse = false;
        }
      }
      if (!all_users_fuse) do_not_dup_[p] = 1;
    }
  }

  // Keys of the nodes reading p's original output: group G -> G, standalone
  // op c -> -(c + 1).
  std::set<int> Users(OpId p) const {
    std::set<int> users;
    for (TensorId t : g_.op(p).outputs) {
      for (OpId c : g_.tensor(t).consumers) {
        if (home_group_[c] >= 0) {
          if (!Contains(home_group_[c], p)) users.insert(home_group_[c]);
        } else {
          users.insert(-(c + 1));
        }
        for (int gi : dup_groups_[c]) {
          if (!Contains(gi, p)) users.insert(gi);
        }
      }
    }
    return users;
  }

  // Starts a new set of marked ops (Marked: mark_[o] == epoch_), so that
  // membership tests cost O(1): with linear searches a fusion that grows to
  // m ops cost O(m^2) per attempt, minutes on long chains between two polls
  // of the StopToken.
  void NewMarks() {
    if (++epoch_ == 0) {
      std::fill(mark_.begin(), mark_.end(), 0);
      epoch_ = 1;
    }
  }
  bool Marked(OpId o) const { return mark_[o] == epoch_; }

  // Distinct external inputs plus outputs read outside, of the marked ops
  // (all computed ops, `members`) whose non-duplicated subset is `homes`.
  int OperandsAndOutputs(const std::vector<OpId>& members, const std::vector<OpId>& homes) {
    inputs_.clear();
    outputs_.clear();
    for (OpId m : members) {
      for (TensorId t : g_.op(m).inputs) {
        const OpId q = g_.tensor(t).producer;
        if (q == graph::kNoId || !Marked(q)) inputs_.push_back(t);
      }
    }
    for (OpId m : homes) {
      for (TensorId t : g_.op(m).outputs) {
        bool outside = g_.tensor(t).consumers.empty();
        for (OpId c : g_.tensor(t).consumers) {
          if (!Marked(c)) outside = true;
        }
        if (outside) outputs_.push_back(t);
      }
    }
    for (std::vector<TensorId>* v : {&inputs_, &outputs_}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    return static_cast<int>(inputs_.size() + outputs_.size());
  }

  // Tries the operands of the fusion rooted at `consumer` (latest produced
  // first) and fuses the first that qualifies. Returns whether one fused.
  bool FuseOneOperand(OpId consumer, bool may_duplicate, int* group) {
    std::vector<OpId> members, homes;
    if (*group < 0) {
      members = homes = {consumer};
    } else {
      homes = groups_[*group].ops;
      members = homes;
      members.insert(members.end(), groups_[*group].dups.begin(), groups_[*group].dups.end());
    }
    NewMarks();
    for (OpId m : members) mark_[m] = epoch_;
    std::vector<OpId> operands;
    for (OpId m : members) {
      for (TensorId t : g_.op(m).inputs) {
        const OpId q = g_.tensor(t).producer;
        if (q == graph::kNoId) continue;
        if (Marked(q)) continue;
        operands.push_back(q);
      }
    }
    std::sort(operands.begin(), operands.end(),
              [&](OpId a, OpId b) { return pos_[a] > pos_[b]; });
    operands.erase(std::unique(operands.begin(), operands.end()), operands.end());
    const int self = *group < 0 ? -(consumer + 1) : *group;
    for (OpId q : operands) {
      if (!XlaProducerOk(g_.op(q)) || home_group_[q] >= 0) continue;
      const std::set<int> users = Users(q);
      const bool only_self = users.size() == 1 && *users.begin() == self;
      // InstructionFusion::ShouldFuse: "fusion pass cannot duplicate" /
      // "expensive producer would be duplicated"; ComputeGloballyUnfusible.
      if (!only_self && (!may_duplicate || XlaIsExpensive(g_.op(q)) || do_not_dup_[q])) continue;
      std::vector<OpId> new_members = members, new_homes = homes;
      new_members.push_back(q);
      if (only_self) new_homes.push_back(q);
      mark_[q] = epoch_;  // q is an operand, so not a member: unmarked below
      const int operands_and_outputs = OperandsAndOutputs(new_members, new_homes);
      mark_[q] = 0;
      if (operands_and_outputs > cfg_.xla_max_operands_and_outputs_per_fusion) continue;
      // The device's backend must run the grown fusion as one kernel (XLA's
      // own fusibility rules on GPUs; braid's CPU executor on CPUs).
      if (backend_ != nullptr && !backend_->CanImplement(g_, new_members).ok()) continue;
      if (*group < 0) {
        *group = static_cast<int>(groups_.size());
        groups_.push_back(Group{{consumer}, {}});
        home_group_[consumer] = *group;
      }
      if (only_self) {
        groups_[*group].ops.push_back(q);
        home_group_[q] = *group;
      } else {
        groups_[*group].dups.push_back(q);
        dup_groups_[q].push_back(*group);
      }
      return true;
    }
    return false;
  }

  const Graph& g_;
  const BaselineConfig& cfg_;
  const StopToken& stop_;
  const costmodel::FusionBackend* backend_;
  std::vector<uint32_t> mark_;  // see NewMarks
  uint32_t epoch_ = 0;
  std::vector<TensorId> inputs_, outputs_;  // OperandsAndOutputs scratch
  std::vector<int> pos_;
  std::vector<int> home_group_;
  std::vector<std::vector<int>> dup_groups_;
  std::vector<char> do_not_dup_;
  std::vector<Group> groups_;
};

}  // namespace

std::vector<FusionGroup> XlaOpFusionGroups(const Graph& g, const BaselineConfig& cfg,
                                           const StopToken& stop,
                                           const costmodel::FusionBackend* backend) {
  return XlaFusion(g, cfg, stop, backend).Run();
}

// ---------------------------------------------------------------------------
// Tensor fusion policies over sizes.

std::vector<std::vector<int>> CombineAllReduces(std::span<const int64_t> bytes,
                                                int64_t threshold_bytes, int threshold_count) {
  std::vector<std::vector<int>> out;
  std::vector<int> cur;
  int64_t cur_bytes = 0;
  for (int i = 0; i < static_cast<int>(bytes.size()); ++i) {
    if (!cur.empty() && (cur_bytes + bytes[i] > threshold_bytes ||
                         static_cast<int>(cur.size()) >= threshold_count)) {
      out.push_back(std::move(cur));
      cur.clear();
      cur_bytes = 0;
    }
    cur.push_back(i);
    cur_bytes += bytes[i];
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<std::vector<int>> DdpBucketAssignment(std::span<const int64_t> bytes,
                                                  std::span<const int> dtype_keys,
                                                  std::span<const int64_t> limits) {
  CHECK_EQ(bytes.size(), dtype_keys.size());
  CHECK(!limits.empty());
  struct Open {
    std::vector<int> indices;
    int64_t size = 0;
    size_t limit_index = 0;
  };
  std::map<int, Open> open;
  std::vector<int> key_order;
  std::vector<std::vector<int>> out;
  for (int i = 0; i < static_cast<int>(bytes.size()); ++i) {
    const int key = dtype_keys[i];
    if (!open.count(key)) key_order.push_back(key);
    Open& b = open[key];
    b.indices.push_back(i);
    b.size += bytes[i];
    if (b.size >= limits[b.limit_index]) {
      out.push_back(std::move(b.indices));
      b.indices.clear();
      b.size = 0;
      if (b.limit_index + 1 < limits.size()) ++b.limit_index;
    }
  }
  for (int key : key_order) {
    if (!open[key].indices.empty()) out.push_back(std::move(open[key].indices));
  }
  return out;
}

std::vector<std::vector<int>> HorovodBuckets(std::span<const double> ready_s,
                                             std::span<const int64_t> bytes,
                                             std::span<const int> dtype_keys,
                                             int64_t threshold_bytes, double cycle_s) {
  CHECK_EQ(ready_s.size(), bytes.size());
  CHECK_EQ(ready_s.size(), dtype_keys.size());
  CHECK_GT(cycle_s, 0);
  const int n = static_cast<int>(ready_s.size());
  std::vector<std::tuple<int64_t, double, int>> order(n);  // (cycle, ready, index)
  for (int i = 0; i < n; ++i) {
    // A relative epsilon keeps a gradient ready exactly on a tick in it.
    const int64_t cycle =
        static_cast<int64_t>(std::ceil(ready_s[i] / cycle_s * (1 - 1e-12)));
    order[i] = {cycle, ready_s[i], i};
  }
  std::sort(order.begin(), order.end());
  std::vector<std::vector<int>> out;
  int k = 0;
  while (k < n) {
    const int64_t cycle = std::get<0>(order[k]);
    std::vector<int> cur = {std::get<2>(order[k])};
    int64_t size = bytes[cur[0]];
    ++k;
    while (k < n && std::get<0>(order[k]) == cycle) {
      const int i = std::get<2>(order[k]);
      if (dtype_keys[i] != dtype_keys[cur[0]] || size + bytes[i] > threshold_bytes) break;
      cur.push_back(i);
      size += bytes[i];
      ++k;
    }
    out.push_back(std::move(cur));
  }
  return out;
}

// ---------------------------------------------------------------------------
// RunBaselines.

namespace {

struct Simulated {
  Plan plan;
  Contraction contraction;
  std::vector<int> node_task;
  costmodel::SimResult sim;
};

// Fails with StopToken::ToStatus when `stop` fires.
absl::StatusOr<Simulated> SimulateSorted(const Graph& g, std::span<const OpId> topo, Plan plan,
                                         costmodel::CostModel& cm, bool sort_buckets,
                                         const StopToken& stop) {
  Simulated s;
  ASSIGN_OR_RETURN(Contraction c, Contract(g, plan, topo, stop, cm.fusion_backend()));
  if (sort_buckets) SortBucketsByProduction(g, &plan, &c);
  LowerOptions lower;
  lower.stop = &stop;
  ASSIGN_OR_RETURN(costmodel::SimGraph sg, LowerContraction(g, plan, c, cm, &s.node_task, lower));
  s.sim = costmodel::Simulate(sg);
  s.plan = std::move(plan);
  s.contraction = std::move(c);
  return s;
}

// Gradients in production order under `s`'s plan and their sizes.
void GradsInProductionOrder(const Graph& g, const Simulated& s, std::vector<TensorId>* grads,
                            std::vector<int64_t>* bytes) {
  const std::vector<int> pos = ProductionPositions(s.contraction);
  std::vector<std::pair<int, TensorId>> keyed;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role != TensorRole::kGradient) continue;
    keyed.emplace_back(pos[s.contraction.home[g.tensor(t).producer]], t);
  }
  std::sort(keyed.begin(), keyed.end());
  grads->clear();
  bytes->clear();
  for (const auto& [p, t] : keyed) {
    grads->push_back(t);
    bytes->push_back(g.tensor(t).Bytes());
  }
}

Plan WithBuckets(std::vector<FusionGroup> groups, const std::vector<TensorId>& grads,
                 const std::vector<std::vector<int>>& assignment) {
  Plan p;
  p.groups = std::move(groups);
  for (const std::vector<int>& b : assignment) {
    Bucket bucket;
    for (int i : b) bucket.grads.push_back(grads[i]);
    p.buckets.push_back(std::move(bucket));
  }
  return p;
}

}  // namespace

absl::StatusOr<BaselineResults> RunBaselines(const Graph& g, costmodel::CostModel& cm,
                                             const BaselineConfig& cfg, const StopToken& stop) {
  BaselineResults out;
  auto add = [&](std::string name, const Simulated& s) {
    out.baselines.push_back(EvaluatedPlan{std::move(name), s.plan, s.sim});
  };
  auto finish = [&]() -> absl::StatusOr<BaselineResults> {
    std::vector<costmodel::SimResult> sims;
    for (const EvaluatedPlan& b : out.baselines) sims.push_back(b.sim);
    out.fo_bound_s = FullyOverlappedBound(sims);
    return std::move(out);
  };
  // Polled between baselines: a stop keeps those finished.
  auto stopped = [&] {
    if (!stop.StopRequested()) return false;
    out.complete = false;
    return true;
  };
  ASSIGN_OR_RETURN(std::vector<OpId> topo, g.TopologicalOrder());
  // Simulates one baseline's plan; a stop inside it is not an error.
  bool cut_short = false;
  auto simulate = [&](Plan p, bool sort_buckets) {
    absl::StatusOr<Simulated> s = SimulateSorted(g, topo, std::move(p), cm, sort_buckets, stop);
    cut_short = !s.ok() && StopToken::IsStop(s.status()) && stopped();
    return s;
  };

  if (stop.StopRequested()) return stop.ToStatus("baselines");
  absl::StatusOr<Simulated> nf = simulate(NoFusionPlan(g), true);
  if (cut_short) return stop.ToStatus("baselines");
  RETURN_IF_ERROR(nf.status());
  add("no_fusion", *nf);
  if (stopped()) return finish();

  const std::vector<FusionGroup> xla_groups = XlaOpFusionGroups(g, cfg, stop, cm.fusion_backend());
  if (stopped()) return finish();  // the groups may be partial
  Plan xla_plan = NoFusionPlan(g);
  xla_plan.groups = xla_groups;
  absl::StatusOr<Simulated> xla = simulate(std::move(xla_plan), true);
  if (cut_short) return finish();
  if (!xla.ok()) {
    return absl::InternalError(absl::StrCat("xla_op_fusion baseline: ", xla.status().message()));
  }
  add("xla_op_fusion", *xla);

  std::vector<TensorId> grads;
  std::vector<int64_t> bytes;
  for (const Simulated* base : {&*nf, &*xla}) {
    if (stopped()) return finish();
    GradsInProductionOrder(g, *base, &grads, &bytes);
    Plan p = WithBuckets(base->plan.groups, grads,
                         CombineAllReduces(bytes, cfg.xla_all_reduce_combine_threshold_bytes,
                                           cfg.xla_all_reduce_combine_threshold_count));
    absl::StatusOr<Simulated> s = simulate(std::move(p), true);
    if (cut_short) return finish();
    RETURN_IF_ERROR(s.status());
    add(base == &*nf ? "allreduce_combiner" : "jax_default", *s);
  }

  if (stopped()) return finish();
  // Ready times from the no-fusion simulation; registration order = first
  // use of each parameter in the (forward) topological order.
  std::vector<int> registration(g.num_tensors(), std::numeric_limits<int>::max());
  for (size_t i = 0; i < topo.size(); ++i) {
    for (TensorId t : g.op(topo[i]).inputs) {
      registration[t] = std::min(registration[t], static_cast<int>(i));
    }
  }
  struct Ready {
    double time;
    int neg_registration;
    TensorId grad;
    bool operator<(const Ready& o) const {
      return std::tie(time, neg_registration, grad) <
             std::tie(o.time, o.neg_registration, o.grad);
    }
  };
  std::vector<Ready> ready;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const graph::Tensor& ten = g.tensor(t);
    if (ten.role != TensorRole::kGradient) continue;
    const int task = nf->node_task[nf->contraction.home[ten.producer]];
    const int reg = ten.grad_of >= 0 ? registration[ten.grad_of] : std::numeric_limits<int>::max();
    ready.push_back({nf->sim.end_s[task], -reg, t});
  }
  std::sort(ready.begin(), ready.end());
  std::vector<double> ready_s;
  std::vector<int> dtypes;
  grads.clear();
  bytes.clear();
  for (const Ready& r : ready) {
    grads.push_back(r.grad);
    bytes.push_back(g.tensor(r.grad).Bytes());
    ready_s.push_back(r.time);
    dtypes.push_back(static_cast<int>(g.tensor(r.grad).dtype));
  }
  {
    Plan p = WithBuckets({}, grads,
                         HorovodBuckets(ready_s, bytes, dtypes, cfg.horovod_fusion_threshold_bytes,
                                        cfg.horovod_cycle_time_s));
    absl::StatusOr<Simulated> s = simulate(std::move(p), false);
    if (cut_short) return finish();
    RETURN_IF_ERROR(s.status());
    add("horovod", *s);
  }
  if (stopped()) return finish();
  {
    const int64_t limits[] = {cfg.ddp_first_bucket_bytes, cfg.ddp_bucket_cap_bytes};
    Plan p = WithBuckets({}, grads, DdpBucketAssignment(bytes, dtypes, limits));
    absl::StatusOr<Simulated> s = simulate(std::move(p), false);
    if (cut_short) return finish();
    RETURN_IF_ERROR(s.status());
    add("ddp", *s);
  }
  return finish();
}

}  // namespace braid::search
