// The runtime's CUDA backend (worker/runtime/interpreter.h) and its NCCL
// communicator: a per-device program trained on one GPU per rank, every op
// on the GPU (no CPU fallback: an op the backend cannot run fails the step
// with Unimplemented naming it). LibTorch-free, so the GPU kit carries it.
//
// Where each op runs (OpsByPath counts them):
//   "cublas/cudnn"  MatMul, Gemm, Softmax and its gradient, Transpose,
//                   Concat, Split, LayerNorm/BatchNorm, pooling, convolution:
//                   the CUDA profiler's op mappings (internal/cuda_ops.h);
//   "nvrtc"         elementwise ops and reductions (and fusion groups of
//                   them): braid's NVRTC kernels (kernels/cuda/ew_kernel.h)
//                   of the same programs the CPU fused executor runs;
//   "braid kernel"  embeddings (Gather), softmax cross-entropy, Where, the
//                   gradients of Pow and Where, Dropout, optimizer updates
//                   (internal/runtime_kernels.h, internal/kernels.h);
//   "nvrtc group"   the members of a fusion group run as one NVRTC kernel;
//   "view"          Reshape, Flatten, Squeeze, Unsqueeze, Identity: the
//                   input's memory under the output's shape.
// Loaded values and Dropout masks come from the runtime's host generator
// (worker/runtime/values.h), so a GPU run draws what the CPU backend draws.
// TF32 is off (NVIDIA_TF32_OVERRIDE=0 is set before the device is touched
// unless the environment sets it, and cuBLAS runs in CUBLAS_DEFAULT_MATH).
// Each op returns when its kernels are done (options.sync_each_op), so an
// error names its op and StepOptions::clock_ops times kernels.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::Create({.device = 0}));
//   ASSIGN_OR_RETURN(auto comm, MakeNcclCommunicator(program, rank, *b, "/tmp/ids", 300));
//   Interpreter it(program, rank, *b, *comm);
#ifndef BRAID_WORKER_CUDA_CUDA_BACKEND_H_
#define BRAID_WORKER_CUDA_CUDA_BACKEND_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/runtime/interpreter.h"

namespace braid::worker::cuda_internal {
class CudaContext;
}

namespace braid::runtime {

struct CudaBackendOptions {
  int device = 0;
  bool dropout = true;
  bool sync_each_op = true;
};

class CudaBackend : public Backend {
 public:
  // FailedPrecondition without a usable device.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(CudaBackendOptions options = {});
  ~CudaBackend() override;

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
  // An elementwise group (worker/fused_program.h) runs as one NVRTC kernel;
  // any other group op by op (UnfusedWhy says why).
  absl::StatusOr<std::map<graph::TensorId, Value>> RunGroup(
      const graph::Graph& g, const std::vector<graph::OpId>& members,
      const std::map<graph::TensorId, Value>& inputs, const RankContext& ctx, bool* fused) override;

  // Ops run so far, by path ("cublas/cudnn", "nvrtc", "braid kernel",
  // "view") and by "path:type".
  const std::map<std::string, int64_t>& OpsByPath() const { return by_path_; }
  std::map<std::string, std::string> UnfusedWhy() const { return unfused_why_; }
  // "NVIDIA H200 (sm_90)".
  std::string DeviceName() const;
  worker::cuda_internal::CudaContext& context() { return *ctx_; }
  // A device value of `shape` and `dtype` over `bytes` of fresh memory.
  absl::StatusOr<Value> NewValue(const std::vector<int64_t>& shape, graph::DType dtype);

 private:
  struct OpCache;
  explicit CudaBackend(CudaBackendOptions options);
  absl::StatusOr<std::vector<Value>> RunOp(const graph::Graph& g, const graph::Op& op,
                                           const std::vector<Value>& inputs, const RankContext& ctx);
  void Count(const std::string& path, const graph::Op& op);
  // Compiles the NVRTC program of `ops` (sorted) into `c`, or says why it
  // has none; runs it on the tensors it reads, returning those it writes.
  absl::Status PrepareNvrtc(const graph::Graph& g, const std::vector<graph::OpId>& ops, OpCache& c);
  absl::StatusOr<std::map<graph::TensorId, Value>> RunNvrtc(
      const graph::Graph& g, const OpCache& c, const std::map<graph::TensorId, Value>& inputs);

  CudaBackendOptions options_;
  std::unique_ptr<worker::cuda_internal::CudaContext> ctx_;
  std::map<std::pair<const graph::Graph*, graph::OpId>, std::unique_ptr<OpCache>> cache_;
  std::map<std::string, int64_t> by_path_;
  std::map<std::string, std::string> unfused_why_;
};

// A communicator over NCCL for rank `rank` of `program`'s world on
// `backend`'s device: one NCCL communicator for the world and one per
// distinct group of ranks the program's collectives use, made now in program
// order. Each communicator's unique id is written by its lowest rank to a
// file under `id_dir` (a directory every rank sees) and read by the others,
// who wait for it up to `timeout_s`. AllReduce sums; AllGather and
// ReduceScatter work along the op's "dim". In a world of one rank the
// collectives still run, on the one-rank world communicator.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(const graph::Program& program,
                                                                   int rank, CudaBackend& backend,
                                                                   const std::string& id_dir,
                                                                   double timeout_s);

}  // namespace braid::runtime

#endif  // BRAID_WORKER_CUDA_CUDA_BACKEND_H_
