#include "search/fusion_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/op_cost.h"
#include "search/contraction.h"

namespace braid::search {

using graph::OpId;
using graph::TensorId;

namespace {

void EraseValue(std::vector<int>& v, int x) { v.erase(std::remove(v.begin(), v.end(), x), v.end()); }

void SortUnique(std::vector<int>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

absl::Status LibraryConflict(const graph::Graph& g, OpId a, OpId b) {
  return absl::InvalidArgumentError(
      absl::StrCat("fusing would put library ops '", g.op(a).name, "' and '", g.op(b).name,
                   "' in one kernel: a kernel holds at most one library call"));
}

}  // namespace

SearchContext::SearchContext(const graph::Graph& g, const costmodel::FusionBackend* backend)
    : g_(g), backend_(backend) {
  fusible_.resize(g.num_ops());
  for (OpId o = 0; o < g.num_ops(); ++o) fusible_[o] = MayFuse(g.op(o)) ? 1 : 0;
  library_.resize(g.num_ops());
  for (OpId o = 0; o < g.num_ops(); ++o) library_[o] = costmodel::IsLibraryOp(g.op(o)) ? 1 : 0;
  is_output_.assign(g.num_tensors(), 0);
  for (TensorId t : g.outputs()) is_output_[t] = 1;
  stamp_.assign(g.num_ops(), 0);
}

absl::StatusOr<FusionState> FusionState::FromPlan(const SearchContext& ctx, const Plan& plan,
                                                  const StopToken& stop) {
  const graph::Graph& g = ctx.graph();
  ASSIGN_OR_RETURN(std::vector<OpId> topo, g.TopologicalOrder());
  RETURN_IF_ERROR(Contract(g, plan, topo, stop, ctx.backend()).status());
  FusionState st(&ctx);
  const int n = g.num_ops();
  st.nodes_.resize(n);
  st.home_.resize(n);
  st.dup_in_.assign(n, {});
  st.library_of_.assign(n, graph::kNoId);
  for (OpId o = 0; o < n; ++o) {
    st.nodes_[o].members = {o};
    st.home_[o] = o;
    if (ctx.library(o)) st.library_of_[o] = o;
  }
  for (const FusionGroup& grp : plan.groups) {
    std::vector<OpId> homes;
    for (OpId o : grp.ops) {
      if (std::find(grp.duplicated.begin(), grp.duplicated.end(), o) == grp.duplicated.end()) {
        homes.push_back(o);
      }
    }
    // Validity guarantees a non-duplicated sink member.
    const int id = *std::min_element(homes.begin(), homes.end());
    for (OpId m : grp.ops) {
      if (ctx.library(m)) st.library_of_[id] = m;  // validity: at most one
    }
    for (OpId m : homes) {
      if (m == id) continue;
      st.library_of_[m] = graph::kNoId;
      st.nodes_[m].members.clear();
      st.home_[m] = id;
      st.nodes_[id].members.push_back(m);
    }
    for (OpId d : grp.duplicated) {
      st.nodes_[id].dups.push_back(d);
      st.dup_in_[d].push_back(id);
    }
  }
  st.live_pos_.assign(n, -1);
  for (OpId o = 0; o < n; ++o) {
    if (!st.nodes_[o].members.empty() && ctx.fusible(o)) {
      st.live_pos_[o] = static_cast<int>(st.live_.size());
      st.live_.push_back(o);
    }
  }
  st.bucket_of_.assign(g.num_tensors(), -1);
  st.SetBuckets(plan.buckets);
  return st;
}

Plan FusionState::ToPlan() const {
  Plan p;
  for (const Node& node : nodes_) {
    if (node.members.size() + node.dups.size() < 2) continue;
    FusionGroup fg;
    fg.ops = node.members;
    fg.ops.insert(fg.ops.end(), node.dups.begin(), node.dups.end());
    fg.duplicated = node.dups;
    p.groups.push_back(std::move(fg));
  }
  p = Canonicalize(p);
  for (const std::vector<TensorId>& b : buckets_) p.buckets.push_back(Bucket{b});
  return p;
}

void FusionState::SetBuckets(const std::vector<Bucket>& buckets) {
  buckets_.clear();
  for (int bi = 0; bi < static_cast<int>(buckets.size()); ++bi) {
    buckets_.push_back(buckets[bi].grads);
    for (TensorId t : buckets[bi].grads) bucket_of_[t] = bi;
  }
}

bool FusionState::Contains(int node, OpId op) const {
  if (home_[op] == node) return true;
  const std::vector<int>& d = dup_in_[op];
  return std::find(d.begin(), d.end(), node) != d.end();
}

std::vector<int> FusionState::PredNodes(int node) const {
  const graph::Graph& g = ctx_->graph();
  std::vector<int> out;
  for (const std::vector<OpId>* list : {&nodes_[node].members, &nodes_[node].dups}) {
    for (OpId m : *list) {
      for (TensorId t : g.op(m).inputs) {
        const OpId q = g.tensor(t).producer;
        if (q == graph::kNoId || Contains(node, q)) continue;
        out.push_back(home_[q]);
      }
    }
  }
  SortUnique(out);
  return out;
}

std::vector<int> FusionState::SuccNodes(int node) const {
  const graph::Graph& g = ctx_->graph();
  std::vector<int> out;
  for (OpId m : nodes_[node].members) {
    for (TensorId t : g.op(m).outputs) {
      for (OpId c : g.tensor(t).consumers) {
        const int h = home_[c];
        if (h != node && !Contains(h, m)) out.push_back(h);
        for (int y : dup_in_[c]) {
          if (y != node && !Contains(y, m)) out.push_back(y);
        }
      }
    }
  }
  SortUnique(out);
  return out;
}

bool FusionState::NodeFusible(int node) const {
  return !nodes_[node].members.empty() && ctx_->fusible(node);
}

// Whether `target` is reachable from a successor of `from` other than
// `target` itself: fusing `from` into `target` would then close a cycle.
bool FusionState::Reaches(int from, int target) const {
  ++ctx_->epoch_;
  if (ctx_->epoch_ == 0) {
    std::fill(ctx_->stamp_.begin(), ctx_->stamp_.end(), 0);
    ctx_->epoch_ = 1;
  }
  std::vector<int>& stack = ctx_->stack_;
  stack.clear();
  for (int s : SuccNodes(from)) {
    if (s == target) continue;
    ctx_->stamp_[s] = ctx_->epoch_;
    stack.push_back(s);
  }
  while (!stack.empty()) {
    const int x = stack.back();
    stack.pop_back();
    if (x == target) return true;
    for (int y : SuccNodes(x)) {
      if (ctx_->stamp_[y] == ctx_->epoch_) continue;
      ctx_->stamp_[y] = ctx_->epoch_;
      stack.push_back(y);
    }
  }
  return false;
}

void FusionState::RemoveLive(int node) {
  const int pos = live_pos_[node];
  if (pos < 0) return;
  const int last = live_.back();
  live_[pos] = last;
  live_pos_[last] = pos;
  live_.pop_back();
  live_pos_[node] = -1;
}

void FusionState::MergeInto(int into, int from) {
  Node& n = nodes_[into];
  Node& p = nodes_[from];
  for (OpId m : p.members) {
    home_[m] = into;
    n.members.push_back(m);
  }
  for (OpId d : p.dups) {
    EraseValue(dup_in_[d], from);
    if (!Contains(into, d)) {
      n.dups.push_back(d);
      dup_in_[d].push_back(into);
    }
  }
  p.members.clear();
  p.dups.clear();
  if (library_of_[into] == graph::kNoId) library_of_[into] = library_of_[from];
  library_of_[from] = graph::kNoId;
  RemoveLive(from);
  // Duplicates whose home is now this node are plain members.
  std::vector<OpId> kept;
  for (OpId d : n.dups) {
    if (home_[d] == into) {
      EraseValue(dup_in_[d], into);
    } else {
      kept.push_back(d);
    }
  }
  n.dups = std::move(kept);
}

std::vector<OpId> FusionState::DuplicateCopy(int into, int from) const {
  // Copy only the part of `from` the node reads: the ops it reads and their
  // ancestors inside `from` (anything else would feed no member).
  const graph::Graph& g = ctx_->graph();
  const Node& p = nodes_[from];
  std::vector<OpId> p_ops = p.members;
  p_ops.insert(p_ops.end(), p.dups.begin(), p.dups.end());
  auto in_p = [&](OpId o) { return std::find(p_ops.begin(), p_ops.end(), o) != p_ops.end(); };
  std::vector<OpId> copy;
  std::vector<OpId> work;
  for (const std::vector<OpId>* list : {&nodes_[into].members, &nodes_[into].dups}) {
    for (OpId m : *list) {
      for (TensorId t : g.op(m).inputs) {
        const OpId q = g.tensor(t).producer;
        if (q != graph::kNoId && !Contains(into, q) && in_p(q)) work.push_back(q);
      }
    }
  }
  while (!work.empty()) {
    const OpId q = work.back();
    work.pop_back();
    if (std::find(copy.begin(), copy.end(), q) != copy.end()) continue;
    copy.push_back(q);
    for (TensorId t : g.op(q).inputs) {
      const OpId r = g.tensor(t).producer;
      if (r != graph::kNoId && in_p(r) && !Contains(into, r)) work.push_back(r);
    }
  }
  return copy;
}

void FusionState::DuplicateInto(int into, const std::vector<OpId>& copy) {
  for (OpId q : copy) {
    if (ctx_->library(q)) library_of_[into] = q;
    nodes_[into].dups.push_back(q);
    dup_in_[q].push_back(into);
  }
}

absl::Status FusionState::CheckFusionPair(OpId consumer, OpId producer, int* n, int* p) const {
  const graph::Graph& g = ctx_->graph();
  if (consumer < 0 || consumer >= g.num_ops() || producer < 0 || producer >= g.num_ops()) {
    return absl::InvalidArgumentError("op id out of range");
  }
  *n = home_[consumer];
  *p = home_[producer];
  if (!NodeFusible(*n) || !NodeFusible(*p)) {
    return absl::InvalidArgumentError(absl::StrCat("ops '", g.op(consumer).name, "' and '",
                                                   g.op(producer).name, "' are not both fusible"));
  }
  const std::vector<int> preds = PredNodes(*n);
  if (*n == *p || !std::binary_search(preds.begin(), preds.end(), *p)) {
    return absl::InvalidArgumentError(absl::StrCat("the node of '", g.op(producer).name,
                                                   "' is not a predecessor of the node of '",
                                                   g.op(consumer).name, "'"));
  }
  return absl::OkStatus();
}

absl::Status FusionState::BackendAccepts(int n, const std::vector<OpId>& extra) const {
  const costmodel::FusionBackend* backend = ctx_->backend();
  if (backend == nullptr) return absl::OkStatus();
  std::vector<OpId> ops = nodes_[n].members;
  ops.insert(ops.end(), nodes_[n].dups.begin(), nodes_[n].dups.end());
  ops.insert(ops.end(), extra.begin(), extra.end());
  return backend->CanImplement(ctx_->graph(), ops);
}

absl::Status FusionState::FuseNonDuplicate(OpId consumer, OpId producer) {
  int n, p;
  RETURN_IF_ERROR(CheckFusionPair(consumer, producer, &n, &p));
  if (!LibraryCompatible(library_of_[n], library_of_[p])) {
    return LibraryConflict(ctx_->graph(), library_of_[n], library_of_[p]);
  }
  if (Reaches(p, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fusing '", ctx_->graph().op(producer).name, "' into '",
                     ctx_->graph().op(consumer).name, "' would create a cycle"));
  }
  std::vector<OpId> extra = nodes_[p].members;
  extra.insert(extra.end(), nodes_[p].dups.begin(), nodes_[p].dups.end());
  RETURN_IF_ERROR(BackendAccepts(n, extra));
  MergeInto(n, p);
  return absl::OkStatus();
}

absl::Status FusionState::FuseDuplicate(OpId consumer, OpId producer) {
  int n, p;
  RETURN_IF_ERROR(CheckFusionPair(consumer, producer, &n, &p));
  const std::vector<int> succs = SuccNodes(p);
  bool feeds_outputs = false;
  for (OpId m : nodes_[p].members) {
    for (TensorId t : ctx_->graph().op(m).outputs) {
      if (ctx_->is_graph_output(t)) feeds_outputs = true;
    }
  }
  if (succs.size() == 1 && succs[0] == n && !feeds_outputs) {
    // No other successor: nothing to replicate.
    if (!LibraryCompatible(library_of_[n], library_of_[p])) {
      return LibraryConflict(ctx_->graph(), library_of_[n], library_of_[p]);
    }
    std::vector<OpId> extra = nodes_[p].members;
    extra.insert(extra.end(), nodes_[p].dups.begin(), nodes_[p].dups.end());
    RETURN_IF_ERROR(BackendAccepts(n, extra));
    MergeInto(n, p);
  } else {
    const std::vector<OpId> copy = DuplicateCopy(n, p);
    for (OpId q : copy) {
      if (ctx_->library(q) && !LibraryCompatible(library_of_[n], q)) {
        return LibraryConflict(ctx_->graph(), library_of_[n], q);
      }
    }
    RETURN_IF_ERROR(BackendAccepts(n, copy));
    DuplicateInto(n, copy);
  }
  return absl::OkStatus();
}

absl::Status FusionState::MergeBuckets(int a, int b) {
  const int nb = num_buckets();
  if (a < 0 || b < 0 || a >= nb || b >= nb || a == b) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge buckets ", a, " and ", b));
  }
  const int lo = std::min(a, b), hi = std::max(a, b);
  std::vector<TensorId> merged = buckets_[lo];
  merged.insert(merged.end(), buckets_[hi].begin(), buckets_[hi].end());
  buckets_[hi] = std::move(merged);
  buckets_.erase(buckets_.begin() + lo);
  for (int bi = lo; bi < num_buckets(); ++bi) {
    for (TensorId t : buckets_[bi]) bucket_of_[t] = bi;
  }
  return absl::OkStatus();
}

