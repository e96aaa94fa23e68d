#include "costmodel/internal/sim_engine.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <utility>

#include "glog/logging.h"

namespace braid::costmodel::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

// Wall ticks of `work` full-speed ticks at slowdown `slow`, and back. Pure
// functions of durations, so a shifted run rounds identically.
Tick Slowed(Tick work, double slow) { return std::llround(static_cast<double>(work) * slow); }
Tick WorkDone(Tick wall, double slow) { return std::llround(static_cast<double>(wall) / slow); }

}  // namespace

int TickExponent(int num_tasks, double max_duration_s, double max_slowdown) {
  const double bound =
      static_cast<double>(num_tasks) * max_duration_s * std::max(1.0, max_slowdown);
  CHECK(std::isfinite(bound)) << "SimGraph durations too large to simulate";
  if (!(bound > 0)) return 0;
  int e = 0;
  std::frexp(bound, &e);  // bound < 2^e
  return std::clamp(60 - e, -1000, 1000);
}

int TickExponent(const SimGraph& g) {
  double max_dur = 0;
  for (const SimTask& t : g.tasks) {
    CHECK(t.duration_s >= 0 && std::isfinite(t.duration_s))
        << "task " << t.name << ": invalid duration " << t.duration_s;
    max_dur = std::max(max_dur, t.duration_s);
  }
  double max_slow = 1;
  for (const std::vector<double>* v : {&g.compute_slowdown, &g.comm_slowdown}) {
    for (int d = 0; d < g.num_devices && d < static_cast<int>(v->size()); ++d) {
      CHECK((*v)[d] > 0 && std::isfinite((*v)[d])) << "slowdown[" << d << "]";
      max_slow = std::max(max_slow, (*v)[d]);
    }
  }
  return TickExponent(static_cast<int>(g.tasks.size()), max_dur, max_slow);
}

void SimEngine::Steps::clear() {
  dev.clear();
  chan.clear();
  mem.clear();
  now.clear();
  finished.clear();
}

void SimEngine::Load(const SimGraph& g) {
  n_ = static_cast<int>(g.tasks.size());
  num_dev_ = g.num_devices;
  num_chan_ = g.num_channels;
  CHECK_GE(num_dev_, 1) << "SimGraph.num_devices";
  CHECK_GE(num_chan_, 0) << "SimGraph.num_channels";
  CHECK_LT(n_, kNew / 8) << "too many tasks";
  kind_.resize(n_);
  res_.resize(n_);
  mdev_.resize(n_);
  dur_s_.resize(n_);
  alloc_.resize(n_);
  persist_.resize(n_);
  double max_dur = 0;
  for (int i = 0; i < n_; ++i) {
    const SimTask& t = g.tasks[i];
    kind_[i] = static_cast<uint8_t>(t.kind);
    res_[i] = t.resource;
    mdev_[i] = t.device;
    dur_s_[i] = t.duration_s;
    max_dur = std::max(max_dur, t.duration_s);
    alloc_[i] = t.alloc_bytes;
    persist_[i] = t.persistent;
    CHECK(t.resource >= 0 && t.resource < (t.kind == TaskKind::kCompute ? num_dev_ : num_chan_))
        << "task " << i << " (" << t.name << "): resource " << t.resource << " out of range";
    CHECK(t.device >= 0 && t.device < num_dev_)
        << "task " << i << " (" << t.name << "): device " << t.device << " out of range";
    CHECK(t.duration_s >= 0 && std::isfinite(t.duration_s))
        << "task " << i << " (" << t.name << "): invalid duration " << t.duration_s;
  }
  BuildCsr(
      n_, [&](int i, auto emit) { for (int d : g.tasks[i].deps) emit(d); }, &dep_off_, &dep_);
  BuildCsr(
      n_, [&](int i, auto emit) { for (int d : g.tasks[i].release_after) emit(d); }, &rel_off_,
      &rel_);
  comm_order_ = g.comm_order;
  slow_.assign(num_dev_, 1.0);
  max_slow_ = 1.0;
  for (int d = 0; d < num_dev_ && d < static_cast<int>(g.compute_slowdown.size()); ++d) {
    slow_[d] = g.compute_slowdown[d];
    CHECK(slow_[d] > 0 && std::isfinite(slow_[d])) << "compute_slowdown[" << d << "]";
    max_slow_ = std::max(max_slow_, slow_[d]);
  }
  cslow_.assign(num_dev_, 1.0);
  for (int d = 0; d < num_dev_ && d < static_cast<int>(g.comm_slowdown.size()); ++d) {
    cslow_[d] = g.comm_slowdown[d];
    CHECK(cslow_[d] > 0 && std::isfinite(cslow_[d])) << "comm_slowdown[" << d << "]";
    max_slow_ = std::max(max_slow_, cslow_[d]);
  }
  resident_.assign(num_dev_, 0);
  for (int d = 0; d < num_dev_ && d < static_cast<int>(g.resident_bytes.size()); ++d) {
    resident_[d] = g.resident_bytes[d];
  }
  BuildDerived();
  max_dur_s_ = max_dur;
  Quantize();
  record_ = false;
  num_steps_ = 0;
}

