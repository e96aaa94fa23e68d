#include "costmodel/gnn/sample_hashes.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/digest.h"

namespace braid::costmodel::gnn {
namespace {

std::vector<std::string> HashesOf(std::span<const GnnExample> examples, std::span<const int> idx,
                                  std::string_view device_kind) {
  std::vector<std::string> out;
  out.reserve(idx.size());
  for (int i : idx) out.push_back(SampleHash(device_kind, examples[i].signature));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::string SampleHash(std::string_view device_kind, std::string_view signature) {
  std::string text;
  text.reserve(device_kind.size() + 1 + signature.size());
  text.append(device_kind);
  text.push_back('\0');
  text.append(signature);
  return Sha256Hex(text).substr(0, kSampleHashHexDigits);
}

bool IsSampleHash(std::string_view h) {
  return h.size() == kSampleHashHexDigits &&
         std::all_of(h.begin(), h.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<SampleHashes> RecordSampleHashes(std::span<const GnnExample> examples,
                                               const SplitSets& sets,
                                               std::string_view device_kind) {
  if (sets.train.size() + sets.val.size() > kMaxSampleHashes) return std::nullopt;
  return SampleHashes{.train = HashesOf(examples, sets.train, device_kind),
                      .validation = HashesOf(examples, sets.val, device_kind)};
}

absl::StatusOr<Disjointness> CheckDisjoint(const std::optional<SampleHashes>& recorded,
                                           std::span<const std::string> test_hashes) {
  const absl::flat_hash_set<std::string_view> test(test_hashes.begin(), test_hashes.end());
  Disjointness d;
  d.test_samples = static_cast<int64_t>(test.size());
  if (!recorded.has_value()) return d;
  d.checked = true;
  d.recorded_samples = static_cast<int64_t>(recorded->train.size() + recorded->validation.size());
  int64_t in_train = 0, in_val = 0;
  absl::flat_hash_set<std::string_view> shared;
  for (const std::string& h : recorded->train) {
    if (test.contains(h)) {
      ++in_train;
      shared.insert(h);
    }
  }
  for (const std::string& h : recorded->validation) {
    if (test.contains(h)) {
      ++in_val;
      shared.insert(h);
    }
  }
  if (!shared.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the test set is not disjoint from the checkpoint's samples: the checkpoint was trained "
        "on %d of the %d test samples (%d in its training set, %d in its validation set); its "
        "errors on them would not measure unseen fused ops: evaluate on test samples it was not "
        "trained on",
        shared.size(), d.test_samples, in_train, in_val));
  }
  return d;
}

}  // namespace braid::costmodel::gnn
