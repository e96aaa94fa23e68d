#include "costmodel/gnn/checkpoint_info.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel::gnn {
namespace {

using json = nlohmann::json;

// The metadata holds the vocabulary and the hyper-parameter grid: well
// under a MiB for any trained estimator.
constexpr base::JsonLimits kMetaLimits{.max_bytes = size_t{16} << 20, .max_depth = 16};

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata: \"", std::string(field), "\" ", std::string(what)));
}

absl::StatusOr<const json*> Field(const json& parent, std::string_view name) {
  if (!parent.is_object()) return FieldError(name, "is in something that is not an object");
  auto it = parent.find(name);
  if (it == parent.end()) return FieldError(name, "is missing");
  return &*it;
}

absl::StatusOr<std::string> String(const json& parent, std::string_view name) {
  ASSIGN_OR_RETURN(const json* v, Field(parent, name));
  if (!v->is_string()) return FieldError(name, "is not a string");
  return v->get<std::string>();
}

// An integer in [lo, hi] (a float with an integral value is one too).
absl::StatusOr<int64_t> Integer(const json& parent, std::string_view name, int64_t lo,
                                int64_t hi) {
  ASSIGN_OR_RETURN(const json* v, Field(parent, name));
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return FieldError(name, absl::StrCat("is ", u, ", above ", hi));
    }
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) return FieldError(name, absl::StrCat("is ", i, ", outside ", lo, "..", hi));
    return i;
  }
  if (!v->is_number_float()) return FieldError(name, "is not a number");
  const double d = v->get<double>();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || std::floor(d) != d) {
    return FieldError(name, absl::StrCat("is ", d, ", not an integer in ", lo, "..", hi));
  }
  return static_cast<int64_t>(d);
}

// A number; JSON null (how nlohmann writes NaN) reads as NaN.
absl::StatusOr<double> Number(const json& parent, std::string_view name) {
  ASSIGN_OR_RETURN(const json* v, Field(parent, name));
  if (v->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v->is_number()) return FieldError(name, "is not a number");
  return v->get<double>();
}

// An array of at most `max` numbers, each representable as a float.
absl::StatusOr<std::vector<float>> Floats(const json& parent, std::string_view name, size_t max) {
  ASSIGN_OR_RETURN(const json* v, Field(parent, name));
  if (!v->is_array()) return FieldError(name, "is not an array");
  if (v->size() > max) return FieldError(name, absl::StrCat("has ", v->size(), " entries, above ", max));
  std::vector<float> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    if (x.is_null()) {  // a NaN when it was written
      out.push_back(std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (!x.is_number()) return FieldError(name, absl::StrCat("entry ", i, " is not a number"));
    const double d = x.get<double>();
    if (std::fabs(d) > std::numeric_limits<float>::max()) {
      return FieldError(name, absl::StrCat("entry ", i, " (", d, ") is beyond a float's range"));
    }
    out.push_back(static_cast<float>(d));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Strings(const json& parent, std::string_view name,
                                                 size_t max) {
  ASSIGN_OR_RETURN(const json* v, Field(parent, name));
  if (!v->is_array()) return FieldError(name, "is not an array");
  if (v->size() > max) return FieldError(name, absl::StrCat("has ", v->size(), " entries, above ", max));
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return FieldError(name, absl::StrCat("entry ", i, " is not a string"));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

absl::Status CheckStats(std::string_view name, const std::vector<float>& v, size_t want,
                        bool is_std) {
  if (v.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "normalisation stats do not match the feature schema: ", std::string(name), " has ", v.size(),
        " entries, the schema ", want));
  }
  for (size_t k = 0; k < v.size(); ++k) {
    const bool ok = is_std ? std::isfinite(v[k]) && v[k] > 0 : std::isfinite(v[k]);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "normalisation statistic ", std::string(name), "[", k, "] is ", v[k],
          is_std ? ": a standard deviation must be finite and positive"
                 : ": a mean must be finite"));
    }
  }
  return absl::OkStatus();
}

// A sample_hashes list: at most kMaxSampleHashes hashes of SampleHash's form.
absl::StatusOr<std::vector<std::string>> Hashes(const json& parent, std::string_view name) {
  ASSIGN_OR_RETURN(std::vector<std::string> out, Strings(parent, name, kMaxSampleHashes));
  for (size_t i = 0; i < out.size(); ++i) {
    if (!IsSampleHash(out[i])) {
      return FieldError(name, absl::StrCat("entry ", i, " is not ", kSampleHashHexDigits,
                                           " lowercase hex digits"));
    }
  }
  return out;
}

