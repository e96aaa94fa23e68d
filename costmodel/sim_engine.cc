#include "costmodel/sim_engine.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <utility>

#include "glog/logging.h"

namespace braid::costmodel::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kNever = INT_MAX;

// Min-heap order on (time, task): a total order, so the sequence of popped
// live events does not depend on the heap's layout or on stale entries.
struct Later {
  template <typename E>
  bool operator()(const E& a, const E& b) const {
    return a.t > b.t || (a.t == b.t && a.task > b.task);
  }
};

// Builds CSR arrays `off`/`out` from per-row lists produced by `rows(i, f)`.
template <typename ForEach>
void BuildCsr(int n, ForEach for_each, std::vector<int>* off, std::vector<int>* out) {
  off->assign(n + 1, 0);
  for (int i = 0; i < n; ++i) for_each(i, [&](int) { ++(*off)[i + 1]; });
  for (int i = 0; i < n; ++i) (*off)[i + 1] += (*off)[i];
  out->resize((*off)[n]);
  std::vector<int> fill(off->begin(), off->end() - 1);
  for (int i = 0; i < n; ++i) for_each(i, [&](int v) { (*out)[fill[i]++] = v; });
}

}  // namespace

void SimEngine::Load(const SimGraph& g) {
  n_ = static_cast<int>(g.tasks.size());
  num_dev_ = g.num_devices;
  num_chan_ = g.num_channels;
  CHECK_GE(num_dev_, 1) << "SimGraph.num_devices";
  CHECK_GE(num_chan_, 0) << "SimGraph.num_channels";
  kind_.resize(n_);
  res_.resize(n_);
  mdev_.resize(n_);
  dur_.resize(n_);
  alloc_.resize(n_);
  persist_.resize(n_);
  for (int i = 0; i < n_; ++i) {
    const SimTask& t = g.tasks[i];
    kind_[i] = static_cast<uint8_t>(t.kind);
    res_[i] = t.resource;
    mdev_[i] = t.device;
    dur_[i] = t.duration_s;
    alloc_[i] = t.alloc_bytes;
    persist_[i] = t.persistent;
    CHECK(t.resource >= 0 && t.resource < (t.kind == TaskKind::kCompute ? num_dev_ : num_chan_))
        << "task " << i << " (" << t.name << "): resource " << t.resource << " out of range";
    CHECK(t.device >= 0 && t.device < num_dev_)
        << "task " << i << " (" << t.name << "): device " << t.device << " out of range";
    CHECK(t.duration_s >= 0) << "task " << i << " (" << t.name << "): negative duration";
  }
  BuildCsr(
      n_, [&](int i, auto emit) { for (int d : g.tasks[i].deps) emit(d); }, &dep_off_, &dep_);
  BuildCsr(
      n_, [&](int i, auto emit) { for (int d : g.tasks[i].release_after) emit(d); }, &rel_off_,
      &rel_);
  comm_order_ = g.comm_order;
  slow_.assign(num_dev_, 1.0);
  for (int d = 0; d < num_dev_ && d < static_cast<int>(g.compute_slowdown.size()); ++d) {
    slow_[d] = g.compute_slowdown[d];
    CHECK_GT(slow_[d], 0) << "compute_slowdown[" << d << "]";
  }
  resident_.assign(num_dev_, 0);
  for (int d = 0; d < num_dev_ && d < static_cast<int>(g.resident_bytes.size()); ++d) {
    resident_[d] = g.resident_bytes[d];
  }
  BuildDerived();
}

