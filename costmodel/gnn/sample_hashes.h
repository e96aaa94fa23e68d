// Content hashes of fused-op samples. A checkpoint records those of the
// samples its network was fitted to and validated on (CheckpointInfo's
// sample_hashes), so that `braid gnn eval` can tell whether the test set it
// is about to score shares any of them, in whatever database the test set
// comes from: an estimator scored on its own training data looks better
// than it is on unseen fused ops.
//
// A sample is identified by its device kind and its fused signature (the
// group's op types, shapes and wiring: FusedSignature), not by a database
// row id or the model it was drawn from, so the same fused op drawn into
// another database, or from another model, has the same hash.
//
//   std::optional<SampleHashes> h = RecordSampleHashes(examples, sets, kind);
//   absl::StatusOr<Disjointness> d = CheckDisjoint(info.sample_hashes, test_hashes);
#ifndef BRAID_COSTMODEL_GNN_SAMPLE_HASHES_H_
#define BRAID_COSTMODEL_GNN_SAMPLE_HASHES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/gnn/splits.h"
#include "costmodel/gnn_store.h"

namespace braid::costmodel::gnn {

// How SampleHash is computed; a checkpoint names it beside its hashes.
inline constexpr char kSampleHashScheme[] = "sha256-128(device_kind NUL fused_signature)";
inline constexpr size_t kSampleHashHexDigits = 32;
// The most training and validation samples (together) a checkpoint records
// hashes of: 100,000 hashes are about 3.5 MB of metadata, thirty times the
// sample set of the estimator braid ships. A checkpoint trained on more
// records none (RecordSampleHashes), and `braid gnn eval` reports its test
// set's disjointness as unchecked.
inline constexpr size_t kMaxSampleHashes = 100000;

// The first 128 bits of SHA-256 over the device kind, a NUL byte and the
// fused signature, as 32 lowercase hex digits.
std::string SampleHash(std::string_view device_kind, std::string_view signature);
// Whether `h` has SampleHash's form (32 lowercase hex digits).
bool IsSampleHash(std::string_view h);

// The samples a checkpoint's network was fitted to (train) and whose loss
// chose its epoch and hyper-parameters (validation), sorted.
struct SampleHashes {
  std::vector<std::string> train, validation;
};

// The hashes of `sets`' train and validation samples; nullopt when there
// are more than kMaxSampleHashes of them together.
std::optional<SampleHashes> RecordSampleHashes(std::span<const GnnExample> examples,
                                               const SplitSets& sets,
                                               std::string_view device_kind);

// The outcome of comparing a test set with a checkpoint's recorded samples.
struct Disjointness {
  bool checked = false;  // false: the checkpoint records no hashes
  int64_t test_samples = 0;
  int64_t recorded_samples = 0;  // the checkpoint's train + validation hashes
};

// Compares `test_hashes` (SampleHash of each test sample) with `recorded`.
// nullopt `recorded`: an unchecked Disjointness. FailedPrecondition when any
// test sample is among the recorded ones, saying how many of the test
// samples are, and how many of those in the training and in the validation
// set.
absl::StatusOr<Disjointness> CheckDisjoint(const std::optional<SampleHashes>& recorded,
                                           std::span<const std::string> test_hashes);

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_SAMPLE_HASHES_H_
