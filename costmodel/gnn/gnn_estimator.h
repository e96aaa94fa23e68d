// The GNN fused-op estimator (DisCo §4.3) behind the cost model's
// FusedOpEstimator interface, with a two-level prediction cache keyed by the
// fused signature: in memory, and in the GnnStore's SQLite table for this
// checkpoint (so a restarted server does not recompute what it predicted
// before; a different checkpoint drops the old rows at load).
//
//   absl::StatusOr<std::unique_ptr<GnnEstimator>> est =
//       GnnEstimator::Load("gnn.pt", cluster, profiles.get(), gnn_store.get());
//   ClusterCostModel model(cluster, profiles.get(), est->get(), comm);
//   (*est)->Prefetch(g, candidate_groups);       // one batched forward pass
//   OpTime t = model.ComputeTime(g, group);      // kGnn, served from the cache
//
// A hit is found by the group's StructuralKey (a 128-bit hash of what the
// signature spells out, no string built); the signature string is computed
// on a key miss only, to consult the signature-keyed cache (what SQLite
// holds) and to store new predictions.
//
// Thread-safe: searches call Estimate from several threads. Cache hits take a
// shared lock; misses run the network under its own lock, on one thread
// (UseOneThread(), process-wide, as the CPU profiler does).
//
// A prediction that is not a finite, positive time of at most
// kMaxPredictedSeconds (costmodel/cost_check.h) is never returned, cached or
// stored: Estimate answers nullopt for that group (the cost model then uses
// the corrected roofline), and the first such prediction is logged once per
// estimator. Load refuses checkpoints whose network fails this on probe
// groups (see LoadCheckpoint).
//
// Member times come from the profile store (else the roofline) when the
// features are extracted; a prediction cached before a member was profiled
// keeps the older member time until the checkpoint changes.
#ifndef BRAID_COSTMODEL_GNN_GNN_ESTIMATOR_H_
#define BRAID_COSTMODEL_GNN_GNN_ESTIMATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/gnn/checkpoint_info.h"
#include "costmodel/gnn/features.h"
#include "costmodel/gnn_store.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"

namespace braid::costmodel::gnn {

class GnnEstimator final : public FusedOpEstimator {
 public:
  // Loads the checkpoint (refused unless its device kind is the cluster's;
  // see LoadCheckpoint), keeps `cache`'s predictions of this checkpoint and
  // drops every other checkpoint's. `profiles` and `cache` may be null and
  // must outlive the estimator.
  static absl::StatusOr<std::unique_ptr<GnnEstimator>> Load(const std::string& checkpoint_path,
                                                            const ClusterSpec& cluster,
                                                            ProfileStore* profiles,
                                                            GnnStore* cache);
  ~GnnEstimator() override;  // writes pending predictions

  // nullopt for fewer than two distinct ops, a communication op, or a
  // prediction that is not a usable time.
  std::optional<double> Estimate(const graph::Graph& g, std::span<const graph::OpId> ops) override;
  void Prefetch(const graph::Graph& g, std::span<const std::vector<graph::OpId>> groups) override;
  std::string Version() const override;  // "gnn-" + checkpoint id

  // The features the network sees for a group.
  FeatureGraph Features(const graph::Graph& g, std::span<const graph::OpId> ops);
  // One batched forward pass over `graphs`, bypassing the cache (benchmarks,
  // evaluation). Internal when LibTorch fails.
  absl::StatusOr<std::vector<double>> EstimateBatch(std::span<const FeatureGraph> graphs);
  // The cache alone: the prediction for a fused signature, or for a group's
  // StructuralKey (what Estimate looks up first), if any.
  std::optional<double> Cached(const std::string& signature) const;
  std::optional<double> Cached(const GroupKey& key) const;
  // Writes pending predictions to the SQLite cache now.
  absl::Status Flush();

  int64_t forward_passes() const;   // batched network evaluations (Predict calls)
  int64_t predictions_run() const;  // groups the network evaluated
  int64_t declined() const;         // of those, predictions not usable as times
  int64_t cache_size() const;
  int64_t loaded_from_store() const;  // predictions found in SQLite at load
  const std::string& checkpoint_id() const;
  const CheckpointInfo& info() const;

 private:
  struct Impl;
  explicit GnnEstimator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_GNN_ESTIMATOR_H_
