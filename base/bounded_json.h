// JSON from outside braid (plan files, cached plans, checkpoint metadata,
// rank specs, stored documents) parsed within limits: a size cap and a
// nesting-depth cap, both checked before the text reaches nlohmann-json.
// nlohmann parses deep input without recursion, but copying, comparing or
// dumping a tree recurses once per level, so a 1 MB file of a hundred
// thousand nested objects would overflow the stack long after parsing
// succeeded. The depth check is a linear scan that skips string contents
// (brackets inside strings do not count), so refusing costs no allocation.
//
//   absl::StatusOr<nlohmann::json> j = base::ParseBoundedJson(text, {.max_bytes = 256 << 20});
//   if (!j.ok()) return Prefixed(path, j.status());  // InvalidArgument
//   absl::StatusOr<nlohmann::json> f = base::ReadBoundedJsonFile("plan.json", kPlanJsonLimits);
#ifndef BRAID_BASE_BOUNDED_JSON_H_
#define BRAID_BASE_BOUNDED_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace braid::base {

struct JsonLimits {
  // The whole document, in bytes.
  size_t max_bytes = size_t{64} << 20;
  // Arrays and objects open at once. braid's own documents nest fewer than
  // ten levels; 64 leaves room for what other tools add around them.
  int max_depth = 64;
};

// Plan files and plan documents: plans of graphs at the op limit with their
// per-device programs run to tens of MiB (the activator's bound).
inline constexpr JsonLimits kPlanJsonLimits{.max_bytes = size_t{256} << 20, .max_depth = 64};

// InvalidArgument when `text` is longer than limits.max_bytes or opens more
// than limits.max_depth arrays and objects at once (naming the limit and the
// byte offset where it was passed). Says nothing about whether `text` is
// valid JSON otherwise.
absl::Status CheckJsonBounds(std::string_view text, const JsonLimits& limits = {});

// CheckJsonBounds, then nlohmann's parser: InvalidArgument for text that is
// out of bounds or not JSON (the parser's message, escaped for display).
absl::StatusOr<nlohmann::json> ParseBoundedJson(std::string_view text,
                                                const JsonLimits& limits = {});

// For callers of nlohmann's non-throwing idiom, parse(text, nullptr, false):
// the same bounds, and a discarded value (is_discarded()) for text that is
// out of bounds or not JSON.
nlohmann::json ParseBoundedJsonOrDiscarded(std::string_view text, const JsonLimits& limits = {});

// The file at `path`, at most limits.max_bytes of it (a larger file is
// refused before it is read), through ParseBoundedJson. NotFound when it
// does not exist; InvalidArgument when it is not a regular file, too large
// or not valid JSON. Messages start with the path.
absl::StatusOr<nlohmann::json> ReadBoundedJsonFile(const std::string& path,
                                                   const JsonLimits& limits = {});

// The bytes of the regular file at `path` when there are at most
// `max_bytes` of them; the errors of ReadBoundedJsonFile.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);

}  // namespace braid::base

#endif  // BRAID_BASE_BOUNDED_JSON_H_
