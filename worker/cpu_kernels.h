// Maps one graph op to the LibTorch (ATen) call(s) that compute it on CPU, on
// freshly made tensors of the op's shapes and dtypes. The CPU profiler times
// the returned closure; this header is LibTorch-facing and stays inside
// braid_worker (other libraries include cpu_profiler.h instead).
//
//   absl::StatusOr<CpuKernel> k = MakeCpuKernel(g, op_id);
//   at::Tensor out = k->run();   // one execution of the op
#ifndef BRAID_WORKER_CPU_KERNELS_H_
#define BRAID_WORKER_CPU_KERNELS_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"

namespace braid::worker {

struct CpuKernel {
  // How the first result is compared with graph output 0.
  enum class Check : uint8_t {
    kShape,     // same shape
    kElements,  // same element count: ATen lays it out differently (LSTM's Y)
    kNone,      // the result is not output 0 (LSTMGrad returns dX only)
  };
  // Runs the op once and returns its primary result (the tensor of graph
  // output 0), which the profiler checks against the graph once.
  std::function<at::Tensor()> run;
  Check check = Check::kShape;
  // The ATen functions `run` calls, for reports and tests.
  std::string aten;
};

// The floating-point input tensors of a whole graph's kernels, one per graph
// tensor, shared by every kernel that reads it. The timing executor binds each
// op's real result to its output's slot after the op runs, so the consumers
// read the producer's freshly written memory as a training step does (the
// profiler's isolated kernels read their own cache-warm inputs instead).
// Binding swaps the slot's storage (Tensor::set_), no copy; a kernel that
// derived another tensor from its input at build time (a reshape, a cast, a
// clone) keeps reading that derived tensor, and integer inputs (indices,
// labels) are never shared, so values stay in range.
//
//   TensorSlots slots;
//   CpuKernel k = *MakeCpuKernel(g, op, &slots);   // for every op, in order
//   slots.Bind(g.op(op).outputs[0], k.run());
class TensorSlots {
 public:
  TensorSlots() = default;
  TensorSlots(const TensorSlots&) = delete;
  TensorSlots& operator=(const TensorSlots&) = delete;

  // The shared tensor of `id` (random values of its shape and dtype on first use).
  at::Tensor Get(graph::TensorId id, const graph::Tensor& t);
  // Points the slot of `id` (when some kernel reads it) at `value`'s storage.
  // False when `value` differs from the slot in dtype or sizes (the kernel's
  // result is laid out differently from the graph tensor), so it is not bound.
  bool Bind(graph::TensorId id, const at::Tensor& value);
  bool Has(graph::TensorId id) const { return slots_.count(id) > 0; }

 private:
  std::map<graph::TensorId, at::Tensor> slots_;
};

// Unimplemented (naming the type) for op types without a mapping;
// InvalidArgument naming the op when its inputs or attributes do not fit.
// With `slots`, floating-point inputs come from (and are shared through) it.
absl::StatusOr<CpuKernel> MakeCpuKernel(const graph::Graph& g, graph::OpId op,
                                        TensorSlots* slots = nullptr);

// True when MakeCpuKernel has a mapping for the type (the op may still be
// rejected for its shapes or dtypes).
bool CpuKernelSupports(std::string_view op_type);

namespace internal {

inline CpuKernel Make(std::function<at::Tensor()> run, std::string aten,
                      CpuKernel::Check check = CpuKernel::Check::kShape) {
  return CpuKernel{std::move(run), check, std::move(aten)};
}


// Read-only view of one op with tensor factories; shared by the forward and
// backward kernel builders.
class OpArgs {
 public:
  OpArgs(const graph::Graph& g, graph::OpId id, TensorSlots* slots = nullptr)
      : g_(g), op_(g.op(id)), slots_(slots) {}

  const graph::Op& op() const { return op_; }
  int num_inputs() const { return static_cast<int>(op_.inputs.size()); }
  int num_outputs() const { return static_cast<int>(op_.outputs.size()); }
  const graph::Tensor& in(int i) const { return g_.tensor(op_.inputs[i]); }
  const graph::Tensor& out(int i) const { return g_.tensor(op_.outputs[i]); }
  // Some inputs are integer typed (indices, labels).
  bool InputIsInteger(int i) const;

  // InvalidArgument unless min <= #inputs <= max and #outputs >= 1.
  absl::Status Arity(int min_inputs, int max_inputs) const;
  absl::Status Error(std::string_view what) const;  // InvalidArgument "op 'n' (T): what"

  // Random normal values for floating dtypes, 0/1 for bool, [0, 16) ints.
  at::Tensor Random(const std::vector<int64_t>& shape, graph::DType dtype) const;
  // Input i: the shared slot (worker::TensorSlots) for floating dtypes when
  // the kernel is built for the executor, else fresh random values.
  at::Tensor In(int i) const;
  // Integer tensor of `shape` with values in [0, high).
  at::Tensor Indices(const std::vector<int64_t>& shape, graph::DType dtype, int64_t high) const;

 private:
  const graph::Graph& g_;
  const graph::Op& op_;
  TensorSlots* slots_;
};

// ONNX LSTM inputs (X, W, R, [B]) as ATen's at::lstm arguments.
struct LstmArgs {
  at::Tensor x, h0, c0;
  std::vector<at::Tensor> params;
  bool has_bias = false, bidirectional = false, batch_first = false;
};
absl::StatusOr<LstmArgs> MakeLstmArgs(const OpArgs& a, bool requires_grad);

at::ScalarType ToScalarType(graph::DType d);

// Attribute resolution shared with the CUDA backend (graph/op_attrs.h).
using graph::IntsOr;
using graph::ResolvePads;

// ATen's padding when begin == end for every dim; otherwise nullopt and
// `torch_pad` gets the constant_pad_nd list (last dim first).
std::optional<std::vector<int64_t>> SymmetricPads(const std::vector<int64_t>& pads,
                                                  std::vector<int64_t>* torch_pad);

// Undoes constant_pad_nd(t, torch_pad) by slicing (a view, no copy).
at::Tensor CropPadded(const at::Tensor& t, const std::vector<int64_t>& torch_pad);

// Builders; nullopt when the type is not theirs.
std::optional<absl::StatusOr<CpuKernel>> MakeForwardKernel(const OpArgs& a);
std::optional<absl::StatusOr<CpuKernel>> MakeBackwardKernel(const OpArgs& a);
std::optional<absl::StatusOr<CpuKernel>> MakePoolKernel(const OpArgs& a);
bool ForwardSupports(graph::OpKind kind);
bool BackwardSupports(graph::OpKind kind);
bool PoolSupports(graph::OpKind kind);

}  // namespace internal
}  // namespace braid::worker

#endif  // BRAID_WORKER_CPU_KERNELS_H_