void SimEngine::BuildDerived() {
  for (int v : dep_) CHECK(v >= 0 && v < n_) << "dependency " << v << " out of range";
  for (int v : rel_) CHECK(v >= 0 && v < n_) << "release_after " << v << " out of range";
  // Successors: the transpose of deps.
  succ_off_.assign(n_ + 1, 0);
  for (int v : dep_) ++succ_off_[v + 1];
  for (int i = 0; i < n_; ++i) succ_off_[i + 1] += succ_off_[i];
  succ_.resize(dep_.size());
  {
    std::vector<int> fill(succ_off_.begin(), succ_off_.end() - 1);
    for (int i = 0; i < n_; ++i) {
      for (int k = dep_off_[i]; k < dep_off_[i + 1]; ++k) succ_[fill[dep_[k]]++] = i;
    }
  }
  // Reverse release lists, only for tasks whose bytes are ever released.
  rrel_off_.assign(n_ + 1, 0);
  for (int i = 0; i < n_; ++i) {
    if (persist_[i]) continue;
    for (int k = rel_off_[i]; k < rel_off_[i + 1]; ++k) ++rrel_off_[rel_[k] + 1];
  }
  for (int i = 0; i < n_; ++i) rrel_off_[i + 1] += rrel_off_[i];
  rrel_.resize(rrel_off_[n_]);
  {
    std::vector<int> fill(rrel_off_.begin(), rrel_off_.end() - 1);
    for (int i = 0; i < n_; ++i) {
      if (persist_[i]) continue;
      for (int k = rel_off_[i]; k < rel_off_[i + 1]; ++k) rrel_[fill[rel_[k]]++] = i;
    }
  }
  // Channel issue orders: comm_order entries first, then unlisted comm tasks
  // of the channel in index order.
  std::vector<uint8_t> listed(n_, 0);
  chan_off_.assign(num_chan_ + 1, 0);
  for (int i : comm_order_) {
    CHECK(i >= 0 && i < n_ && kind_[i] == static_cast<uint8_t>(TaskKind::kComm))
        << "comm_order entry " << i << " is not a comm task";
    CHECK(!listed[i]) << "comm_order lists task " << i << " twice";
    listed[i] = 1;
  }
  for (int i = 0; i < n_; ++i) {
    if (kind_[i] == static_cast<uint8_t>(TaskKind::kComm)) ++chan_off_[res_[i] + 1];
  }
  for (int c = 0; c < num_chan_; ++c) chan_off_[c + 1] += chan_off_[c];
  chan_.resize(chan_off_[num_chan_]);
  {
    std::vector<int> fill(chan_off_.begin(), chan_off_.end() - 1);
    for (int i : comm_order_) chan_[fill[res_[i]]++] = i;
    for (int i = 0; i < n_; ++i) {
      if (kind_[i] == static_cast<uint8_t>(TaskKind::kComm) && !listed[i]) {
        chan_[fill[res_[i]]++] = i;
      }
    }
  }
  qoff_.assign(num_dev_ + 1, 0);
  for (int i = 0; i < n_; ++i) {
    if (kind_[i] == static_cast<uint8_t>(TaskKind::kCompute)) ++qoff_[res_[i] + 1];
  }
  for (int d = 0; d < num_dev_; ++d) qoff_[d + 1] += qoff_[d];
  qbuf_.resize(qoff_[num_dev_]);
}

void SimEngine::UpdateTasks(const SimGraph& g, std::span<const int> changed) {
  bool structure = false;
  bool devices = false;
  for (int i : changed) {
    const SimTask& t = g.tasks[i];
    CHECK_EQ(static_cast<uint8_t>(t.kind), kind_[i]) << "UpdateTasks cannot change a task's kind";
    if (t.kind == TaskKind::kComm) CHECK_EQ(t.resource, res_[i]) << "comm channel changed";
    CHECK(t.resource >= 0 && t.resource < (t.kind == TaskKind::kCompute ? num_dev_ : num_chan_));
    CHECK(t.device >= 0 && t.device < num_dev_);
    CHECK(t.duration_s >= 0);
    devices |= t.kind == TaskKind::kCompute && t.resource != res_[i];
    res_[i] = t.resource;
    mdev_[i] = t.device;
    dur_[i] = t.duration_s;
    alloc_[i] = t.alloc_bytes;
    structure |= persist_[i] != t.persistent;
    persist_[i] = t.persistent;
    auto same = [](std::span<const int> a, const std::vector<int>& b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end());
    };
    structure |= !same({dep_.data() + dep_off_[i], dep_.data() + dep_off_[i + 1]}, t.deps);
    structure |=
        !same({rel_.data() + rel_off_[i], rel_.data() + rel_off_[i + 1]}, t.release_after);
  }
  if (structure) {
    BuildCsr(
        n_, [&](int i, auto emit) { for (int d : g.tasks[i].deps) emit(d); }, &dep_off_, &dep_);
    BuildCsr(
        n_, [&](int i, auto emit) { for (int d : g.tasks[i].release_after) emit(d); }, &rel_off_,
        &rel_);
  }
  if (structure || devices) BuildDerived();
}

