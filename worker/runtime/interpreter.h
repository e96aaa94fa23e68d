// The runtime's core: runs a per-device program (graph/program.h) on one
// rank, one training step at a time, through two interfaces a backend
// provides: a Backend that loads tensors and runs compute ops, and a
// Communicator that runs the program's collectives on the groups their mesh
// axes name. This library links no LibTorch; the CPU backend
// (worker/runtime/cpu_backend.h: ATen kernels, Gloo through c10d) does.
//
// A step runs the program's ops in topological order. Tensors without a
// producer are loaded: parameters, constants and optimizer state once (at
// Init), data inputs every step (drawn from the step's seed). A collective
// is started where it stands in the order and waited for when an op first
// reads its result, so compute between the two overlaps it. Values are
// freed after their last reader. An update op's outputs replace, for the
// next step, the parameter and state tensors it read (SgdMomentumUpdate:
// (p, g, m) -> (p.new, m.new); AdamUpdate: (p, g, m, v) -> (p.new, m.new,
// v.new)).
//
//   Interpreter it(program, rank, backend, comm);
//   RETURN_IF_ERROR(it.Init());
//   for (int s = 0; s < steps; ++s) StepResult r = *it.Step(s);
//   std::map<std::string, HostTensor> params = *it.GatherParameters();
#ifndef BRAID_WORKER_RUNTIME_INTERPRETER_H_
#define BRAID_WORKER_RUNTIME_INTERPRETER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/program.h"

namespace braid::runtime {

// A backend's tensor.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual int64_t bytes() const = 0;
};
using Value = std::shared_ptr<Buffer>;

// A dense f32 host tensor (losses, checkpoints).
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// What a backend needs to know about the rank.
struct RankContext {
  int rank = 0;
  std::vector<int> coord;  // on the program's mesh
  const graph::Program* program = nullptr;
  int step = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Tensor `t` of the program on this rank: `spec`'s full value (drawn from
  // the program's seed, and the step's for per-step loads) narrowed to the
  // rank's piece.
  virtual absl::StatusOr<Value> Load(const graph::Tensor& t, const graph::LoadSpec& spec,
                                     const RankContext& ctx) = 0;
  // Runs compute op `op` (no collective) of `g` on its inputs; one value per
  // output. Rank-relative ops (attribute shard_axes) read ctx.coord.
  virtual absl::StatusOr<std::vector<Value>> Run(const graph::Graph& g, const graph::Op& op,
                                                 const std::vector<Value>& inputs,
                                                 const RankContext& ctx) = 0;
  virtual absl::StatusOr<HostTensor> ToHost(const Value& v) = 0;
  virtual absl::StatusOr<Value> FromHost(const HostTensor& h, graph::DType dtype) = 0;
  // A gradient bucket's buffer: the values (one dtype) flattened and
  // concatenated in order; and the pieces of such a buffer in `shapes`.
  virtual absl::StatusOr<Value> Flatten(const std::vector<Value>& values) = 0;
  virtual absl::StatusOr<std::vector<Value>> Unflatten(
      const Value& flat, const std::vector<std::vector<int64_t>>& shapes) = 0;
  // A fusion group (graph::Program::groups; `members` in order) on the
  // tensors its members read from outside it; returns every tensor its
  // members make that the group cannot keep to itself (read outside it,
  // graph outputs) and sets *fused when one fused kernel ran. This default
  // runs the members one by one with Run; a backend overrides it with its
  // fused kernels.
  virtual absl::StatusOr<std::map<graph::TensorId, Value>> RunGroup(
      const graph::Graph& g, const std::vector<graph::OpId>& members,
      const std::map<graph::TensorId, Value>& inputs, const RankContext& ctx, bool* fused);
};

// A collective in flight.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual absl::StatusOr<Value> Wait() = 0;
};

// A collective whose result is already there (a group of one rank, a
// blocking collective that has finished).
class ReadyPending : public Pending {
 public:
  explicit ReadyPending(Value v) : v_(std::move(v)) {}
  absl::StatusOr<Value> Wait() override { return v_; }

