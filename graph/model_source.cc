#include "graph/model_source.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "graph/text_format.h"
#include "graph/zoo.h"

namespace braid::graph {
namespace {

constexpr std::string_view kZooPrefix = "zoo:";
constexpr std::string_view kSampleSuffix = "sample";

bool StartsWithGraphHeader(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // Skip blank lines and comments.
    while (i < bytes.size() && (bytes[i] == ' ' || bytes[i] == '\t' || bytes[i] == '\n' ||
                                bytes[i] == '\r')) {
      ++i;
    }
    if (i < bytes.size() && bytes[i] == '#') {
      while (i < bytes.size() && bytes[i] != '\n') ++i;
      continue;
    }
    break;
  }
  return bytes.substr(i, 6) == "graph ";
}

std::string Str(std::string_view s) { return std::string(s); }

}  // namespace

bool IsZooSource(std::string_view source) {
  return source.substr(0, kZooPrefix.size()) == kZooPrefix;
}

absl::StatusOr<ZooSource> ParseZooSource(std::string_view source) {
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(Str(source), ": ", why));
  };
  if (!IsZooSource(source)) return bad("a zoo model source starts with 'zoo:'");
  const std::vector<std::string> parts = absl::StrSplit(Str(source.substr(kZooPrefix.size())), '@');
  ZooSource out;
  out.name = parts[0];
  if (out.name.empty()) return bad("no model name after 'zoo:'");
  bool sized = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].size() > 1 && parts[i][0] == 'w' &&
        absl::SimpleAtoi(parts[i].substr(1), &out.width_pct)) {
      if (out.width_pct <= 0) return bad("the width after '@w' is a positive percentage");
    } else if (parts[i] == kSampleSuffix) {
      if (sized) return bad("'@sample' given twice");
      sized = true;
      out.size = ZooSize::kSample;
    } else if (out.batch > 0) {
      return bad("batch given twice");
    } else if (!absl::SimpleAtoi(parts[i], &out.batch) || out.batch <= 0) {
      return bad("after '@' comes 'sample', 'wPCT' (a width, with @sample) or the batch, a positive integer");
    }
  }
  if (out.width_pct != 100 && out.size != ZooSize::kSample) {
    return bad("'@w' (a width) needs '@sample'");
  }
  return out;
}

absl::StatusOr<Graph> LoadModelBytes(std::string_view bytes, std::string_view what,
                                     const LoadOptions& options,
                                     std::vector<std::string>* warnings) {
  if (StartsWithGraphHeader(bytes)) {
    auto g = ParseText(bytes);
    if (!g.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Str(what), ": ", std::string(g.status().message())));
    }
    return g;
  }
  OnnxImportOptions onnx = options.onnx;
  if (options.batch > 0) onnx.default_batch = options.batch;
  auto g = ImportOnnxBytes(bytes, onnx, warnings);
  if (!g.ok()) {
    // The importer names in-memory bytes "<onnx bytes>"; name them as the caller does.
    std::string msg(g.status().message());
    constexpr std::string_view kAnon = "<onnx bytes>: ";
    if (msg.compare(0, kAnon.size(), kAnon) == 0) msg.erase(0, kAnon.size());
    return absl::Status(g.status().code(), absl::StrCat(Str(what), ": ", msg));
  }
  return g;
}

absl::StatusOr<Graph> LoadModel(std::string_view source, const LoadOptions& options,
                                std::vector<std::string>* warnings) {
  if (IsZooSource(source)) {
    ASSIGN_OR_RETURN(ZooSource zoo, ParseZooSource(source));
    return BuildZooModel(zoo.name, zoo.batch > 0 ? zoo.batch : options.batch, zoo.size,
                         zoo.width_pct);
  }
  std::string path = Str(source);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read (a directory?)"));
  if (size > options.onnx.max_model_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, " bytes exceeds the limit of ",
                                                   options.onnx.max_model_bytes, " bytes"));
  }
  in.seekg(0);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": read failed"));
  if (StartsWithGraphHeader(bytes)) return LoadModelBytes(bytes, path, options, warnings);
  // ONNX files go through the importer's file path, which names the graph
  // after the file and the file in its errors.
  OnnxImportOptions onnx = options.onnx;
  if (options.batch > 0) onnx.default_batch = options.batch;
  return ImportOnnxFile(path, onnx, warnings);
}

int64_t ModelBatch(const Graph& g) {
  for (const Tensor& t : g.tensors())
    if (t.role == TensorRole::kInput && !t.shape.empty()) return t.shape[0];
  return 0;
}

}  // namespace braid::graph
