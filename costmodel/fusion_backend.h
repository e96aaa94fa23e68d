// Fusion backends: which sets of ops a device kind really runs as one kernel.
// A fused group enters a plan only if the backend of the plan's device kind
// can implement it (search/validity.h asks through CostModel::fusion_backend);
// the baselines are held to the same backend, so braid wins by choosing among
// the fusions a real compiler or library produces, not by inventing others.
//
// Two backends, each written from what the real software does (the rules
// and their sources are in fusion_backend.cc, next to the code):
//  - GPU: XLA's GPU compiler (loop fusion, reductions with their elementwise
//    producers and consumers on the reduced shape, normalizations and softmax
//    as their reduction + elementwise parts), cuBLASLt GEMM epilogues, cuDNN's
//    fused convolution + side input + bias + ReLU;
//  - CPU: what braid's CPU fused executor (kernels/cpu) implements: oneDNN
//    MatMul/Gemm/Conv primitives with a chain of post-ops, and fp32
//    elementwise chains (with reductions as sinks) run by the tile interpreter.
//
//   const FusionBackend& b = BackendFor(cluster);        // by device kind
//   absl::Status s = b.CanImplement(g, {gemm, relu});    // OK: GEMM epilogue
//   s = b.CanImplement(g, {bn, relu, conv});             // InvalidArgument: a
//                                                        // prologue of a conv
#ifndef BRAID_COSTMODEL_FUSION_BACKEND_H_
#define BRAID_COSTMODEL_FUSION_BACKEND_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "costmodel/cluster.h"
#include "graph/graph.h"

namespace braid::costmodel {

class FusionBackend {
 public:
  virtual ~FusionBackend() = default;
  // "gpu-xla" or "cpu-braid": reported in plans and errors.
  virtual std::string_view name() const = 0;
  // OK when the backend runs `ops` (a group's members and duplicated copies,
  // in any order) as one fused kernel; a single op is always OK (it is
  // whatever kernel its library or compiler runs alone). InvalidArgument
  // naming the op and the rule otherwise.
  virtual absl::Status CanImplement(const graph::Graph& g,
                                    std::span<const graph::OpId> ops) const = 0;
};

// XLA GPU + cuBLASLt + cuDNN (fusion_backend.cc cites each rule).
const FusionBackend& GpuFusionBackend();
// braid's CPU fused executor, kernels/cpu.
const FusionBackend& CpuFusionBackend();
// The backend of the cluster's device kind.
const FusionBackend& BackendFor(const ClusterSpec& spec);

// Where braid's own kernels cannot measure this cluster's fused kernels,
// the reason (printed with its plans): CUDA 13 compiles for compute
// capability 7.5 and newer only, so on older GPUs (disco-a's GTX 1080 Ti,
// summit's V100) fused ops keep prior or corrected-roofline costs.
std::optional<std::string> FusedMeasurementGap(const ClusterSpec& spec);

// The op kinds the CPU fused executor runs inside an elementwise program
// (worker/ maps each to a kernels::EwCode; a test checks the two agree).
bool CpuElementwiseKind(const graph::Op& op);
// Reshape-like kinds (Reshape, Flatten, Squeeze, Unsqueeze, Identity): a
// copy in the flat index space of the CPU executor's elementwise programs.
bool CpuReshapeKind(const graph::Op& op);
// The reductions that may end a CPU elementwise program (ReduceSum,
// ReduceMean, ReduceMax).
bool CpuReduceSinkKind(const graph::Op& op);
// The unary/binary kinds oneDNN 2.6 applies as post-ops of a MatMul/Conv
// primitive (kernels/cpu/onednn_fused.h, OneDnnPostOpSupported).
bool CpuPostOpKind(const graph::Op& op);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_FUSION_BACKEND_H_
