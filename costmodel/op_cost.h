// The production cost model: op times from the profile store (measured),
// fused-kernel times from a fused-op estimator (the GNN of DisCo §4.3), and an
// analytic roofline as the fallback; collective times from the fitted
// communication model (costmodel/comm_model.h).
//
//   absl::StatusOr<ClusterSpec> spec = LoadCluster("cpu-local");
//   absl::StatusOr<CommModel> comm = CommModelFromStore(*spec, store.get());
//   ClusterCostModel model(*spec, store.get(), /*estimator=*/nullptr, *comm);
//   OpTime t = model.ComputeTime(g, {op});            // profile, else roofline
//   ProfileCoverage cov = model.CountProfiled(g);      // measured_ops / estimated_ops
//
// Roofline: time = max(FLOP time, bytes / (memory bandwidth * efficiency)) +
// one launch overhead. MatMul/Conv/recurrent FLOPs run at a fraction of the
// peak for their dtype (f16/bf16 use the tensor-core peak); every other op's
// FLOPs run at the f32 peak, so elementwise ops end up bandwidth bound. For a
// fused group, FLOPs of all members are summed (the library op's at its
// efficiency, the others' at the f32 peak), bytes count only tensors
// crossing the group boundary (inputs produced outside the group or graph
// inputs/parameters; outputs consumed outside, graph outputs, or never
// consumed), and one launch overhead is paid. Communication ops (AllReduce &
// co) are not compute: their ComputeTime is 0; use CollectiveTime.
//
// Realizable fusions. Which groups may be fused at all is the fusion
// backend's call (costmodel/fusion_backend.h, fusion_backend()); this model
// only costs them.
//
// Fused groups, in order of preference:
//  1. a measured profile of that fused kernel on this device kind (op type
//     kFusedOp, key FusedSignature: workers run it with the CPU fused
//     executor or the CUDA kernels). Source: kMeasured;
//  2. the fused-op estimator, when present and it answers. Source: kGnn;
//  3. when at least one member has a profile, the members' times corrected
//     by what fusing saves (the corrected roofline):
//        T = max(R_B(group), T_L, sum_m T_m - saved_bytes / B - (k - 1) * launch),
//     with T_m the member's profile (its roofline R({m}) when it has none),
//     saved_bytes the intermediate writes and member reads the fused kernel
//     no longer does, k the member count, T_L the profile of the library
//     call (an epilogue never makes the contraction cheaper), and R_B(group)
//     what the fused kernel must still move and compute, at bandwidth B: the
//     larger of the datasheet's (bw * eff) and what the measured non-library
//     members reached (their bytes over their times), so that tensors small
//     enough to stay in cache are not charged DRAM time. Fusion gains only
//     what the roofline says it saves, so a memory-bound BatchNorm does not
//     become free inside a compute-bound conv. Source: kCorrectedRoofline;
//  4. the roofline R(group). Source: kPrior.
#ifndef BRAID_COSTMODEL_OP_COST_H_
#define BRAID_COSTMODEL_OP_COST_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"

namespace braid::costmodel {

// Predicts the time of a fused kernel (a connected group of ops). The GNN
// estimator implements it; nullopt when it cannot (the roofline is used).
class FusedOpEstimator {
 public:
  virtual ~FusedOpEstimator() = default;
  virtual std::optional<double> Estimate(const graph::Graph& g,
                                         std::span<const graph::OpId> ops) = 0;
  // The candidates of one search step at once (one batched inference); later
  // Estimate calls for them are cache hits. The default does nothing.
  virtual void Prefetch(const graph::Graph& g, std::span<const std::vector<graph::OpId>> groups) {
    (void)g;
    (void)groups;
  }
  // Identifies the trained model; part of the cost model's Generation().
  virtual std::string Version() const = 0;
};

// Fractions of datasheet peaks that kernels reach; priors for ops without a
// profile. cuBLAS/cuDNN reach 70-90% of peak on large GEMMs and less on the
// small and skinny shapes of DNN layers and on convolutions; copy-like
// kernels reach 80-90% of datasheet memory bandwidth (STREAM, GPU bandwidth
// tests).
struct RooflineParams {
  double matmul_efficiency = 0.7;
  double conv_efficiency = 0.5;
  double bandwidth_efficiency = 0.8;
};

// Where the cost models of the CLI and the server get their fused-op
// estimator: each main() that links the GNN (braid-torch, braid-server)
// installs a provider once at start; without one, or when it has no trained
// estimator for the cluster's device kind, fused ops without a measured
// profile get the corrected roofline. The provider owns what it returns, for
// the life of the process (an estimator is loaded once and shared by every
// search). `profile_db` is the SQLite file of the profile store the cost
// model reads ("" when it has none).
using FusedOpEstimatorProvider =
    std::function<FusedOpEstimator*(const ClusterSpec& cluster, const std::string& profile_db)>;
void SetFusedOpEstimatorProvider(FusedOpEstimatorProvider provider);
// The installed provider's estimator, or null. Never fails: a provider that
// cannot load a checkpoint says why in the log once and returns null.
FusedOpEstimator* FusedOpEstimatorFor(const ClusterSpec& cluster, const std::string& profile_db);

// How many non-communication ops of a graph have a profile.
struct ProfileCoverage {
  int measured = 0;   // found in the profile store
  int estimated = 0;  // costed by the estimator or the roofline
};

class ClusterCostModel final : public CostModel {
 public:
  // `store` and `estimator` may be null and must outlive the model.
  ClusterCostModel(ClusterSpec spec, ProfileStore* store, FusedOpEstimator* estimator,
                   CommModel comm, RooflineParams params = {});

