// The runtime's CPU backend: ATen kernels for every op kind a program of
// braid's training graphs holds (forward, backward per graph/training.h's
// conventions, optimizer updates), exact rather than timing stand-ins, and
// a Gloo communicator (c10d ProcessGroupGloo) with one process group per
// mesh-axis group of the program.
//
// Generated values: a loaded tensor's full value is drawn by the runtime's
// own host generator (worker/runtime/values.h) keyed by (program seed,
// tensor source name, and for per-step loads the step), so every rank, the
// world-1 run and the CUDA backend draw the same full tensor, which each rank
// narrows to its piece.
//
// Dropout: each element's keep draw is a hash of (seed, op name, step) and
// the element's index in the op's full output, so a sharded run drops exactly
// what the world-1 run drops. With `dropout` false Dropout is the identity.
//
// `float64`: float32 program tensors are held and computed in float64 (host
// tensors, checkpoints and losses stay float32). Two runs that differ only in
// float32 rounding agree far more closely this way than two runs that differ
// in what they compute; `braid run --check --float64` uses it to tell the two
// apart.
//
//   CpuBackend backend({.dropout = false});
//   absl::StatusOr<std::unique_ptr<Communicator>> comm =
//       MakeGlooCommunicator(program, rank, "/tmp/store", "127.0.0.1");
#ifndef BRAID_WORKER_RUNTIME_CPU_BACKEND_H_
#define BRAID_WORKER_RUNTIME_CPU_BACKEND_H_

#include <memory>
#include <string>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {

struct CpuBackendOptions {
  bool dropout = true;
  bool float64 = false;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  absl::StatusOr<Value> Load(const graph::Tensor& t, const graph::LoadSpec& spec,
                             const RankContext& ctx) override;
  absl::StatusOr<std::vector<Value>> Run(const graph::Graph& g, const graph::Op& op,
                                         const std::vector<Value>& inputs,
                                         const RankContext& ctx) override;
  absl::StatusOr<HostTensor> ToHost(const Value& v) override;
  absl::StatusOr<Value> FromHost(const HostTensor& h, graph::DType dtype) override;
  absl::StatusOr<Value> Flatten(const std::vector<Value>& values) override;
  absl::StatusOr<std::vector<Value>> Unflatten(const Value& flat,
                                               const std::vector<std::vector<int64_t>>& shapes) override;
  // A group braid's CPU fused executor accepts (worker/fused_kernels.h:
  // oneDNN post-op chains, the tile interpreter) runs as its one kernel,
  // built once per program graph and group; any other group (and every group
  // in float64 mode, or with an input the kernel does not read from the
  // program's values) runs op by op. Why a group ran op by op: UnfusedWhy.
  absl::StatusOr<std::map<graph::TensorId, Value>> RunGroup(
      const graph::Graph& g, const std::vector<graph::OpId>& members,
      const std::map<graph::TensorId, Value>& inputs, const RankContext& ctx, bool* fused) override;
  // Per group run op by op (by its first member's name): the reason.
  std::map<std::string, std::string> UnfusedWhy() const;
  ~CpuBackend() override;

 private:
  struct GroupKernel;
  CpuBackendOptions options_;
  // By (graph, first member).
  std::map<std::pair<const graph::Graph*, graph::OpId>, std::unique_ptr<GroupKernel>> kernels_;
};

// Whether the CPU backend runs op kind `k`.
bool CpuBackendRuns(graph::OpKind k);

// A communicator over Gloo for rank `rank` of `program`'s world: a c10d
// FileStore at `store_path` (every rank the same path), one process group
// per distinct group the program's collectives use, made now in program
// order. `timeout_s`: how long a collective waits for the other ranks.
absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    const graph::Program& program, int rank, const std::string& store_path,
    const std::string& hostname, double timeout_s);

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_CPU_BACKEND_H_
