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
// Realizable fusions. On GPUs (XLA, DisCo's setting) MatMul/Gemm/Conv and
// their gradients are library calls (cuBLAS/cuDNN); a fused kernel holds at
// most one of them plus fusible non-library ops around it (epilogues such as
// bias/activation/residual, prologues, normalizations, reductions). The
// search enforces this (search/validity.h); the cost model costs such groups.
//
// Fused groups, in order of preference:
//  1. the fused-op estimator, when present and it answers;
//  2. when the group holds a library op L with a profile T_L (measured, it
//     includes reading L's inputs, writing its output and one launch): the
//     profile corrects the roofline by L's measured error,
//        T = max(T_L, T_L + R(group) - R({L})),
//     where R is the roofline above. The members around L add what the
//     roofline says they add on top of L: their FLOPs and any extra boundary
//     traffic, minus the launches and intermediate traffic they save (R of
//     the group pays one launch and only boundary bytes); when the profile
//     equals the roofline, T = R(group). The fused kernel is never faster
//     than the library call alone (the max): cuBLAS/cuDNN epilogues do not
//     make the contraction itself cheaper. Source: kEstimated;
//  3. the roofline R(group). Source: kRoofline.
#ifndef BRAID_COSTMODEL_OP_COST_H_
#define BRAID_COSTMODEL_OP_COST_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

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
  // "braid-0.1.0/profiles-<store generation|none>/estimator-<version|none>".
  std::string Generation() const override;

  // The analytic fallback alone (exposed for tests and diagnostics).
  double RooflineTime(const graph::Graph& g, std::span<const graph::OpId> ops) const;
  ProfileCoverage CountProfiled(const graph::Graph& g) const;

  const ClusterSpec& spec() const { return spec_; }
  const CommModel& comm() const { return comm_; }

 private:
  std::optional<double> Measured(const graph::Graph& g, graph::OpId op) const;

  ClusterSpec spec_;
  ProfileStore* store_;
  FusedOpEstimator* estimator_;
  CommModel comm_;
  RooflineParams params_;
  std::optional<double> pack_s_per_byte_;  // measured, read once at construction
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