void SimEngine::MarkDev(int d) {
  if (!dev_dirty_flag_[d]) {
    dev_dirty_flag_[d] = 1;
    dirty_dev_.push_back(d);
  }
}

void SimEngine::MarkChan(int c) {
  if (!chan_dirty_flag_[c]) {
    chan_dirty_flag_[c] = 1;
    dirty_chan_.push_back(c);
  }
}

void SimEngine::PushEvent(Event e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), Later());
}

SimEngine::Event SimEngine::PopEvent() {
  std::pop_heap(heap_.begin(), heap_.end(), Later());
  Event e = heap_.back();
  heap_.pop_back();
  return e;
}

bool SimEngine::Stale(const Event& e) const {
  if (kind_[e.task] != static_cast<uint8_t>(TaskKind::kCompute)) return false;
  const Dev& d = dev_[res_[e.task]];
  return d.running != e.task || d.version != e.version;
}

void SimEngine::Enqueue(int i, int step) {
  Dev& d = dev_[res_[i]];
  qbuf_[d.q_tail++] = i;
  enq_step_[i] = step;
  enq_order_[i] = enq_seq_++;
  MarkDev(res_[i]);
}

void SimEngine::Init() {
  dep_left_.resize(n_);
  rel_left_.resize(n_);
  last_dep_.assign(n_, -1);
  pred_.assign(n_, -1);
  start_.assign(n_, kInf);
  end_.assign(n_, kInf);
  enq_step_.assign(n_, kNever);
  start_step_.assign(n_, kNever);
  fin_step_.assign(n_, kNever);
  enq_order_.assign(n_, -1);
  for (int i = 0; i < n_; ++i) {
    dep_left_[i] = dep_off_[i + 1] - dep_off_[i];
    rel_left_[i] = persist_[i] ? 0 : rel_off_[i + 1] - rel_off_[i] + 1;
  }
  dev_.assign(num_dev_, Dev{});
  chan_state_.assign(num_chan_, Chan{});
  for (int d = 0; d < num_dev_; ++d) {
    dev_[d].q_head = dev_[d].q_tail = qoff_[d];
    dev_[d].mem = resident_[d];
  }
  for (int i = 0; i < n_; ++i) {
    if (persist_[i]) dev_[mdev_[i]].mem += alloc_[i];
  }
  for (Dev& d : dev_) d.peak = d.mem;
  heap_.clear();
  dirty_dev_.clear();
  dirty_chan_.clear();
  dev_dirty_flag_.assign(num_dev_, 0);
  chan_dirty_flag_.assign(num_chan_, 0);
  finished_ = 0;
  enq_seq_ = 0;
  for (int i = 0; i < n_; ++i) {
    if (dep_left_[i] == 0 && kind_[i] == static_cast<uint8_t>(TaskKind::kCompute)) Enqueue(i, 0);
  }
  for (int d = 0; d < num_dev_; ++d) MarkDev(d);
  for (int c = 0; c < num_chan_; ++c) MarkChan(c);
}

void SimEngine::Snapshot() {
  snap_dev_.insert(snap_dev_.end(), dev_.begin(), dev_.end());
  snap_chan_.insert(snap_chan_.end(), chan_state_.begin(), chan_state_.end());
  snap_seq_.push_back(enq_seq_);
  start_log_off_.push_back(static_cast<int>(start_log_.size()));
  fin_log_off_.push_back(static_cast<int>(fin_log_.size()));
}