void SimEngine::Quantize() {
  exp_ = TickExponent(n_, max_dur_s_, max_slow_);
  tick_s_ = std::ldexp(1.0, -exp_);
  scale_ = std::ldexp(1.0, exp_);
  dur_.resize(n_);
  for (int i = 0; i < n_; ++i) dur_[i] = ToTicks(dur_s_[i], scale_);
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
  busy_slot_.resize(n_);
  qoff_.assign(num_dev_ + 1, 0);
  for (int i = 0; i < n_; ++i) {
    const bool compute = kind_[i] == static_cast<uint8_t>(TaskKind::kCompute);
    busy_slot_[i] = compute ? res_[i] : num_dev_ + res_[i];
    if (compute) ++qoff_[res_[i] + 1];
  }
  for (int d = 0; d < num_dev_; ++d) qoff_[d + 1] += qoff_[d];
  qbuf_.resize(qoff_[num_dev_]);
}

bool SimEngine::UpdateTasks(const SimGraph& g, std::span<const int> changed) {
  bool structure = false;
  bool devices = false;
  bool rescan = false;  // the longest task got shorter
  for (int i : changed) {
    const SimTask& t = g.tasks[i];
    CHECK_EQ(static_cast<uint8_t>(t.kind), kind_[i]) << "UpdateTasks cannot change a task's kind";
    if (t.kind == TaskKind::kComm) CHECK_EQ(t.resource, res_[i]) << "comm channel changed";
    CHECK(t.resource >= 0 && t.resource < (t.kind == TaskKind::kCompute ? num_dev_ : num_chan_));
    CHECK(t.device >= 0 && t.device < num_dev_);
    CHECK(t.duration_s >= 0 && std::isfinite(t.duration_s))
        << "task " << i << " (" << t.name << "): invalid duration " << t.duration_s;
    devices |= t.kind == TaskKind::kCompute && t.resource != res_[i];
    res_[i] = t.resource;
    mdev_[i] = t.device;
    rescan |= dur_s_[i] == max_dur_s_ && t.duration_s < dur_s_[i];
    dur_s_[i] = t.duration_s;
    max_dur_s_ = std::max(max_dur_s_, t.duration_s);
    dur_[i] = ToTicks(t.duration_s, scale_);
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
  if (rescan) {
    max_dur_s_ = 0;
    for (double d : dur_s_) max_dur_s_ = std::max(max_dur_s_, d);
  }
  if (TickExponent(n_, max_dur_s_, max_slow_) != exp_) {
    Quantize();
    return false;
  }
  return !devices;
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
  if (kind_[e.task] != static_cast<uint8_t>(TaskKind::kCompute)) {
    const Chan& c = chan_state_[res_[e.task]];
    return c.running != e.task || c.version != e.version;
  }
  const Dev& d = dev_[res_[e.task]];
  return d.running != e.task || d.version != e.version;
}

// The dependency and release counts of task i as of the replay's first step,
// counted from the recorded finish steps (a step written by the replay counts
// as "not finished then"). A task is first touched by the replay no later
// than the first finish that changes one of its counts, so at that moment the
// only replayed finish among its deps and release tasks is the current one,
// which is counted here and decremented by the caller.
void SimEngine::InitLazy(int i) {
  stamp_[i] = stamp_now_;
  int dl = 0;
  for (int x = dep_off_[i]; x < dep_off_[i + 1]; ++x) dl += fin_step_[dep_[x]] >= from_;
  dep_left_[i] = dl;
  if (persist_[i]) {
    rel_left_[i] = 0;
  } else {
    int rl = fin_step_[i] >= from_;
    for (int x = rel_off_[i]; x < rel_off_[i + 1]; ++x) rl += fin_step_[rel_[x]] >= from_;
    rel_left_[i] = rl;
  }
}

template <bool kInc>
int& SimEngine::DepLeft(int i) {
  if constexpr (kInc) {
    if (stamp_[i] != stamp_now_) InitLazy(i);
  }
  return dep_left_[i];
}

template <bool kInc>
int& SimEngine::RelLeft(int i) {
  if constexpr (kInc) {
    if (stamp_[i] != stamp_now_) InitLazy(i);
  }
  return rel_left_[i];
}

template <bool kRec, bool kInc>
void SimEngine::Enqueue(int i, int step) {
  Dev& d = dev_[res_[i]];
  if constexpr (kRec) {
    if constexpr (kInc) {
      old_enq_pos_[i] = enq_pos_[i];
      enq_step_[i] = step + kNew;
    } else {
      enq_step_[i] = step;
    }
    enq_pos_[i] = d.q_tail;
  }
  qbuf_[d.q_tail++] = i;
  MarkDev(res_[i]);
}

void SimEngine::Init() {
  dep_left_.resize(n_);
  rel_left_.resize(n_);
  last_dep_.assign(n_, -1);
  pred_.assign(n_, -1);
  start_.assign(n_, kNoTime);
  end_.assign(n_, kNoTime);
  if (record_) {
    enq_step_.assign(n_, kNever);
    start_step_.assign(n_, kNever);
    fin_step_.assign(n_, kNever);
    enq_pos_.assign(n_, -1);
    old_enq_pos_.resize(n_);
    old_start_.resize(n_);
    stamp_.assign(n_, 0);
    stamp_now_ = 0;
  }
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
  peak_.resize(num_dev_);
  for (int d = 0; d < num_dev_; ++d) peak_[d] = dev_[d].mem;
  heap_.clear();
  dirty_dev_.clear();
  dirty_chan_.clear();
  dev_dirty_flag_.assign(num_dev_, 0);
  chan_dirty_flag_.assign(num_chan_, 0);
  now_ = 0;
  finished_ = 0;
  for (int i = 0; i < n_; ++i) {
    if (dep_left_[i] == 0 && kind_[i] == static_cast<uint8_t>(TaskKind::kCompute)) {
      if (record_) {
        Enqueue<true, false>(i, 0);
      } else {
        Enqueue<false, false>(i, 0);
      }
    }
  }
  for (int d = 0; d < num_dev_; ++d) MarkDev(d);
  for (int c = 0; c < num_chan_; ++c) MarkChan(c);
}

void SimEngine::Snapshot(Steps* s) {
  for (const Dev& d : dev_) {
    s->dev.push_back({d.running, d.last_done, d.active_comm, d.version, d.slowed, d.q_head,
                      d.q_tail, d.work_left, d.last_update - now_, d.finish_at - now_});
    s->mem.push_back(d.mem);
  }
  for (const Chan& c : chan_state_) {
    s->chan.push_back({c.running, c.last_done, c.pos, c.slowed, c.version, c.work_left,
                       c.last_update - now_, c.finish_at - now_});
  }
  s->now.push_back(now_);
  s->finished.push_back(finished_);
}

void SimEngine::Run(bool record) {
  record_ = record;
  steps_.clear();
  Init();
  if (record_) {
    Snapshot(&steps_);
    Dispatch<true, false>(0);
    Loop<true, false>(1);
    UpdatePath(-1);
  } else {
    Dispatch<false, false>(0);
    Loop<false, false>(1);
  }
  replayed_ = num_steps_;
}

template <bool kRec, bool kInc>
void SimEngine::Loop(int step) {
  for (;; ++step) {
    if constexpr (kInc) {
      const int old_step = Converged(step);
      if (old_step >= 0) {
        Splice(step, old_step);
        return;
      }
    }
    if constexpr (kRec) Snapshot(kInc ? &replay_steps_ : &steps_);
    while (!heap_.empty() && Stale(heap_.front())) PopEvent();
    if (heap_.empty()) break;
    now_ = heap_.front().t;
    while (!heap_.empty() && heap_.front().t == now_) {
      Event e = PopEvent();
      if (!Stale(e)) Finish<kRec, kInc>(e.task, step);
    }
    Dispatch<kRec, kInc>(step);
  }
  if constexpr (kInc) {
    FinishReplay(step);
  } else {
    num_steps_ = step + 1;  // the last (empty) step's snapshot is kept too
  }
}

template <bool kRec, bool kInc>
void SimEngine::Finish(int i, int step) {
  end_[i] = now_;
  if constexpr (kRec) {
    if constexpr (kInc) {
      max_old_fin_ = std::max(max_old_fin_, fin_step_[i]);
      fin_step_[i] = step + kNew;
    } else {
      fin_step_[i] = step;
    }
  }
  ++finished_;
  if (kind_[i] == static_cast<uint8_t>(TaskKind::kCompute)) {
    Dev& d = dev_[res_[i]];
    d.running = -1;
    d.last_done = i;
    MarkDev(res_[i]);
  } else {
    Chan& c = chan_state_[res_[i]];
    c.running = -1;
    c.last_done = i;
    MarkChan(res_[i]);
    --dev_[mdev_[i]].active_comm;
    MarkDev(mdev_[i]);
  }
  for (int k = succ_off_[i]; k < succ_off_[i + 1]; ++k) {
    const int s = succ_[k];
    if (--DepLeft<kInc>(s) == 0) {
      last_dep_[s] = i;
      if (kind_[s] == static_cast<uint8_t>(TaskKind::kCompute)) {
        Enqueue<kRec, kInc>(s, step);
      } else {
        MarkChan(res_[s]);
      }
    }
  }
  for (int k = rrel_off_[i]; k < rrel_off_[i + 1]; ++k) {
    const int r = rrel_[k];
    if (--RelLeft<kInc>(r) == 0) dev_[mdev_[r]].mem -= alloc_[r];
  }
  if (!persist_[i] && --RelLeft<kInc>(i) == 0) dev_[mdev_[i]].mem -= alloc_[i];
}

template <bool kRec, bool kInc>
void SimEngine::Dispatch(int step) {
  for (size_t k = 0; k < dirty_chan_.size(); ++k) TryStartComm<kRec, kInc>(dirty_chan_[k], step);
  for (size_t k = 0; k < dirty_dev_.size(); ++k) {
    const int d = dirty_dev_[k];
    UpdateRate(d);
    if (dev_[d].running < 0 && dev_[d].q_head < dev_[d].q_tail) StartCompute<kRec, kInc>(d, step);
    UpdateCommRates(d);
  }
  for (int c : dirty_chan_) chan_dirty_flag_[c] = 0;
  for (int d : dirty_dev_) dev_dirty_flag_[d] = 0;
  dirty_chan_.clear();
  dirty_dev_.clear();
}

template <bool kRec, bool kInc>
void SimEngine::TryStartComm(int c, int step) {
  Chan& ch = chan_state_[c];
  if (ch.running >= 0 || ch.pos >= chan_off_[c + 1] - chan_off_[c]) return;
  const int i = chan_[chan_off_[c] + ch.pos];
  if (DepLeft<kInc>(i) != 0) return;
  ++ch.pos;
  ch.running = i;
  if constexpr (kInc) old_start_[i] = start_[i];
  start_[i] = now_;
  if constexpr (kRec) start_step_[i] = kInc ? step + kNew : step;
  const Tick ready = last_dep_[i] >= 0 ? end_[last_dep_[i]] : 0;
  pred_[i] = ready == now_ ? last_dep_[i] : ch.last_done;
  if (!persist_[i]) {
    const int md = mdev_[i];
    dev_[md].mem += alloc_[i];
    if constexpr (!kRec) peak_[md] = std::max(peak_[md], dev_[md].mem);
  }
  ++dev_[mdev_[i]].active_comm;
  MarkDev(mdev_[i]);  // its compute slows down; UpdateCommRates then times this task
  ch.slowed = false;
  ch.work_left = dur_[i];
  ch.last_update = now_;
  ch.finish_at = now_ + dur_[i];
  ++ch.version;
  PushEvent({ch.finish_at, i, ch.version});
}

template <bool kRec, bool kInc>
void SimEngine::StartCompute(int d, int step) {
  Dev& dv = dev_[d];
  const int i = qbuf_[dv.q_head++];
  if constexpr (kInc) old_start_[i] = start_[i];
  start_[i] = now_;
  if constexpr (kRec) start_step_[i] = kInc ? step + kNew : step;
  const Tick ready = last_dep_[i] >= 0 ? end_[last_dep_[i]] : 0;
  pred_[i] = ready == now_ ? last_dep_[i] : dv.last_done;
  dv.running = i;
  dv.work_left = dur_[i];
  dv.last_update = now_;
  dv.finish_at = now_ + (dv.slowed ? Slowed(dur_[i], slow_[d]) : dur_[i]);
  ++dv.version;
  if (!persist_[i]) {
    const int md = mdev_[i];
    dev_[md].mem += alloc_[i];
    if constexpr (!kRec) peak_[md] = std::max(peak_[md], dev_[md].mem);
  }
  PushEvent({dv.finish_at, i, dv.version});
}

void SimEngine::UpdateRate(int d) {
  Dev& dv = dev_[d];
  const bool want = dv.active_comm > 0 && slow_[d] != 1.0;
  if (want == dv.slowed) return;
  if (dv.running >= 0) {
    const Tick elapsed = now_ - dv.last_update;
    dv.work_left -= dv.slowed ? WorkDone(elapsed, slow_[d]) : elapsed;
    if (dv.work_left < 0) dv.work_left = 0;
    dv.last_update = now_;
    dv.finish_at = now_ + (want ? Slowed(dv.work_left, slow_[d]) : dv.work_left);
    ++dv.version;
    PushEvent({dv.finish_at, dv.running, dv.version});
  }
  dv.slowed = want;
}

void SimEngine::UpdateCommRates(int d) {
  if (cslow_[d] == 1.0) return;
  const bool want = dev_[d].running >= 0;
  for (int c = 0; c < num_chan_; ++c) {
    Chan& ch = chan_state_[c];
    if (ch.running < 0 || mdev_[ch.running] != d || ch.slowed == want) continue;
    const Tick elapsed = now_ - ch.last_update;
    ch.work_left -= ch.slowed ? WorkDone(elapsed, cslow_[d]) : elapsed;
    if (ch.work_left < 0) ch.work_left = 0;
    ch.last_update = now_;
    ch.finish_at = now_ + (want ? Slowed(ch.work_left, cslow_[d]) : ch.work_left);
    ch.slowed = want;
    ++ch.version;
    PushEvent({ch.finish_at, ch.running, ch.version});
  }
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

namespace {

// The task finishing last, lowest index on ties; -1 if there are no tasks.
int LastToFinish(const std::vector<Tick>& end) {
  int last = end.empty() ? -1 : 0;
  Tick best = end.empty() ? 0 : end[0];
  for (int i = 1; i < static_cast<int>(end.size()); ++i) {
    if (end[i] > best) {
      best = end[i];
      last = i;
    }
  }
  return last;
}

}  // namespace

void SimEngine::UpdatePath(int converged_at) {
  last_task_ = LastToFinish(end_);
  if (steps_.finished.back() < n_) {
    path_.clear();
    return;
  }
  // After a converged replay the path is the old one except inside the
  // replayed window [from_, converged_at): tasks started before it or after
  // it (shifted) kept their predecessor on the path. Start steps strictly
  // increase along a path, and the old path's are, in today's numbering,
  // < from_, then in the window, then >= converged_at.
  const int last = last_task_;
  if (converged_at >= 0 && !path_.empty() && path_.back() == last &&
      start_step_[last] >= converged_at) {
    auto step_below = [&](int bound) { return [this, bound](int t) { return start_step_[t] < bound; }; };
    const auto q = std::partition_point(path_.begin(), path_.end(), step_below(converged_at));
    std::vector<int>& rev = path_scratch_;
    rev.clear();
    int t = pred_[*q];
    while (t >= 0 && start_step_[t] >= from_) {
      rev.push_back(t);
      t = pred_[t];
    }
    auto keep = path_.begin();  // the old path up to t, which kept its chain
    bool found = true;
    if (t >= 0) {
      const auto a = std::partition_point(path_.begin(), q, step_below(from_));
      keep = std::lower_bound(path_.begin(), a, start_step_[t],
                              [this](int x, int st) { return start_step_[x] < st; });
      found = keep != a && *keep == t;
      ++keep;
    }
    if (found) {
      const size_t head = keep - path_.begin(), tail_from = q - path_.begin();
      const size_t tail = path_.size() - tail_from;
      const size_t at = head + rev.size();
      if (at > tail_from) {
        path_.resize(at + tail);
        std::move_backward(path_.begin() + tail_from, path_.begin() + tail_from + tail, path_.end());
      } else if (at < tail_from) {
        std::move(path_.begin() + tail_from, path_.end(), path_.begin() + at);
        path_.resize(at + tail);
      }
      std::reverse_copy(rev.begin(), rev.end(), path_.begin() + head);
      return;
    }
  }
  path_.clear();
  for (int i = last; i >= 0; i = pred_[i]) path_.push_back(i);
  std::reverse(path_.begin(), path_.end());
}

void SimEngine::Fill(SimResult* r) const {
  const int finished = record_ ? steps_.finished.back() : finished_;
  r->start_s.resize(n_);
  r->end_s.resize(n_);
  // One pass: seconds, and busy ticks per device and channel.
  Tick busy_buf[8] = {};
  std::vector<Tick> busy_vec;
  Tick* busy = busy_buf;
  if (num_dev_ + num_chan_ > 8) {
    busy_vec.assign(num_dev_ + num_chan_, 0);
    busy = busy_vec.data();
  }
  auto convert = [&](int i) {
    const Tick st = start_[i], en = end_[i];
    r->start_s[i] = st == kNoTime ? kInf : static_cast<double>(st) * tick_s_;
    r->end_s[i] = en == kNoTime ? kInf : static_cast<double>(en) * tick_s_;
    return en == kNoTime ? 0 : en - st;
  };
  if (num_dev_ == 1 && num_chan_ <= 1) {
    // The data-parallel shape: sums in registers, not through memory.
    Tick compute_sum = 0, comm_sum = 0;
    for (int i = 0; i < n_; ++i) {
      const Tick b = convert(i);
      const bool compute = busy_slot_[i] == 0;
      compute_sum += compute ? b : 0;
      comm_sum += compute ? 0 : b;
    }
    busy[0] = compute_sum;
    busy[1] = comm_sum;
  } else {
    for (int i = 0; i < n_; ++i) busy[busy_slot_[i]] += convert(i);
  }
  const int last = record_ ? last_task_ : LastToFinish(end_);
  r->unfinished_tasks = n_ - finished;
  r->iteration_s = finished < n_ ? kInf : (last >= 0 ? r->end_s[last] : 0.0);
  Tick compute = 0, comm = 0;
  for (int d = 0; d < num_dev_; ++d) compute = std::max(compute, busy[d]);
  for (int c = 0; c < num_chan_; ++c) comm = std::max(comm, busy[num_dev_ + c]);
  r->compute_s = static_cast<double>(compute) * tick_s_;
  r->comm_s = static_cast<double>(comm) * tick_s_;
  r->overlap_ratio = r->iteration_s > 0 && finished == n_
                         ? (r->compute_s + r->comm_s) / r->iteration_s
                         : 0.0;
  r->peak_memory_bytes.resize(num_dev_);
  if (record_) {
    // Memory only falls while a step finishes tasks and only rises while it
    // dispatches, so its peak is at a step boundary.
    for (int d = 0; d < num_dev_; ++d) {
      int64_t peak = 0;
      for (size_t j = d; j < steps_.mem.size(); j += num_dev_) peak = std::max(peak, steps_.mem[j]);
      r->peak_memory_bytes[d] = peak;
    }
  } else {
    r->peak_memory_bytes.assign(peak_.begin(), peak_.end());
  }
  if (record_) {
    r->critical_path = path_;
  } else {
    r->critical_path.clear();
    if (finished == n_) {
      for (int i = last; i >= 0; i = pred_[i]) r->critical_path.push_back(i);
      std::reverse(r->critical_path.begin(), r->critical_path.end());
    }
  }
}

template void SimEngine::Loop<true, true>(int);

}  // namespace braid::costmodel::internal
