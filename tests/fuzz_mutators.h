// Structure-aware mutators for tests/fuzz_import_test.cc: they turn a valid
// ONNX ModelProto or ClusterSpec JSON into an adversarial one, deterministically
// from a std::mt19937_64, and shrink a failing ONNX model.
//
//   std::mt19937_64 rng = IterationRng(seed, "onnx", iteration);
//   onnx::ModelProto m = seed_model;
//   std::vector<std::string> log;                 // one line per mutation
//   std::string bytes = MutateOnnx(m, rng, &log);  // mutated, maybe corrupted
//
//   ClusterMutant c = MutateClusterJson(preset_json, rng);
//   std::string text = ApplyClusterMutant(preset_json, c);
//
// The ONNX mutators aim at what importers get wrong: int attributes (strides,
// pads, kernel_shape, dilations, group, axis, perm, split, ...) set to 0,
// negative or huge values; tensor dims; invalid UTF-8 and control characters
// in names; other op types; dropped, duplicated or rewired inputs; Constant
// and ConstantOfShape payloads; opsets; and, rarely, flipped bytes of the
// serialized proto. Mutations that rename a value rename every use so that
// the model still imports and later stages (training graph, serializers,
// simulation) see the odd name.
#ifndef BRAID_TESTS_FUZZ_MUTATORS_H_
#define BRAID_TESTS_FUZZ_MUTATORS_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"

namespace braid::fuzz {

using Rng = std::mt19937_64;

// The generator of one iteration: a hash of (seed, target, iteration), so
// any iteration can be regenerated alone.
Rng IterationRng(uint64_t seed, std::string_view target, int64_t iteration);

// Integers that break shape arithmetic: 0, -1, -7, 99, 2^31, 2^62, INT64_MIN...
const std::vector<int64_t>& AdversarialInts();
// Names that break serializers: invalid UTF-8, control characters, quotes...
const std::vector<std::string>& AdversarialNames();

// Applies 1 to ~5 structural mutations to `model` and serializes it; with a
// small probability the bytes are then corrupted (flip, insert, delete,
// truncate). Appends one human-readable line per mutation to `log`.
std::string MutateOnnx(onnx::ModelProto& model, Rng& rng, std::vector<std::string>* log);

// One step of shrinking a failing model: every model that is `m` minus one
// piece (value_info, a node, an initializer, a graph input or output, an
// attribute, an opset import, a name or doc string), most promising first.
std::vector<onnx::ModelProto> OnnxReductions(const onnx::ModelProto& m);

// A ClusterSpec JSON mutant as a list of edits, so it can be shrunk by
// dropping edits. `pointer` is a JSON pointer ("/device/peak_flops_f32").
struct JsonEdit {
  enum class Kind : uint8_t { kSet, kRemove, kRawText, kNest };
  Kind kind = Kind::kSet;
  std::string pointer;
  nlohmann::json value;  // kSet
  // kRawText, applied to the dumped text after the structural edits:
  // replace (or, with `insert`, insert) the byte at `offset % size`, or
  // delete it when `byte` < 0.
  uint64_t offset = 0;
  int byte = 0;
  bool insert = false;
  // kNest: the value at `pointer` replaced by `levels` nested arrays around
  // a 0, or (empty pointer) the whole document wrapped in `levels` objects
  // {"plan": ...}.
  int64_t levels = 0;

  std::string Describe() const;
};

struct ClusterMutant {
  std::vector<JsonEdit> edits;
};

ClusterMutant MutateClusterJson(const nlohmann::json& seed, Rng& rng);
std::string ApplyClusterMutant(const nlohmann::json& seed, const ClusterMutant& m);

// Any JSON document braid reads (plan files, checkpoint metadata): the
// ClusterSpec edits over every object member and array element of `seed`,
// plus the document's own strings moved to other places (an op name where
// a gradient belongs, a duplicate), and, rarely, a value or the whole
// document nested 63 to 100,000 levels deep. About a third of the mutants
// only drop entries under the `droppable` pointers ("/groups": a plan's
// fused groups and their members), which keeps most of them valid.
using JsonMutant = ClusterMutant;
JsonMutant MutateJsonDocument(const nlohmann::json& seed, Rng& rng,
                              const std::vector<std::string>& droppable = {});
std::string ApplyJsonMutant(const nlohmann::json& seed, const JsonMutant& m);

}  // namespace braid::fuzz

#endif  // BRAID_TESTS_FUZZ_MUTATORS_H_
