// Text helpers for names that come from outside (model files, RPC fields,
// the command line): whether a string is well-formed UTF-8, and how to show
// one safely on a terminal or in a log line. Used by the import bounds
// (graph/limits.h), the server's field checks and the CLI's output.
//
//   if (!base::IsValidUtf8(name)) {
//     return absl::InvalidArgumentError(
//         absl::StrCat("name '", base::EscapeForDisplay(name), "' is not valid UTF-8"));
//   }
#ifndef BRAID_BASE_TEXT_H_
#define BRAID_BASE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace braid::base {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code
// points above U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` made safe for a terminal or a log line: control characters (C0, DEL,
// C1) and invalid UTF-8 bytes become \xNN escapes, backslashes double.
std::string EscapeForDisplay(std::string_view s);

// A request field that travels as bytes: InvalidArgument naming `field`
// when `text` is longer than `max_bytes` or not valid UTF-8.
absl::Status CheckTextField(const char* field, std::string_view text, size_t max_bytes);

}  // namespace braid::base

#endif  // BRAID_BASE_TEXT_H_