void SimEngine::Run(bool record) {
  record_ = record;
  snap_dev_.clear();
  snap_chan_.clear();
  snap_seq_.clear();
  start_log_.clear();
  fin_log_.clear();
  start_log_off_.clear();
  fin_log_off_.clear();
  num_steps_ = 0;
  Init();
  if (record_) Snapshot();
  Dispatch(0.0, 0);
  Loop(1);
}

void SimEngine::Loop(int step) {
  for (;; ++step) {
    if (record_) Snapshot();
    while (!heap_.empty() && Stale(heap_.front())) PopEvent();
    if (heap_.empty()) break;
    const double t = heap_.front().t;
    while (!heap_.empty() && heap_.front().t == t) {
      Event e = PopEvent();
      if (!Stale(e)) Finish(e.task, t, step);
    }
    Dispatch(t, step);
  }
  num_steps_ = step + 1;  // the last (empty) step's snapshot is kept too
}

void SimEngine::Finish(int i, double t, int step) {
  end_[i] = t;
  fin_step_[i] = step;
  ++finished_;
  if (record_) fin_log_.push_back(i);
  if (kind_[i] == static_cast<uint8_t>(TaskKind::kCompute)) {
    Dev& d = dev_[res_[i]];
    d.busy += t - start_[i];
    d.running = -1;
    d.last_done = i;
    MarkDev(res_[i]);
  } else {
    Chan& c = chan_state_[res_[i]];
    c.busy += t - start_[i];
    c.running = -1;
    c.last_done = i;
    MarkChan(res_[i]);
    --dev_[mdev_[i]].active_comm;
    MarkDev(mdev_[i]);
  }
  for (int k = succ_off_[i]; k < succ_off_[i + 1]; ++k) {
    const int s = succ_[k];
    if (--dep_left_[s] == 0) {
      last_dep_[s] = i;
      if (kind_[s] == static_cast<uint8_t>(TaskKind::kCompute)) {
        Enqueue(s, step);
      } else {
        MarkChan(res_[s]);
      }
    }
  }
  for (int k = rrel_off_[i]; k < rrel_off_[i + 1]; ++k) {
    const int r = rrel_[k];
    if (--rel_left_[r] == 0) dev_[mdev_[r]].mem -= alloc_[r];
  }
  if (!persist_[i] && --rel_left_[i] == 0) dev_[mdev_[i]].mem -= alloc_[i];
}

void SimEngine::Dispatch(double t, int step) {
  for (size_t k = 0; k < dirty_chan_.size(); ++k) TryStartComm(dirty_chan_[k], t, step);
  for (size_t k = 0; k < dirty_dev_.size(); ++k) {
    const int d = dirty_dev_[k];
    UpdateRate(d, t);
    if (dev_[d].running < 0 && dev_[d].q_head < dev_[d].q_tail) StartCompute(d, t, step);
  }
  for (int c : dirty_chan_) chan_dirty_flag_[c] = 0;
  for (int d : dirty_dev_) dev_dirty_flag_[d] = 0;
  dirty_chan_.clear();
  dirty_dev_.clear();
}

void SimEngine::TryStartComm(int c, double t, int step) {
  Chan& ch = chan_state_[c];
  if (ch.running >= 0 || ch.pos >= chan_off_[c + 1] - chan_off_[c]) return;
  const int i = chan_[chan_off_[c] + ch.pos];
  if (dep_left_[i] != 0) return;
  ++ch.pos;
  ch.running = i;
  start_[i] = t;
  start_step_[i] = step;
  if (record_) start_log_.push_back(i);
  const double ready = last_dep_[i] >= 0 ? end_[last_dep_[i]] : 0.0;
  pred_[i] = ready == t ? last_dep_[i] : ch.last_done;
  if (!persist_[i]) {
    Dev& m = dev_[mdev_[i]];
    m.mem += alloc_[i];
    m.peak = std::max(m.peak, m.mem);
  }
  ++dev_[mdev_[i]].active_comm;
  MarkDev(mdev_[i]);
  PushEvent({t + dur_[i], i, 0});
}

