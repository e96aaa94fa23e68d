// Deterministic train / validation / test splits of the fused-op samples
// (GnnExample), by an xxhash of the fused signature so that a fused op lands
// in the same part wherever it was drawn.
//
//   split "a" (DisCo §6.5, unseen fused ops): samples of the six DisCo
//     models; hash % 10 in 0..7 train, 8 validation, 9 test.
//   split "b" (unseen model): test = samples of the holdout model plus those
//     of every ONNX model (model name ending ".onnx"); train and validation
//     (hash % 10 == 8) = samples of the other DisCo models whose signature is
//     not in the test set.
//   split "all" (the checkpoint braid ships): every sample with hash % 10
//     != 9 trains (8 validates, for early stopping); test = hash % 10 == 9.
// Each part holds a signature once (its first sample).
//
//   absl::StatusOr<Split> s = ParseSplit("b");
//   SplitSets sets = SplitExamples(examples, *s, "zoo:bert_large@sample");
#ifndef BRAID_COSTMODEL_GNN_SPLITS_H_
#define BRAID_COSTMODEL_GNN_SPLITS_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/gnn_store.h"

namespace braid::costmodel::gnn {

// The sample-model names of the six DisCo models (DisCo §5.2).
inline constexpr std::array<std::string_view, 6> kDiscoSampleModels = {
    "zoo:vgg19@sample",       "zoo:resnet50@sample",   "zoo:transformer@sample",
    "zoo:rnnlm@sample",       "zoo:bert_large@sample", "zoo:reformer@sample"};
// Split b's default held-out model. Not rnnlm: the CPU fusion backend fuses
// none of its LSTM ops with a neighbour, so it has no fused-op samples.
inline constexpr char kDefaultHoldout[] = "zoo:bert_large@sample";

enum class Split { kA, kB, kAll };
std::string_view SplitName(Split s);  // "a", "b", "all"
absl::StatusOr<Split> ParseSplit(std::string_view name);

// XXH64 of the signature, seed 0.
uint64_t SignatureHash(std::string_view signature);
bool IsOnnxModel(std::string_view model);

// Indices into the examples.
struct SplitSets {
  std::vector<int> train, val, test;
  // Split b only: the test set's holdout-model and ONNX parts (a signature
  // drawn from both is in both).
  std::vector<int> test_holdout, test_onnx;
};

SplitSets SplitExamples(std::span<const GnnExample> examples, Split split,
                        std::string_view holdout = kDefaultHoldout);

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_SPLITS_H_