// The optional "sample_hashes" object: absent in checkpoints written before
// braid recorded them.
absl::StatusOr<std::optional<SampleHashes>> ReadSampleHashes(const json& j) {
  if (!j.contains("sample_hashes")) return std::nullopt;
  ASSIGN_OR_RETURN(const json* h, Field(j, "sample_hashes"));
  ASSIGN_OR_RETURN(std::string scheme, String(*h, "scheme"));
  if (scheme != kSampleHashScheme) {
    return FieldError("scheme", absl::StrCat("is '", base::EscapeForDisplay(scheme),
                                             "'; this braid hashes samples as '",
                                             kSampleHashScheme, "'"));
  }
  SampleHashes out;
  ASSIGN_OR_RETURN(out.train, Hashes(*h, "train"));
  ASSIGN_OR_RETURN(out.validation, Hashes(*h, "validation"));
  return out;
}

}  // namespace

absl::StatusOr<std::string> CheckpointInfoToJson(const CheckpointInfo& i) {
  json j;
  j["feature_schema"] = i.feature_schema;
  j["device_kind"] = i.device_kind;
  j["vocabulary"] = i.vocabulary;
  j["stats"] = {{"node_mean", i.stats.node_mean},
                {"node_std", i.stats.node_std},
                {"group_mean", i.stats.group_mean},
                {"group_std", i.stats.group_std}};
  j["hyper_parameters"] = {{"layers", i.hp.layers},
                           {"heads", i.hp.heads},
                           {"width", i.hp.width},
                           {"type_embedding", i.hp.type_embedding}};
  j["split"] = i.split;
  j["holdout"] = i.holdout;
  j["seed"] = i.seed;
  j["train_samples"] = i.train_samples;
  j["val_samples"] = i.val_samples;
  j["epochs"] = i.epochs;
  j["train_loss"] = i.train_loss;
  j["val_loss"] = i.val_loss;
  if (i.grid_json.empty()) {
    j["grid"] = json::array();
  } else {
    absl::StatusOr<json> grid = base::ParseBoundedJson(i.grid_json, kMetaLimits);
    if (!grid.ok()) return absl::InternalError(absl::StrCat("grid: ", grid.status().message()));
    j["grid"] = *std::move(grid);
  }
  if (i.sample_hashes.has_value()) {
    j["sample_hashes"] = {{"scheme", kSampleHashScheme},
                          {"train", i.sample_hashes->train},
                          {"validation", i.sample_hashes->validation}};
  }
  try {
    return j.dump();
  } catch (const json::exception& e) {  // a string that is not UTF-8
    return absl::InternalError(absl::StrCat("checkpoint metadata: ", e.what()));
  }
}

absl::StatusOr<CheckpointInfo> CheckpointInfoFromJson(std::string_view text) {
  absl::StatusOr<json> parsed = base::ParseBoundedJson(text, kMetaLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint metadata: ", parsed.status().message()));
  }
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError("checkpoint metadata: not a JSON object");
  CheckpointInfo i;
  ASSIGN_OR_RETURN(i.feature_schema, String(j, "feature_schema"));
  ASSIGN_OR_RETURN(i.device_kind, String(j, "device_kind"));
  ASSIGN_OR_RETURN(i.vocabulary, Strings(j, "vocabulary", kMaxVocabulary));
  ASSIGN_OR_RETURN(const json* s, Field(j, "stats"));
  // Bounded by a little more than the schema's sizes: the exact sizes are
  // ValidateCheckpointInfo's to check, with a message naming the schema.
  constexpr size_t kMaxStats = 1024;
  ASSIGN_OR_RETURN(i.stats.node_mean, Floats(*s, "node_mean", kMaxStats));
  ASSIGN_OR_RETURN(i.stats.node_std, Floats(*s, "node_std", kMaxStats));
  ASSIGN_OR_RETURN(i.stats.group_mean, Floats(*s, "group_mean", kMaxStats));
  ASSIGN_OR_RETURN(i.stats.group_std, Floats(*s, "group_std", kMaxStats));
  ASSIGN_OR_RETURN(const json* hp, Field(j, "hyper_parameters"));
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  ASSIGN_OR_RETURN(int64_t layers, Integer(*hp, "layers", 0, kIntMax));
  ASSIGN_OR_RETURN(int64_t heads, Integer(*hp, "heads", 0, kIntMax));
  ASSIGN_OR_RETURN(int64_t width, Integer(*hp, "width", 0, kIntMax));
  ASSIGN_OR_RETURN(int64_t type_embedding, Integer(*hp, "type_embedding", 0, kIntMax));
  i.hp = {.layers = static_cast<int>(layers),
          .heads = static_cast<int>(heads),
          .width = static_cast<int>(width),
          .type_embedding = static_cast<int>(type_embedding)};
  ASSIGN_OR_RETURN(i.split, String(j, "split"));
  ASSIGN_OR_RETURN(i.holdout, String(j, "holdout"));
  ASSIGN_OR_RETURN(const json* seed, Field(j, "seed"));
  if (!seed->is_number_integer()) return FieldError("seed", "is not an integer");
  i.seed = seed->get<uint64_t>();
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  ASSIGN_OR_RETURN(i.train_samples, Integer(j, "train_samples", 0, kInt64Max));
  ASSIGN_OR_RETURN(i.val_samples, Integer(j, "val_samples", 0, kInt64Max));
  ASSIGN_OR_RETURN(int64_t epochs, Integer(j, "epochs", 0, kIntMax));
  i.epochs = static_cast<int>(epochs);
  ASSIGN_OR_RETURN(i.train_loss, Number(j, "train_loss"));
  ASSIGN_OR_RETURN(i.val_loss, Number(j, "val_loss"));
  ASSIGN_OR_RETURN(const json* grid, Field(j, "grid"));
  i.grid_json = grid->dump();
  ASSIGN_OR_RETURN(i.sample_hashes, ReadSampleHashes(j));
  return i;
}