void SimEngine::StartCompute(int d, double t, int step) {
  Dev& dv = dev_[d];
  const int i = qbuf_[dv.q_head++];
  start_[i] = t;
  start_step_[i] = step;
  if (record_) start_log_.push_back(i);
  const double ready = last_dep_[i] >= 0 ? end_[last_dep_[i]] : 0.0;
  pred_[i] = ready == t ? last_dep_[i] : dv.last_done;
  dv.running = i;
  dv.work_left = dur_[i];
  dv.last_update = t;
  dv.finish_at = t + dur_[i] * (dv.slowed ? slow_[d] : 1.0);
  ++dv.version;
  if (!persist_[i]) {
    Dev& m = dev_[mdev_[i]];
    m.mem += alloc_[i];
    m.peak = std::max(m.peak, m.mem);
  }
  PushEvent({dv.finish_at, i, dv.version});
}

void SimEngine::UpdateRate(int d, double t) {
  Dev& dv = dev_[d];
  const bool want = dv.active_comm > 0 && slow_[d] != 1.0;
  if (want == dv.slowed) return;
  if (dv.running >= 0) {
    dv.work_left -= (t - dv.last_update) / (dv.slowed ? slow_[d] : 1.0);
    if (dv.work_left < 0) dv.work_left = 0;
    dv.last_update = t;
    dv.finish_at = t + dv.work_left * (want ? slow_[d] : 1.0);
    ++dv.version;
    PushEvent({dv.finish_at, dv.running, dv.version});
  }
  dv.slowed = want;
}

int SimEngine::FirstAffectedStep(int i, const SimTask& nt) const {
  int k = start_step_[i];
  auto min_fin = [&](auto begin, auto end) {
    for (auto it = begin; it != end; ++it) k = std::min(k, fin_step_[*it]);
  };
  min_fin(dep_.begin() + dep_off_[i], dep_.begin() + dep_off_[i + 1]);
  min_fin(nt.deps.begin(), nt.deps.end());
  min_fin(rel_.begin() + rel_off_[i], rel_.begin() + rel_off_[i + 1]);
  min_fin(nt.release_after.begin(), nt.release_after.end());
  const bool old_nodeps = dep_off_[i + 1] == dep_off_[i];
  const bool same_deps = std::equal(dep_.begin() + dep_off_[i], dep_.begin() + dep_off_[i + 1],
                                    nt.deps.begin(), nt.deps.end());
  // A task without deps is enqueued (or ready) at initialization.
  if (!same_deps && (old_nodeps || nt.deps.empty())) return 0;
  if ((persist_[i] || nt.persistent) &&
      (persist_[i] != nt.persistent || alloc_[i] != nt.alloc_bytes || mdev_[i] != nt.device)) {
    return 0;
  }
  if (kind_[i] == static_cast<uint8_t>(TaskKind::kCompute) && res_[i] != nt.resource) {
    k = std::min(k, enq_step_[i]);
  }
  return k;
}

