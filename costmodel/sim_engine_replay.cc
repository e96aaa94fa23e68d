// SimEngine::RunFrom: resuming a recorded run after a local change, and
// stopping as soon as the replay has converged back onto the recording.
//
// Why stopping is exact. The engine's behaviour after a step boundary is a
// function of its state there: finished set, running tasks with their finish
// times (and, on a slowed-down device, remaining work and last rate change),
// ready queues in order, per device/channel last finished task and issue
// position, memory in use and the comm count per device. Every computation on
// time has the form `now + f(differences)` on integers (sim_engine.h), so a
// state equal to a recorded one with all times shifted by `delta` evolves into
// the recorded future shifted by `delta`, event for event and bit for bit.
// Ready times of waiting tasks are left out: they matter only to a start at
// the same instant, excluded by requiring every running task to end after
// `now`. The changed tasks (and the tasks that release their memory) must
// have finished, since the recorded future used their old fields.
#include <algorithm>

#include "costmodel/internal/sim_engine.h"
#include "glog/logging.h"

namespace braid::costmodel::internal {
namespace {

// *v = v[0, keep) + mid + v[tail_from, end).
template <typename T>
void SpliceVec(std::vector<T>* v, const std::vector<T>& mid, size_t keep, size_t tail_from) {
  const size_t tail = v->size() - tail_from;
  const size_t at = keep + mid.size();
  if (at > tail_from) {
    v->resize(at + tail);
    std::move_backward(v->begin() + tail_from, v->begin() + tail_from + tail, v->end());
  } else if (at < tail_from) {
    std::move(v->begin() + tail_from, v->end(), v->begin() + at);
    v->resize(at + tail);
  }
  std::copy(mid.begin(), mid.end(), v->begin() + keep);
}

}  // namespace

void SimEngine::RunFrom(int k, std::span<const int> guards) {
  CHECK(record_ && k >= 1 && k < num_steps_) << "RunFrom(" << k << ") outside the recorded run";
  from_ = k;
  guards_.assign(guards.begin(), guards.end());
  max_old_fin_ = -1;
  if (++stamp_now_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_now_ = 1;
  }
  // Device and channel state from the snapshot of step k.
  now_ = steps_.now[k];
  finished_ = steps_.finished[k];
  for (int d = 0; d < num_dev_; ++d) {
    const DevSnap& o = steps_.dev[static_cast<size_t>(k) * num_dev_ + d];
    Dev& v = dev_[d];
    v.running = o.running;
    v.last_done = o.last_done;
    v.active_comm = o.active_comm;
    v.slowed = o.slowed;
    v.version = o.version;
    v.work_left = o.work_left;
    v.last_update = now_ + o.last_update;
    v.finish_at = now_ + o.finish_at;
    v.mem = steps_.mem[static_cast<size_t>(k) * num_dev_ + d];
    v.q_head = o.q_head;
    v.q_tail = o.q_tail;
  }
  for (int c = 0; c < num_chan_; ++c) {
    const ChanSnap& o = steps_.chan[static_cast<size_t>(k) * num_chan_ + c];
    chan_state_[c] = Chan{o.running,   o.last_done,           o.pos,
                          o.slowed,    o.version,             o.work_left,
                          now_ + o.last_update, now_ + o.finish_at};
  }
  heap_.clear();
  for (const Dev& d : dev_) {
    if (d.running >= 0) heap_.push_back({d.finish_at, d.running, d.version});
  }
  for (const Chan& c : chan_state_) {
    if (c.running >= 0) heap_.push_back({c.finish_at, c.running, c.version});
  }
  std::make_heap(heap_.begin(), heap_.end(), [](const Event& a, const Event& b) {
    return a.t > b.t || (a.t == b.t && a.task > b.task);
  });
  dirty_dev_.clear();
  dirty_chan_.clear();
  replay_steps_.clear();
  Loop<true, true>(k);
}

int SimEngine::Converged(int step) {
  // The recorded step whose finished set can equal the replay's: the one
  // right after the latest recorded finish of a task the replay finished.
  if (max_old_fin_ < 0 || max_old_fin_ >= kNew) return -1;
  const int s = max_old_fin_ + 1;
  if (s >= static_cast<int>(steps_.size()) || steps_.finished[s] != finished_) return -1;
  for (int g : guards_) {
    if (!IsNew(fin_step_[g])) return -1;
  }
  const Tick old_now = steps_.now[s];
  for (int d = 0; d < num_dev_; ++d) {
    const DevSnap& o = steps_.dev[static_cast<size_t>(s) * num_dev_ + d];
    const Dev& v = dev_[d];
    if (v.running != o.running || v.last_done != o.last_done || v.active_comm != o.active_comm ||
        v.slowed != o.slowed || v.q_head != o.q_head || v.q_tail != o.q_tail ||
        v.mem != steps_.mem[static_cast<size_t>(s) * num_dev_ + d]) {
      return -1;
    }
    if (v.running >= 0) {
      if (v.finish_at - now_ != o.finish_at || v.finish_at == now_) return -1;
      if (slow_[d] != 1.0 &&
          (v.work_left != o.work_left || v.last_update - now_ != o.last_update)) {
        return -1;
      }
    }
    // Same queued set (it follows from the finished and running sets, and
    // the queue positions count the started and enqueued tasks); check the
    // order. The recorded enqueue log from q_tail on is still intact, so
    // qbuf_ needs no splicing.
    int64_t prev = -1;
    for (int q = v.q_head; q < v.q_tail; ++q) {
      const int i = qbuf_[q];
      const int64_t order = IsNew(enq_step_[i]) ? old_enq_pos_[i] : enq_pos_[i];
      if (order <= prev) return -1;
      prev = order;
    }
  }
  for (int c = 0; c < num_chan_; ++c) {
    const ChanSnap& o = steps_.chan[static_cast<size_t>(s) * num_chan_ + c];
    const Chan& v = chan_state_[c];
    if (v.running != o.running || v.last_done != o.last_done || v.pos != o.pos ||
        v.slowed != o.slowed) {
      return -1;
    }
    if (v.running >= 0) {
      const int r = v.running;
      const Tick old_start = IsNew(start_step_[r]) ? old_start_[r] : start_[r];
      if (start_[r] - now_ != old_start - old_now) return -1;
      if (v.finish_at - now_ != o.finish_at || v.finish_at == now_) return -1;
      if (cslow_[mdev_[r]] != 1.0 &&
          (v.work_left != o.work_left || v.last_update - now_ != o.last_update)) {
        return -1;
      }
    }
  }
  return s;
}

void SimEngine::Splice(int step, int s) {
  const int off = step - s;
  const Tick delta = now_ - steps_.now[s];
  // Replayed events keep their new values; recorded ones at or after step s
  // (no recorded event in [from_, s) is left: the replay redid them all)
  // move by `off` steps and `delta` ticks.
  // Simple loops (which tasks moved is scattered over the index range): a
  // step v was replayed if kNew <= v < kNever, and is recorded at or after
  // s, to be moved, if from_ <= v < kNew.
  const unsigned old_span = static_cast<unsigned>(kNew - from_);
  const unsigned new_span = static_cast<unsigned>(kNever - kNew);
  auto moved = [&](int v) { return static_cast<unsigned>(v - from_) < old_span; };
  // (Enqueue-log positions need no change: the logs agree up to the queue
  // tails, which are equal, and the recorded log beyond them is intact.)
  if (delta != 0) {
    for (int i = 0; i < n_; ++i) {
      start_[i] += moved(start_step_[i]) ? delta : 0;
      end_[i] += moved(fin_step_[i]) ? delta : 0;
    }
  }
  for (std::vector<int>* steps : {&enq_step_, &start_step_, &fin_step_}) {
    for (int& v : *steps) {
      DCHECK(!moved(v) || v >= s);
      v += (moved(v) ? off : 0) - (static_cast<unsigned>(v - kNew) < new_span ? kNew : 0);
    }
  }
  const size_t nd = num_dev_, nc = num_chan_;
  SpliceVec(&steps_.dev, replay_steps_.dev, from_ * nd, s * nd);
  SpliceVec(&steps_.chan, replay_steps_.chan, from_ * nc, s * nc);
  SpliceVec(&steps_.mem, replay_steps_.mem, from_ * nd, s * nd);
  SpliceVec(&steps_.now, replay_steps_.now, from_, s);
  SpliceVec(&steps_.finished, replay_steps_.finished, from_, s);
  for (size_t j = step; j < steps_.size(); ++j) steps_.now[j] += delta;
  num_steps_ = static_cast<int>(steps_.size());
  replayed_ = step - from_;
  UpdatePath(step);
}

void SimEngine::FinishReplay(int step) {
  // The replay ran to the end: recorded events it did not redo never happen.
  for (int i = 0; i < n_; ++i) {
    int& e = enq_step_[i];
    if (IsNew(e)) {
      e -= kNew;
    } else if (e != kNever && e >= from_) {
      e = kNever;
      enq_pos_[i] = -1;
    }
    int& st = start_step_[i];
    if (IsNew(st)) {
      st -= kNew;
    } else if (st != kNever && st >= from_) {
      st = kNever;
      start_[i] = kNoTime;
      pred_[i] = -1;
    }
    int& f = fin_step_[i];
    if (IsNew(f)) {
      f -= kNew;
    } else if (f != kNever && f >= from_) {
      f = kNever;
      end_[i] = kNoTime;
    }
  }
  const size_t nd = num_dev_, nc = num_chan_;
  SpliceVec(&steps_.dev, replay_steps_.dev, from_ * nd, steps_.dev.size());
  SpliceVec(&steps_.chan, replay_steps_.chan, from_ * nc, steps_.chan.size());
  SpliceVec(&steps_.mem, replay_steps_.mem, from_ * nd, steps_.mem.size());
  SpliceVec(&steps_.now, replay_steps_.now, from_, steps_.now.size());
  SpliceVec(&steps_.finished, replay_steps_.finished, from_, steps_.finished.size());
  num_steps_ = step + 1;
  replayed_ = num_steps_ - from_;
  UpdatePath(-1);
}

}  // namespace braid::costmodel::internal
