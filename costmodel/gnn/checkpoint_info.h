// What a fused-op estimator checkpoint records besides its weights
// (gnn_model.h writes and reads it; LibTorch-free so that callers of the
// estimator need not include LibTorch), and its JSON form. A checkpoint is
// input like any model file: the reader bounds the JSON (base/bounded_json.h)
// and checks every field's type and range, so that a damaged or hostile
// file is refused with a status before a network is built from it.
//
//   absl::StatusOr<CheckpointInfo> info = CheckpointInfoFromJson(meta_text);
//   if (info.ok()) RETURN_IF_ERROR(ValidateCheckpointInfo(*info));
#ifndef BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_
#define BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "costmodel/gnn/features.h"
#include "costmodel/gnn/sample_hashes.h"

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
  // Content hashes of the training and validation samples, for `braid gnn
  // eval`'s check that a test set is disjoint from them. nullopt in a
  // checkpoint written before braid recorded them, or trained on more than
  // kMaxSampleHashes samples.
  std::optional<SampleHashes> sample_hashes;
};

// Vocabularies hold the op types of the training set: a few hundred names.
inline constexpr size_t kMaxVocabulary = 1 << 16;

// The metadata as the JSON text a checkpoint stores. Internal when
// grid_json is not JSON.
absl::StatusOr<std::string> CheckpointInfoToJson(const CheckpointInfo& info);

// The metadata JSON a checkpoint stores, read within size and depth bounds:
// InvalidArgument naming the first field that is missing, of the wrong type
// or out of range. Says nothing about the values' meaning
// (ValidateCheckpointInfo does).
absl::StatusOr<CheckpointInfo> CheckpointInfoFromJson(std::string_view text);

// InvalidArgument unless layers is in 1..16, width a multiple of heads and
// at most 4096, and the type embedding in 1..1024.
absl::Status ValidateHyperParams(const GnnHyperParams& hp);

// InvalidArgument unless the hyper-parameters are valid, the vocabulary has
// at most kMaxVocabulary names, the normalisation statistics match the
// feature schema in size, and every mean is finite and every standard
// deviation finite and positive (MakeBatch divides by them). Names the
// offending statistic. When sample hashes are recorded: InvalidArgument
// unless there are as many as training and validation samples, at most
// kMaxSampleHashes together.
absl::Status ValidateCheckpointInfo(const CheckpointInfo& info);

// The number of weights the network of `info` has (GnnNet's parameters);
// a checkpoint file smaller than that many floats cannot hold them.
int64_t ParameterCount(const CheckpointInfo& info);

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_CHECKPOINT_INFO_H_
