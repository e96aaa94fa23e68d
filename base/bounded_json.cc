#include "base/bounded_json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/text.h"

namespace braid::base {

absl::Status CheckJsonBounds(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("JSON document of ", text.size(),
                                                   " bytes, more than the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, is string content
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limits.max_depth) {
          return absl::InvalidArgumentError(
              absl::StrCat("JSON nested more than ", limits.max_depth,
                           " levels deep (at byte ", i, ")"));
        }
        break;
      case ']':
      case '}':
        // Unbalanced closers are the parser's to report.
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ParseBoundedJson(std::string_view text, const JsonLimits& limits) {
  if (absl::Status s = CheckJsonBounds(text, limits); !s.ok()) return s;
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // The parser quotes what it last read: escaped, it may be any bytes.
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON: ", EscapeForDisplay(e.what())));
  }
}

nlohmann::json ParseBoundedJsonOrDiscarded(std::string_view text, const JsonLimits& limits) {
  if (!CheckJsonBounds(text, limits).ok()) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
  if (st.type() != fs::file_type::regular) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, st.type() == fs::file_type::directory ? ": is a directory, not a file"
                                                     : ": not a regular file"));
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, " bytes, more than the limit of ",
                                                   max_bytes, " bytes"));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) {
    const int err = errno;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open it: ", std::strerror(err)));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof(buf), f.get());
    if (n == 0) break;
    if (out.size() + n > max_bytes) {  // grew since it was measured
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than the limit of ", max_bytes, " bytes"));
    }
    out.append(buf, n);
  }
  if (std::ferror(f.get())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  }
  return out;
}

absl::StatusOr<nlohmann::json> ReadBoundedJsonFile(const std::string& path,
                                                   const JsonLimits& limits) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, limits.max_bytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(*text, limits);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.status().message()));
  return j;
}

}  // namespace braid::base
