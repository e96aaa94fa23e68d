// The event engine behind Simulate() and IncrementalSimulator (simulator.h).
// Private to costmodel/ (internal/ holds every private header): use those.
//
// Time is fixed point: int64 ticks of 2^-e seconds, e chosen per graph
// (TickExponent) so that any schedule fits in 2^60 ticks. Integer time makes
// every scheduling computation exactly shift-invariant (it only ever forms
// `now + f(differences)`), which is what lets a re-simulation stop as soon as
// its state equals the recorded one shifted by a constant (see RunFrom).
// Results are converted to seconds once, at Fill.
//
// The engine copies a SimGraph into flat arrays (CSR successor lists, no
// per-task allocation while simulating) and advances in steps: a step pops
// every finish event of one timestamp, releases successors, then dispatches
// (channels first, so compute started in the same step already sees the
// slowdown of a collective that started with it). When recording, it keeps per
// task the steps at which it was enqueued, started and finished, and per step
// a snapshot of the device and channel state (O(devices + channels) each), so
// that a run can be resumed exactly from any step.
//
//   SimEngine e;
//   e.Load(g);
//   e.Run(/*record=*/false);
//   SimResult r;
//   e.Fill(&r);
#ifndef BRAID_COSTMODEL_INTERNAL_SIM_ENGINE_H_
#define BRAID_COSTMODEL_INTERNAL_SIM_ENGINE_H_

#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "costmodel/sim_graph.h"
#include "costmodel/simulator.h"

namespace braid::costmodel::internal {

using Tick = int64_t;
inline constexpr Tick kNoTime = INT64_MAX;  // never started / finished
inline constexpr int kNever = INT_MAX;      // step of an event that never happened
// Added to the steps a replay writes, so that they are told apart from the
// recorded ones they replace until the replay ends.
inline constexpr int kNew = 1 << 30;
inline bool IsNew(int step) { return step >= kNew && step != kNever; }

// The tick exponent e (1 tick = 2^-e s) for a graph of `num_tasks` tasks whose
// longest duration is `max_duration_s` and largest compute slowdown is
// `max_slowdown` (compute or comm): the largest e with num_tasks * max_duration_s *
// max(1, max_slowdown) * 2^e < 2^60 (a makespan bound: some task always runs
// until the last one finishes). 0 when every duration is 0.
int TickExponent(int num_tasks, double max_duration_s, double max_slowdown);
// The same for a graph (CHECK-fails on non-finite durations or slowdowns).
int TickExponent(const SimGraph& g);
// `seconds` (finite, >= 0) in ticks of 2^-exponent s, rounded to nearest
// (halves up); `scale` is 2^exponent.
inline Tick ToTicks(double seconds, double scale) {
  const double y = seconds * scale;  // exact: a power-of-two scaling
  const Tick t = static_cast<Tick>(y);
  return t + (y - static_cast<double>(t) >= 0.5);  // y < 2^62, so y - t is exact
}

class SimEngine {
 public:
  // Copies the graph (CHECK-fails on out-of-range ids: a lowering bug).
  void Load(const SimGraph& g);
  // Re-reads the tasks `changed` of `g` (same task count, kinds and channels)
  // and rebuilds the derived arrays they affect. Returns false when the
  // recorded run can no longer be resumed (call Run): the change altered the
  // tick exponent or moved a compute task to another device.
  bool UpdateTasks(const SimGraph& g, std::span<const int> changed);

  // Full simulation from the start.
  void Run(bool record);
  // Continues a recorded run from step `k` (1 <= k < num_steps()) after
  // UpdateTasks, recording. Stops early once the state at a step boundary
  // equals the recorded state at some step shifted by a constant time: the
  // rest of the recorded run, shifted, is then exactly what simulating would
  // give. That needs every task in `guards` finished first: the changed tasks
  // and the old and new members of their release_after lists.
  void RunFrom(int k, std::span<const int> guards);

  // The first step whose processing reads task `i` of the last recorded run
  // if its fields were those of `nt` (the new version of the task).
  int FirstAffectedStep(int i, const SimTask& nt) const;
  int num_steps() const { return num_steps_; }
  // Steps simulated by the last Run/RunFrom (the rest were reused).
  int replayed_steps() const { return replayed_; }

  void Fill(SimResult* r) const;

  int num_tasks() const { return n_; }

 private:
  struct Dev {
    int running = -1;
    int last_done = -1;
    int active_comm = 0;
    bool slowed = false;
    uint32_t version = 0;
    Tick work_left = 0;  // full-speed ticks left as of last_update
    Tick last_update = 0;
    Tick finish_at = 0;
    int64_t mem = 0;
    int q_head = 0;  // into qbuf_
    int q_tail = 0;
  };
  // A device at a step boundary, times relative to that boundary's `now`, so
  // that a shifted copy of a run has identical snapshots.
  struct DevSnap {
    int running;
    int last_done;
    int active_comm;
    uint32_t version;
    bool slowed;
    int q_head;  // the queue is qbuf_[q_head, q_tail)
    int q_tail;
    Tick work_left;
    Tick last_update;  // - now
    Tick finish_at;    // - now
  };
  struct Chan {
    int running = -1;
    int last_done = -1;
    int pos = 0;  // next index into this channel's order
    bool slowed = false;   // the running task's device computes (comm_slowdown)
    uint32_t version = 0;  // bumped when the running task's finish time moves
    Tick work_left = 0;    // full-speed ticks left as of last_update
    Tick last_update = 0;
    Tick finish_at = 0;
  };
  // A channel at a step boundary, times relative to that boundary's `now`.
  struct ChanSnap {
    int running;
    int last_done;
    int pos;
    bool slowed;
    uint32_t version;
    Tick work_left;
    Tick last_update;  // - now
    Tick finish_at;    // - now
  };
  struct Event {
    Tick t;
    int task;
    uint32_t version;
  };
  // Per-step records: snapshot j is the state at the start of step j (after
  // step j-1's dispatch, whose time is now[j]).
  struct Steps {
    std::vector<DevSnap> dev;
    std::vector<ChanSnap> chan;
    std::vector<int64_t> mem;  // per device, like dev
    std::vector<Tick> now;
    std::vector<int> finished;
    void clear();
    size_t size() const { return now.size(); }
  };