 private:
  Value v_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Starts collective `op` (AllReduce, AllGather, ReduceScatter; its
  // attributes as graph/program.h says) among `group` (world ranks in piece
  // order, this rank among them).
  virtual absl::StatusOr<std::unique_ptr<Pending>> Start(const graph::Op& op,
                                                         const std::vector<int>& group,
                                                         const Value& input) = 0;
  // Every rank's `v` (same shape on every rank), in rank order.
  virtual absl::StatusOr<std::vector<HostTensor>> AllGatherHost(const HostTensor& v) = 0;
};

// The piece of `full` a rank at `coord` holds when dim d is split over
// dim_axes[d] of `mesh` (in segments[d] segments, graph::LoadSpec).
HostTensor NarrowHost(const HostTensor& full, const std::vector<int>& mesh,
                      const std::vector<int>& coord, const std::vector<std::vector<int>>& dim_axes,
                      const std::vector<int64_t>& segments = {});

struct StepResult {
  double loss = 0;             // this rank's loss (the mean over its rows)
  double seconds = 0;          // wall time of the step
  int64_t peak_bytes = 0;      // most tensor bytes live at once (program values)
  int collectives = 0;         // collectives started (a bucket counts once)
  int groups_fused = 0;        // fusion groups run as one fused kernel
  int groups_unfused = 0;      // fusion groups run op by op (no fused kernel)
  // With StepOptions::clock_ops, per op (indexed by OpId): for a compute op
  // the wall time of its kernel (a fusion group's on its last member, 0 on
  // the others); for a collective the time this rank spent
  // in it (starting it and waiting for it at its first reader), which is its
  // exposed time, not its transfer time when other work hid it. Empty
  // otherwise. A backend whose kernels run asynchronously must make Run
  // return only when the op is done for these to mean anything.
  std::vector<double> op_seconds;
};

struct StepOptions {
  bool clock_ops = false;
  // Called with every tensor a compute op or fusion group makes, as it is
  // made (a backend comparison's per-op check).
  std::function<void(graph::TensorId, const Value&)> observe;
};

class Interpreter {
 public:
  Interpreter(const graph::Program& program, int rank, Backend& backend, Communicator& comm);

  // Orders the program, checks every op kind is runnable, loads parameters,
  // constants and optimizer state.
  absl::Status Init();
  // One training step. `step` seeds the data inputs.
  absl::StatusOr<StepResult> Step(int step, StepOptions options = {});
  // The full value of every parameter and optimizer state tensor (the
  // pieces of all ranks assembled), by source name, on every rank; a
  // collective: every rank calls it.
  absl::StatusOr<std::map<std::string, HostTensor>> GatherParameters();
  // Replaces parameters (and optimizer state) by name with full values,
  // narrowed to this rank's pieces (a checkpoint's); tensors `full` does not
  // name keep their values. InvalidArgument on a shape mismatch.
  absl::Status LoadParameters(const std::map<std::string, HostTensor>& full);

 private:
  const graph::Program& p_;
  int rank_;
  Backend& backend_;
  Communicator& comm_;
  RankContext ctx_;
  std::vector<graph::OpId> order_;               // execution order (nodes_ flattened)
  std::vector<std::vector<graph::OpId>> nodes_;  // graph::ScheduleNodes
  std::map<graph::TensorId, Value> persistent_;  // loaded once, replaced by updates
  std::vector<int> readers_;                     // per tensor: ops reading it
  std::map<graph::OpId, std::vector<int>> groups_;  // collective -> group ranks
  // Program::buckets: members' op ids in bucket order, and each member's
  // bucket; a bucket starts at its member that comes last in order_.
  std::vector<std::vector<graph::OpId>> buckets_;
  std::vector<graph::OpId> bucket_start_;
  std::map<graph::OpId, int> bucket_of_;
  graph::TensorId loss_ = graph::kNoId;
};

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_INTERPRETER_H_
