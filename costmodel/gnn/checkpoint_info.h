// What a fused-op estimator checkpoint records besides its weights
// (gnn_model.h writes and reads it; LibTorch-free so that callers of the
// estimator need not include LibTorch).
#ifndef BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_
#define BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/gnn/features.h"

namespace braid::costmodel::gnn {

// Bumped whenever the archive's layout or the network's structure changes.
inline constexpr int kCheckpointFormatVersion = 1;

struct GnnHyperParams {
  int layers = 2;          // graph attention layers
  int heads = 4;           // attention heads per layer
  int width = 64;          // node embedding width (heads * per-head width)
  int type_embedding = 8;  // op-type embedding width
};

// Load refuses a checkpoint whose format version, feature schema or device
// kind is not this braid's.
struct CheckpointInfo {
  int format_version = kCheckpointFormatVersion;
  std::string feature_schema = kFeatureSchema;
  std::string device_kind;
  std::vector<std::string> vocabulary;  // OpVocabulary::names()
  FeatureStats stats;
  GnnHyperParams hp;
  std::string split;    // "a", "b", "all"
  std::string holdout;  // split b's held-out model
  uint64_t seed = 0;
  int64_t train_samples = 0, val_samples = 0;
  int epochs = 0;                       // epochs run (best one kept)
  double train_loss = 0, val_loss = 0;  // MSE of log time at the kept epoch
  // The hyper-parameter grid: one JSON object per point (losses, epochs).
  // No wall-clock times: retraining with the same data and seed gives the
  // same bytes, hence the same checkpoint id and a still valid cache.
  std::string grid_json;
};

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_