  void BuildDerived();
  void Quantize();  // exp_ and dur_ from dur_s_, max_dur_s_
  void Init();
  template <bool kRec, bool kInc>
  void Loop(int step);
  void Snapshot(Steps* s);
  template <bool kRec, bool kInc>
  void Finish(int i, int step);
  template <bool kRec, bool kInc>
  void Dispatch(int step);
  template <bool kRec, bool kInc>
  void TryStartComm(int c, int step);
  template <bool kRec, bool kInc>
  void StartCompute(int d, int step);
  void UpdateRate(int d);
  // Re-times the running comm tasks of device d after its compute started or
  // stopped (comm_slowdown).
  void UpdateCommRates(int d);
  template <bool kRec, bool kInc>
  void Enqueue(int i, int step);
  template <bool kInc>
  int& DepLeft(int i);
  template <bool kInc>
  int& RelLeft(int i);
  void InitLazy(int i);
  [[gnu::always_inline]] inline void PushEvent(Event e);
  [[gnu::always_inline]] inline Event PopEvent();
  [[gnu::always_inline]] inline bool Stale(const Event& e) const;
  [[gnu::always_inline]] inline void MarkDev(int d);
  [[gnu::always_inline]] inline void MarkChan(int c);
  // The recorded step the replay has converged onto at `step`, or -1.
  int Converged(int step);
  void Splice(int step, int old_step);
  void FinishReplay(int step);
  // Sets last_task_ and path_ for the recorded run. With `converged_at` >= 0
  // (a replay from from_ converged at that step), reuses the parts of the
  // previous path outside the replayed window.
  void UpdatePath(int converged_at);

  // Static graph.
  int n_ = 0, num_dev_ = 0, num_chan_ = 0;
  int exp_ = 0;            // 1 tick = 2^-exp_ s
  double tick_s_ = 1;      // 2^-exp_
  double scale_ = 1;       // 2^exp_
  std::vector<uint8_t> kind_;  // TaskKind
  std::vector<int> res_, mdev_;
  std::vector<double> dur_s_;
  double max_dur_s_ = 0;
  std::vector<Tick> dur_;
  std::vector<int64_t> alloc_;
  std::vector<uint8_t> persist_;
  std::vector<int> dep_off_, dep_;      // deps of i
  std::vector<int> succ_off_, succ_;    // tasks listing i as a dep
  std::vector<int> rel_off_, rel_;      // release_after of i
  std::vector<int> rrel_off_, rrel_;    // non-persistent tasks listing i in release_after
  std::vector<int> comm_order_;         // as given
  std::vector<int> chan_off_, chan_;    // per-channel issue order
  // Per-device region of qbuf_, which holds the device's tasks in enqueue
  // order: the ready queue is a window of it, so a snapshot's queue is two
  // positions.
  std::vector<int> qoff_;
  std::vector<int> busy_slot_;  // compute: device; comm: num_dev_ + channel
  std::vector<double> slow_;
  std::vector<double> cslow_;  // comm_slowdown per device
  double max_slow_ = 1;
  std::vector<int64_t> resident_;

  // Dynamic state.
  std::vector<int> dep_left_, rel_left_, last_dep_, pred_, qbuf_;
  std::vector<Tick> start_, end_;
  std::vector<Dev> dev_;
  std::vector<int64_t> peak_;  // unrecorded runs only
  std::vector<Chan> chan_state_;
  std::vector<Event> heap_;
  std::vector<int> dirty_dev_, dirty_chan_;
  std::vector<uint8_t> dev_dirty_flag_, chan_dirty_flag_;
  Tick now_ = 0;
  int finished_ = 0;

  // Recording: per task the steps it was enqueued, started and finished, and
  // its place in the enqueue log; per step a snapshot.
  bool record_ = false;
  std::vector<int> enq_step_, start_step_, fin_step_;
  std::vector<int> enq_pos_;  // index in qbuf_ (the device's enqueue log)
  Steps steps_;
  int num_steps_ = 0;
  int last_task_ = -1;     // finishing last (lowest index on ties)
  std::vector<int> path_;  // critical path, when every task finished
  std::vector<int> path_scratch_;
  int replayed_ = 0;

  // RunFrom: steps written by the replay carry kNew (so the old value is
  // still told apart); the old value they replaced is kept in old_*. The
  // counts dep_left_/rel_left_ are rebuilt lazily for tasks the replay
  // touches (stamp_). New snapshots go to replay_steps_ (steps from_ on).
  int from_ = 0;
  uint32_t stamp_now_ = 0;
  std::vector<uint32_t> stamp_;
  std::vector<int> old_enq_pos_;
  std::vector<Tick> old_start_;
  int max_old_fin_ = -1;  // latest old finish step of a task finished by the replay
  std::vector<int> guards_;
  Steps replay_steps_;
};

}  // namespace braid::costmodel::internal

#endif  // BRAID_COSTMODEL_INTERNAL_SIM_ENGINE_H_
