// The fused-op estimator's network (DisCo §4.3) in plain LibTorch, and its
// checkpoint format.
//
// Member ops are embedded by multi-head graph attention layers (eq. 1: each
// op attends to its data-edge neighbours and itself, heads concatenated,
// ELU; a residual connection where widths match), pooled into one fused-op
// embedding (eq. 2: masked mean and max over the members, a dense layer,
// ReLU), joined with the group features and regressed by three dense layers
// (ReLU) to one number: the log of the fused
// time over the sum of the members' single-op times (so that an untrained
// network starts from "fusion saves nothing"). Groups of different sizes
// share one padded dense batch [B, Nmax, F] with an adjacency mask (LibTorch
// has no graph library in C++; groups are small, so dense attention is cheap).
//
//   GnnNet net(vocab.size(), hp);
//   GnnBatch b = MakeBatch(graphs, stats);
//   torch::Tensor log_ratio = net->forward(b);           // [B]
//   SaveCheckpoint("gnn.pt", net, info);
//   absl::StatusOr<LoadedCheckpoint> c = LoadCheckpoint("gnn.pt", cluster.device.kind);
#ifndef BRAID_COSTMODEL_GNN_GNN_MODEL_H_
#define BRAID_COSTMODEL_GNN_GNN_MODEL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "absl/status/statusor.h"
#include "costmodel/gnn/checkpoint_info.h"
#include "costmodel/gnn/features.h"

namespace braid::costmodel::gnn {

// A padded batch: B groups, Nmax = the largest group.
struct GnnBatch {
  torch::Tensor types;      // [B, N] int64, 0 on padding
  torch::Tensor nodes;      // [B, N, kNodeFeatures] float, normalized, 0 on padding
  torch::Tensor adj;        // [B, N, N] bool, self loops (padding too)
  torch::Tensor node_mask;  // [B, N] bool
  torch::Tensor group;      // [B, kGroupFeatures] float, normalized
  torch::Tensor log_sum;    // [B] float: log of the sum of member seconds
};
GnnBatch MakeBatch(std::span<const FeatureGraph* const> graphs, const FeatureStats& stats);

// One graph attention layer: K heads of width D over a dense adjacency.
class GatLayerImpl : public torch::nn::Module {
 public:
  GatLayerImpl(int in, int heads, int head_dim);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& adj);

 private:
  int heads_, head_dim_;
  bool residual_;
  torch::nn::Linear proj_{nullptr};
  torch::Tensor att_src_, att_dst_, bias_;
};
TORCH_MODULE(GatLayer);

class GnnNetImpl : public torch::nn::Module {
 public:
  GnnNetImpl(int vocab_size, const GnnHyperParams& hp);
  // The predicted log(fused seconds / sum of member seconds), [B].
  torch::Tensor forward(const GnnBatch& b);

 private:
  torch::nn::Embedding embed_{nullptr};
  std::vector<GatLayer> gat_;
  torch::nn::Linear pool_{nullptr}, fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};
TORCH_MODULE(GnnNet);

// Writes the network and `info` (a torch::serialize archive).
absl::Status SaveCheckpoint(const std::string& path, GnnNet& net, const CheckpointInfo& info);

struct LoadedCheckpoint {
  CheckpointInfo info;
  GnnNet net{nullptr};
  std::string id;    // xxhash64 of the file's bytes, 16 hex digits
  std::string path;  // where it was loaded from
};
// A checkpoint is input: it is loaded only when it is a regular file whose
// metadata is well-formed and valid (ValidateCheckpointInfo: finite means,
// finite positive standard deviations), whose weights fit the recorded
// network and are all finite, and whose network predicts a finite, positive
// time of at most kMaxPredictedSeconds for each of a few probe groups built
// from its own training statistics. Never throws.
// NotFound when `path` does not exist; FailedPrecondition naming both values
// when the checkpoint's format version, feature schema or device kind
// differs from this braid's (or from `device_kind`); InvalidArgument naming
// the path and the reason for anything else it refuses.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path,
                                                const std::string& device_kind);

// LibTorch's intra-op pool and OpenBLAS's pool to one thread, process-wide:
// training and inference run on one core, like the CPU profiler
// (worker/cpu_profiler.cc), so results are deterministic and searches on
// other threads are not slowed down.
void UseOneThread();

// Predicted seconds for each graph (no gradient; the caller picks threads),
// in sub-batches of at most 512 groups of similar size.
std::vector<double> Predict(GnnNet& net, std::span<const FeatureGraph* const> graphs,
                            const FeatureStats& stats);

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_GNN_MODEL_H_
