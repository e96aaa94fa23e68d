// Per-op clocks inside real training steps, for the rank programs that run
// LibTorch kernels one call at a time (braid-parallel-rank).
//
// A rank marks the clock where a step starts and laps it where each op's
// kernels end, under the op's name; a collective, a send or a receive (and
// any wait in it) is lapped under kCommClock, so it falls into no op's time. The totals per name are what the ranks
// report per step (ParallelTrainOptions::op_clocks): op times where the ops
// really run, reading what their producers just wrote, in the training's
// memory state and beside the other ranks, instead of timed alone.
//
//   OpClock& c = RankClock();
//   c.Mark();
//   at::Tensor z = at::matmul(x, w.t());
//   c.Lap(names.matmul);          // the MatMul's time since the mark
//   model.AllReduceSum(z);
//   c.Lap(kCommClock);            // the collective is no op's
//
// Off (the default) every call returns at once. A steady_clock read costs
// about 20 ns, against op kernels of microseconds and more.
#ifndef BRAID_WORKER_OP_CLOCK_H_
#define BRAID_WORKER_OP_CLOCK_H_

#include <chrono>
#include <map>
#include <string>

namespace braid::worker {

class OpClock {
 public:
  void Enable(bool on) { on_ = on; }

  // Starts a lap now.
  void Mark() {
    if (on_) mark_ = Clock::now();
  }
  // Adds the time since the last mark (or lap) to `name` and starts the next lap.
  void Lap(const std::string& name) {
    if (!on_) return;
    const Clock::time_point now = Clock::now();
    totals_[name] += std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
  }
  // The totals since the last Take(), seconds per name; clears them.
  std::map<std::string, double> Take() {
    std::map<std::string, double> out;
    out.swap(totals_);
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool on_ = false;
  Clock::time_point mark_ = Clock::now();
  std::map<std::string, double> totals_;
};

// This process's clock (a rank program runs its training on one thread).
OpClock& RankClock();

// The names braid-parallel-rank's ops are clocked under; the graphs of
// client/parallel_spec_graph.cc give the same names to the same ops. Layers and
// blocks are numbered within the rank's pipeline stage (from 0); a backward
// is its forward op's name + kBackwardClock.
inline std::string MlpClockName(int layer, const std::string& op) {  // "l0.matmul"
  return "l" + std::to_string(layer) + "." + op;
}
inline std::string BlockClockName(int block, const std::string& role) {  // "block0.q.bias"
  return "block" + std::to_string(block) + "." + role;
}
inline constexpr char kBackwardClock[] = ".backward";
inline constexpr char kReluFirstClock[] = "relu_first";  // a stage's leading ReLU
inline constexpr char kLossClock[] = "loss";              // the MSE and its gradient
inline constexpr char kUpdateClock[] = "update";          // pack, average, SGD (no all-reduce)
inline constexpr char kAccumulateClock[] = "accumulate";  // adding a micro-batch's gradients
// Inside collectives, sends and receives, waiting for the other ranks
// included: what the ranks spend communicating, not computing.
// A site may add a suffix ("comm.o": the output projection's all-reduce).
inline constexpr char kCommClock[] = "comm";
inline bool IsCommClock(const std::string& name) { return name.rfind(kCommClock, 0) == 0; }
// The executor's own work that is no op of the graph: slicing a replicated
// activation for a row layer, freeing a micro-batch's activations.
inline constexpr char kExecutorClock[] = "executor";

}  // namespace braid::worker

#endif  // BRAID_WORKER_OP_CLOCK_H_