absl::Status ValidateHyperParams(const GnnHyperParams& hp) {
  if (hp.layers < 1 || hp.heads < 1 || hp.width < hp.heads || hp.width % hp.heads != 0 ||
      hp.type_embedding < 1 || hp.layers > 16 || hp.width > 4096 || hp.type_embedding > 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hyper-parameters: layers %d, heads %d, width %d, type embedding %d: need layers in "
        "1..16, width a multiple of heads (<= 4096), embedding in 1..1024",
        hp.layers, hp.heads, hp.width, hp.type_embedding));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointInfo(const CheckpointInfo& info) {
  RETURN_IF_ERROR(ValidateHyperParams(info.hp));
  if (info.vocabulary.size() > kMaxVocabulary) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary of ", info.vocabulary.size(),
                                                   " op types, above ", kMaxVocabulary));
  }
  const FeatureStats& s = info.stats;
  RETURN_IF_ERROR(CheckStats("node_mean", s.node_mean, kNodeFeatures, false));
  RETURN_IF_ERROR(CheckStats("node_std", s.node_std, kNodeFeatures, true));
  RETURN_IF_ERROR(CheckStats("group_mean", s.group_mean, kGroupFeatures, false));
  RETURN_IF_ERROR(CheckStats("group_std", s.group_std, kGroupFeatures, true));
  if (const std::optional<SampleHashes>& h = info.sample_hashes; h.has_value()) {
    if (h->train.size() + h->validation.size() > kMaxSampleHashes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample hashes: ", h->train.size() + h->validation.size(), " recorded, above ",
          kMaxSampleHashes));
    }
    if (static_cast<int64_t>(h->train.size()) != info.train_samples ||
        static_cast<int64_t>(h->validation.size()) != info.val_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample hashes: ", h->train.size(), " training and ", h->validation.size(),
          " validation samples recorded, but the network was trained on ", info.train_samples,
          " and validated on ", info.val_samples));
    }
  }
  return absl::OkStatus();
}

int64_t ParameterCount(const CheckpointInfo& info) {
  const GnnHyperParams& hp = info.hp;
  const int64_t w = hp.width;
  const int64_t half = std::max<int64_t>(1, w / 2);
  int64_t n = static_cast<int64_t>(info.vocabulary.size() + 1) * hp.type_embedding;  // embed
  int64_t in = kNodeFeatures + hp.type_embedding;
  for (int l = 0; l < hp.layers; ++l) {
    n += in * w + 3 * w;  // proj (no bias), att_src, att_dst, bias
    in = w;
  }
  n += 2 * w * w + w;                    // pool
  n += (w + kGroupFeatures) * w + w;     // fc1
  n += w * half + half;                  // fc2
  n += half + 1;                         // fc3
  return n;
}

}  // namespace braid::costmodel::gnn