  using CostModel::ComputeTime;  // the one-op convenience overload
  OpTime ComputeTime(const graph::Graph& g, std::span<const graph::OpId> ops) override;
  double CollectiveTime(Collective c, int64_t bytes, int group_size) override;
  double ComputeSlowdownDuringComm() const override;
  double CommSlowdownDuringCompute() const override;
  // CPU clusters: bytes times the per-byte cost the in-graph profiler
  // measured (kBucketPackOp), else 2 * bytes / memory bandwidth (read +
  // write); 0 on GPUs.
  double BucketPackTime(int64_t bytes) const override;
  // CPU clusters: the store's kRuntimeNodeOp sample, else 0.
  double NodeOverheadSeconds() const override { return node_overhead_s_; }
  // "braid-0.1.0/profiles-<store generation|none>/estimator-<version|none>".
  std::string Generation() const override;
  // BackendFor(spec): the CPU fused executor on CPU clusters, XLA/cuBLASLt/cuDNN on GPUs.
  const FusionBackend* fusion_backend() const override { return backend_; }
  // Forwards the groups without a measured fused profile to the estimator.
  bool PrefetchesFused() const override { return estimator_ != nullptr; }
  void PrefetchFused(const graph::Graph& g,
                     std::span<const std::vector<graph::OpId>> groups) override;
  // The estimator in use (null: corrected roofline for unmeasured fused ops).
  FusedOpEstimator* estimator() const { return estimator_; }

  // The analytic fallback alone (exposed for tests and diagnostics).
  double RooflineTime(const graph::Graph& g, std::span<const graph::OpId> ops) const;
  ProfileCoverage CountProfiled(const graph::Graph& g) const;
  // Step 3 of the fused-group order alone (the estimator's evaluation
  // compares against it): kCorrectedRoofline, or kPrior when no member has
  // a profile.
  OpTime CorrectedRoofline(const graph::Graph& g, std::span<const graph::OpId> ops) const;

  const ClusterSpec& spec() const { return spec_; }
  const CommModel& comm() const { return comm_; }

 private:
  std::optional<double> Measured(const graph::Graph& g, graph::OpId op) const;
  std::optional<double> MeasuredFused(const graph::Graph& g, std::span<const graph::OpId> ops) const;
  std::optional<double> Lookup(const ProfileKey& key) const;
  // The roofline's inputs: FLOP time at each member's rate, bytes crossing
  // the group boundary, compute members.
  struct RooflineParts {
    double flop_s = 0;
    double bytes = 0;
    int members = 0;
  };
  RooflineParts Parts(const graph::Graph& g, std::span<const graph::OpId> ops) const;

  ClusterSpec spec_;
  ProfileStore* store_;
  FusedOpEstimator* estimator_;
  const FusionBackend* backend_;
  CommModel comm_;
  RooflineParams params_;
  std::optional<double> pack_s_per_byte_;  // measured, read once at construction
  double node_overhead_s_ = 0;             // measured, read once at construction
  // Profile lookups by key, valid for one store generation.
  mutable std::mutex mu_;
  mutable int64_t cache_generation_ = -1;
  mutable std::unordered_map<std::string, std::optional<double>> cache_;
};

// True for ops that are communication, not compute (collective category or
// the communication phase).
bool IsCommunicationOp(const graph::Op& op);

// True for ops that run as a library call on GPUs (cuBLAS/cuDNN): the kinds
// with graph::IsLibraryKind, OpCategory kMatMul (MatMul, Gemm, batched
// matmul, their gradients) and kConv (Conv, ConvTranspose and their
// gradients). A realizable fused kernel holds at most one of them.
bool IsLibraryOp(const graph::Op& op);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_OP_COST_H_
