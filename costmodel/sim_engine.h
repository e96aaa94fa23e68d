// The event engine behind Simulate() and IncrementalSimulator (simulator.h).
// Not a public interface: use those.
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
#ifndef BRAID_COSTMODEL_SIM_ENGINE_H_
#define BRAID_COSTMODEL_SIM_ENGINE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "costmodel/sim_graph.h"
#include "costmodel/simulator.h"

namespace braid::costmodel::internal {

class SimEngine {
 public:
  // Copies the graph (CHECK-fails on out-of-range ids: a lowering bug).
  void Load(const SimGraph& g);
  // Re-reads the tasks `changed` of `g` (same task count, kinds and channels)
  // and rebuilds the derived arrays they affect.
  void UpdateTasks(const SimGraph& g, std::span<const int> changed);

  // Full simulation from the start.
  void Run(bool record);
  // Continues a recorded run from step `k` (1 <= k < num_steps()): rewinds
  // the state to before step k and simulates to the end, recording. `changed`
  // are the tasks passed to UpdateTasks since that run.
  void RunFrom(int k, std::span<const int> changed);

  // The first step whose processing reads task `i` of the last recorded run
  // if its fields were those of `nt` (the new version of the task).
  int FirstAffectedStep(int i, const SimTask& nt) const;
  int num_steps() const { return num_steps_; }

  void Fill(SimResult* r) const;

  int num_tasks() const { return n_; }

 private:
  struct Dev {
    int running = -1;
    int last_done = -1;
    int active_comm = 0;
    bool slowed = false;
    uint32_t version = 0;
    double work_left = 0;    // full-speed seconds left as of last_update
    double last_update = 0;
    double finish_at = 0;
    double busy = 0;
    int64_t mem = 0;
    int64_t peak = 0;
    int q_head = 0;  // into qbuf_
    int q_tail = 0;
  };
  struct Chan {
    int running = -1;
    int last_done = -1;
    int pos = 0;  // next index into this channel's order
    double busy = 0;
  };
  struct Event {
    double t;
    int task;
    uint32_t version;
  };

  void BuildDerived();
  void Init();
  void Loop(int step);
  void Snapshot();
  void Finish(int i, double t, int step);
  void Dispatch(double t, int step);
  void TryStartComm(int c, double t, int step);
  void StartCompute(int d, double t, int step);
  void UpdateRate(int d, double t);
  void Enqueue(int i, int step);
  void PushEvent(Event e);
  Event PopEvent();
  bool Stale(const Event& e) const;
  void MarkDev(int d);
  void MarkChan(int c);

  // Static graph.
  int n_ = 0, num_dev_ = 0, num_chan_ = 0;
  std::vector<uint8_t> kind_;  // TaskKind
  std::vector<int> res_, mdev_;
  std::vector<double> dur_;
  std::vector<int64_t> alloc_;
  std::vector<uint8_t> persist_;
  std::vector<int> dep_off_, dep_;      // deps of i
  std::vector<int> succ_off_, succ_;    // tasks listing i as a dep
  std::vector<int> rel_off_, rel_;      // release_after of i
  std::vector<int> rrel_off_, rrel_;    // non-persistent tasks listing i in release_after
  std::vector<int> comm_order_;         // as given
  std::vector<int> chan_off_, chan_;    // per-channel issue order
  std::vector<int> qoff_;               // per-device queue region in qbuf_
  std::vector<double> slow_;
  std::vector<int64_t> resident_;

  // Dynamic state.
  std::vector<int> dep_left_, rel_left_, last_dep_, pred_, qbuf_;
  std::vector<double> start_, end_;
  std::vector<Dev> dev_;
  std::vector<Chan> chan_state_;
  std::vector<Event> heap_;
  std::vector<int> dirty_dev_, dirty_chan_;
  std::vector<uint8_t> dev_dirty_flag_, chan_dirty_flag_;
  int finished_ = 0;
  int64_t enq_seq_ = 0;

  // Recording: per task the steps it was enqueued, started and finished; per
  // step a device/channel snapshot and offsets into the start/finish logs.
  bool record_ = false;
  std::vector<int> start_log_, fin_log_, start_log_off_, fin_log_off_;
  std::vector<int> enq_step_, start_step_, fin_step_;
  std::vector<int64_t> enq_order_;
  std::vector<Dev> snap_dev_;
  std::vector<Chan> snap_chan_;
  std::vector<int64_t> snap_seq_;
  int num_steps_ = 0;
};

}  // namespace braid::costmodel::internal

#endif  // BRAID_COSTMODEL_SIM_ENGINE_H_
