// Graph op -> cuBLAS/cuDNN/kernel calls on device tensors of the op's shapes:
// the CUDA counterpart of worker/cpu_kernels.h. MakeCudaOp allocates a device
// tensor per graph input and output, checks the library's idea of the output
// shape against the graph's, and returns closures that the profiler times
// and the GPU test checks against a CPU reference.
//
//   absl::StatusOr<CudaOp> op = MakeCudaOp(*ctx, g, id);
//   for (DeviceTensor& t : op->inputs) ctx->FillNormal(t, seed++);   // or Upload
//   if (op->prepare) op->prepare();   // e.g. the forward statistics a Grad op reads
//   op->run();                        // one execution on ctx->stream()
//   ctx->Download(op->outputs[0], host, bytes);
//
// Input conventions are graph/training_rules.cc's (see cpu_kernels_backward.cc):
// a *Grad op's first input is dY, output 0 the gradient; ConvGradData is
// (dY, W) -> dX, ConvGradFilter (X, dY) -> dW [, dB]; <Norm>Grad is
// (dY, X, scale) -> the gradients listed in "grad_inputs".
#ifndef BRAID_WORKER_CUDA_INTERNAL_CUDA_OPS_H_
#define BRAID_WORKER_CUDA_INTERNAL_CUDA_OPS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "worker/cuda/internal/cuda_context.h"

namespace braid::worker::cuda_internal {

struct CudaOp {
  std::vector<DeviceTensor> inputs;   // one per graph input, in order
  std::vector<DeviceTensor> outputs;  // one per graph output, in order
  std::vector<DeviceTensor> scratch;  // saved statistics, workspaces
  // Derives state the timed call reads from the inputs (forward statistics,
  // pooled outputs); untimed, run again whenever the inputs change.
  std::function<absl::Status()> prepare;
  // One execution, enqueued on the context's stream (no synchronization).
  std::function<absl::Status()> run;
  std::string calls;  // the library calls `run` makes, for reports and tests
};

// Unimplemented (naming the type) for op types without a mapping, and for
// mapped types whose dtype or attributes the libraries cannot express;
// InvalidArgument naming the op when its shapes are inconsistent.
absl::StatusOr<CudaOp> MakeCudaOp(const CudaContext& ctx, const graph::Graph& g, graph::OpId op);

// True when MakeCudaOp has a mapping for the type.
bool CudaOpSupports(graph::OpKind kind);

// Read-only view of one op for the builders, with error helpers.
class OpView {
 public:
  OpView(const CudaContext& ctx, const graph::Graph& g, graph::OpId id)
      : ctx_(ctx), op_(g.op(id)), g_(g) {}

  const CudaContext& ctx() const { return ctx_; }
  const graph::Op& op() const { return op_; }
  int num_inputs() const { return static_cast<int>(op_.inputs.size()); }
  int num_outputs() const { return static_cast<int>(op_.outputs.size()); }
  const graph::Tensor& in(int i) const { return g_.tensor(op_.inputs[i]); }
  const graph::Tensor& out(int i) const { return g_.tensor(op_.outputs[i]); }
  graph::DType dtype() const { return out(0).dtype; }

  // InvalidArgument "cuda profiler: op 'n' (T): what".
  absl::Status Error(std::string_view what) const;
  // Unimplemented with the same prefix.
  absl::Status Unsupported(std::string_view what) const;
  // `s` with the op prefix (keeps the code).
  absl::Status Wrap(const absl::Status& s) const;
  // InvalidArgument unless min <= #inputs <= max and #outputs >= 1.
  absl::Status Arity(int min_inputs, int max_inputs) const;
  // InvalidArgument "<library> computes [..] but the graph's output 'y' is [..]".
  absl::Status CheckOutput(int i, const std::vector<int64_t>& computed,
                           std::string_view library) const;
  // Unimplemented unless every input and output has `dtype()` (mixed dtypes
  // are not mapped).
  absl::Status SameFloatDtype() const;

  // A CudaOp with device tensors for every graph input and output.
  absl::StatusOr<CudaOp> AllocateIo() const;
  absl::StatusOr<DeviceTensor> Scratch(const std::vector<int64_t>& shape, graph::DType dtype,
                                       std::string_view what) const;

 private:
  const CudaContext& ctx_;
  const graph::Op& op_;
  const graph::Graph& g_;
};

// The builders, by family; nullopt when the type is not theirs.
using BuildResult = std::optional<absl::StatusOr<CudaOp>>;
BuildResult BuildMatMul(const OpView& v);       // cuda_ops_blas.cc
BuildResult BuildConv(const OpView& v);         // cuda_ops_conv.cc
BuildResult BuildElementwise(const OpView& v);  // cuda_ops_dnn.cc
BuildResult BuildReduce(const OpView& v);       // cuda_ops_dnn.cc
BuildResult BuildNorm(const OpView& v);         // cuda_ops_norm.cc
BuildResult BuildPool(const OpView& v);         // cuda_ops_norm.cc
BuildResult BuildData(const OpView& v);         // cuda_ops_data.cc
BuildResult BuildUpdate(const OpView& v);       // cuda_ops_update.cc
bool MatMulSupports(graph::OpKind k);
bool ConvSupports(graph::OpKind k);
bool ElementwiseSupports(graph::OpKind k);
bool ReduceSupports(graph::OpKind k);
bool NormSupports(graph::OpKind k);
bool PoolSupports(graph::OpKind k);
bool DataSupports(graph::OpKind k);
bool UpdateSupports(graph::OpKind k);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_CUDA_OPS_H_
