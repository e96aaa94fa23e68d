#include "graph/model_source.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/text_format.h"
#include "graph/zoo.h"

namespace braid::graph {
namespace {

constexpr std::string_view kZooPrefix = "zoo:";

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
  if (source.substr(0, kZooPrefix.size()) == kZooPrefix) {
    std::string name = Str(source.substr(kZooPrefix.size()));
    int batch = options.batch;
    if (size_t at = name.find('@'); at != std::string::npos) {
      if (!absl::SimpleAtoi(name.substr(at + 1), &batch) || batch <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(Str(source), ": batch after '@' must be a positive integer"));
      }
      name.resize(at);
    }
    return BuildZooModel(name, batch);
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

}  // namespace braid::graph