void SimEngine::RunFrom(int k, std::span<const int> changed) {
  CHECK(record_ && k >= 1 && k < num_steps_) << "RunFrom(" << k << ") outside the recorded run";
  // Rewind the end state of the last run to the state before step k: undo
  // every finish and start logged at steps >= k. The cost is proportional to
  // the work after step k.
  for (size_t e = fin_log_off_[k]; e < fin_log_.size(); ++e) {
    const int j = fin_log_[e];
    for (int x = succ_off_[j]; x < succ_off_[j + 1]; ++x) {
      const int s = succ_[x];
      ++dep_left_[s];
      last_dep_[s] = -1;
    }
    for (int x = rrel_off_[j]; x < rrel_off_[j + 1]; ++x) ++rel_left_[rrel_[x]];
    if (!persist_[j]) ++rel_left_[j];
    end_[j] = kInf;
    fin_step_[j] = kNever;
    --finished_;
  }
  std::vector<std::pair<int64_t, int>> queued;
  for (size_t e = start_log_off_[k]; e < start_log_.size(); ++e) {
    const int j = start_log_[e];
    start_[j] = kInf;
    start_step_[j] = kNever;
    pred_[j] = -1;
    if (kind_[j] == static_cast<uint8_t>(TaskKind::kCompute) && enq_step_[j] < k) {
      queued.push_back({enq_order_[j], j});
    } else {
      enq_step_[j] = kNever;
      enq_order_[j] = -1;
    }
  }
  fin_log_.resize(fin_log_off_[k]);
  start_log_.resize(start_log_off_[k]);
  fin_log_off_.resize(k);
  start_log_off_.resize(k);
  // Changed tasks may have new dependency or release lists: count afresh
  // (none of their old or new deps finished before step k).
  for (int i : changed) {
    int left = 0;
    for (int x = dep_off_[i]; x < dep_off_[i + 1]; ++x) left += fin_step_[dep_[x]] >= k;
    dep_left_[i] = left;
    if (left > 0) last_dep_[i] = -1;
    if (persist_[i]) {
      rel_left_[i] = 0;
    } else {
      int rl = fin_step_[i] >= k;
      for (int x = rel_off_[i]; x < rel_off_[i + 1]; ++x) rl += fin_step_[rel_[x]] >= k;
      rel_left_[i] = rl;
    }
  }
  std::sort(queued.begin(), queued.end());
  // Device and channel state from the snapshot of step k.
  std::copy(snap_dev_.begin() + static_cast<size_t>(k) * num_dev_,
            snap_dev_.begin() + static_cast<size_t>(k + 1) * num_dev_, dev_.begin());
  std::copy(snap_chan_.begin() + static_cast<size_t>(k) * num_chan_,
            snap_chan_.begin() + static_cast<size_t>(k + 1) * num_chan_, chan_state_.begin());
  enq_seq_ = snap_seq_[k];
  snap_dev_.resize(static_cast<size_t>(k) * num_dev_);
  snap_chan_.resize(static_cast<size_t>(k) * num_chan_);
  snap_seq_.resize(k);
  for (int d = 0; d < num_dev_; ++d) dev_[d].q_head = dev_[d].q_tail = qoff_[d];
  for (const auto& [seq, i] : queued) qbuf_[dev_[res_[i]].q_tail++] = i;
  heap_.clear();
  for (const Dev& d : dev_) {
    if (d.running >= 0) heap_.push_back({d.finish_at, d.running, d.version});
  }
  for (const Chan& c : chan_state_) {
    if (c.running >= 0) heap_.push_back({start_[c.running] + dur_[c.running], c.running, 0});
  }
  std::make_heap(heap_.begin(), heap_.end(), Later());
  dirty_dev_.clear();
  dirty_chan_.clear();
  dev_dirty_flag_.assign(num_dev_, 0);
  chan_dirty_flag_.assign(num_chan_, 0);
  Loop(k);
}

void SimEngine::Fill(SimResult* r) const {
  r->start_s = start_;
  r->end_s = end_;
  r->iteration_s = 0;
  int last = -1;
  for (int i = 0; i < n_; ++i) {
    if (last < 0 || end_[i] > end_[last]) last = i;
  }
  r->unfinished_tasks = n_ - finished_;
  r->iteration_s = finished_ < n_ ? kInf : (last >= 0 ? end_[last] : 0.0);
  r->compute_s = 0;
  r->comm_s = 0;
  r->peak_memory_bytes.resize(num_dev_);
  for (int d = 0; d < num_dev_; ++d) {
    r->compute_s = std::max(r->compute_s, dev_[d].busy);
    r->peak_memory_bytes[d] = dev_[d].peak;
  }
  for (const Chan& c : chan_state_) r->comm_s = std::max(r->comm_s, c.busy);
  r->overlap_ratio = r->iteration_s > 0 && finished_ == n_
                         ? (r->compute_s + r->comm_s) / r->iteration_s
                         : 0.0;
  r->critical_path.clear();
  if (finished_ == n_) {
    for (int i = last; i >= 0; i = pred_[i]) r->critical_path.push_back(i);
    std::reverse(r->critical_path.begin(), r->critical_path.end());
  }
}

}  // namespace braid::costmodel::internal