std::vector<int> FusionState::NeighbourBuckets(int b) const {
  const graph::Graph& g = ctx_->graph();
  std::vector<int> out;
  std::vector<int> nodes;
  for (TensorId t : buckets_[b]) {
    const int x = home_[g.tensor(t).producer];
    nodes.push_back(x);
    for (int y : PredNodes(x)) nodes.push_back(y);
    for (int y : SuccNodes(x)) nodes.push_back(y);
  }
  SortUnique(nodes);
  for (int y : nodes) {
    for (OpId m : nodes_[y].members) {
      for (TensorId t : g.op(m).outputs) {
        if (g.tensor(t).role == graph::TensorRole::kGradient && bucket_of_[t] >= 0 &&
            bucket_of_[t] != b) {
          out.push_back(bucket_of_[t]);
        }
      }
    }
  }
  if (b > 0) out.push_back(b - 1);
  if (b + 1 < num_buckets()) out.push_back(b + 1);
  SortUnique(out);
  return out;
}

bool FusionState::TryRandom(Method method, std::mt19937_64& rng) {
  if (method == Method::kAllReduce) {
    if (num_buckets() < 2) return false;
    const int b = std::uniform_int_distribution<int>(0, num_buckets() - 1)(rng);
    const std::vector<int> nb = NeighbourBuckets(b);
    if (nb.empty()) return false;
    const int c = nb[std::uniform_int_distribution<size_t>(0, nb.size() - 1)(rng)];
    return MergeBuckets(b, c).ok();
  }
  if (live_.empty()) return false;
  const int n = live_[std::uniform_int_distribution<size_t>(0, live_.size() - 1)(rng)];
  std::vector<int> preds = PredNodes(n);
  // Non-duplicate fusion of two library-holding nodes can never succeed:
  // leave them out of the draw (a duplicate copy may leave p's library op
  // behind, so FuseDuplicate decides that case).
  const bool dup = method == Method::kDuplicate;
  preds.erase(std::remove_if(preds.begin(), preds.end(),
                             [&](int p) {
                               return !NodeFusible(p) ||
                                      (!dup && !LibraryCompatible(library_of_[n], library_of_[p]));
                             }),
              preds.end());
  if (preds.empty()) return false;
  const int p = preds[std::uniform_int_distribution<size_t>(0, preds.size() - 1)(rng)];
  const OpId consumer = nodes_[n].members.front();
  const OpId producer = nodes_[p].members.front();
  if (method == Method::kNonDuplicate) return FuseNonDuplicate(consumer, producer).ok();
  return FuseDuplicate(consumer, producer).ok();
}

bool FusionState::CanDraw(Method method) const {
  return method == Method::kAllReduce ? num_buckets() >= 2 : !live_.empty();
}

int FusionState::RandomApply(Method method, int n, std::mt19937_64& rng, const StopToken& stop) {
  int done = 0;
  int failed_in_a_row = 0;
  for (int k = 0; k < n; ++k) {
    // Further draws would fail without using rng: stopping changes no result.
    if (!CanDraw(method)) break;
    bool applied = false;
    for (int attempt = 0; attempt < kAttemptsPerApplication && !applied; ++attempt) {
      if (stop.StopRequested()) return done;
      applied = TryRandom(method, rng);
    }
    if (applied) {
      ++done;
      failed_in_a_row = 0;
    } else if (++failed_in_a_row >= kMaxFailedApplications) {
      break;
    }
  }
  return done;
}

}  // namespace braid::search
