#include "costmodel/gnn/splits.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace braid::costmodel::gnn {
namespace {

bool IsDiscoModel(std::string_view model) {
  return std::find(kDiscoSampleModels.begin(), kDiscoSampleModels.end(), model) !=
         kDiscoSampleModels.end();
}

// Appends index i to `part` unless its signature is there already.
struct Part {
  explicit Part(std::vector<int>* o) : out(o) {}
  std::vector<int>* out;
  absl::flat_hash_set<std::string_view> seen;
  void Add(std::span<const GnnExample> ex, int i) {
    if (seen.insert(ex[i].signature).second) out->push_back(i);
  }
};

}  // namespace

std::string_view SplitName(Split s) {
  switch (s) {
    case Split::kA: return "a";
    case Split::kB: return "b";
    case Split::kAll: return "all";
  }
  return "?";
}

absl::StatusOr<Split> ParseSplit(std::string_view name) {
  if (name == "a") return Split::kA;
  if (name == "b") return Split::kB;
  if (name == "all") return Split::kAll;
  return absl::InvalidArgumentError(absl::StrCat("split: '", std::string(name), "' is not a, b or all"));
}

uint64_t SignatureHash(std::string_view signature) {
  return XXH64(signature.data(), signature.size(), 0);
}

bool IsOnnxModel(std::string_view model) {
  constexpr std::string_view kSuffix = ".onnx";
  return model.size() >= kSuffix.size() && model.substr(model.size() - kSuffix.size()) == kSuffix;
}

SplitSets SplitExamples(std::span<const GnnExample> examples, Split split, std::string_view holdout) {
  SplitSets s;
  Part train(&s.train), val(&s.val), test(&s.test), test_h(&s.test_holdout), test_o(&s.test_onnx);
  const int n = static_cast<int>(examples.size());
  switch (split) {
    case Split::kA:
      for (int i = 0; i < n; ++i) {
        if (!IsDiscoModel(examples[i].model)) continue;
        const uint64_t b = SignatureHash(examples[i].signature) % 10;
        (b == 9 ? test : b == 8 ? val : train).Add(examples, i);
      }
      break;
    case Split::kB: {
      for (int i = 0; i < n; ++i) {
        const bool h = examples[i].model == holdout;
        const bool o = IsOnnxModel(examples[i].model);
        if (h) test_h.Add(examples, i);
        if (o) test_o.Add(examples, i);
        if (h || o) test.Add(examples, i);
      }
      for (int i = 0; i < n; ++i) {
        const GnnExample& e = examples[i];
        if (e.model == holdout || !IsDiscoModel(e.model) || test.seen.contains(e.signature)) continue;
        (SignatureHash(e.signature) % 10 == 8 ? val : train).Add(examples, i);
      }
      break;
    }
    case Split::kAll:
      for (int i = 0; i < n; ++i) {
        const uint64_t b = SignatureHash(examples[i].signature) % 10;
        (b == 9 ? test : b == 8 ? val : train).Add(examples, i);
      }
      break;
  }
  return s;
}

}  // namespace braid::costmodel::gnn
