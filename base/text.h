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

#include <string>
#include <string_view>

namespace braid::base {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code
// points above U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` made safe for a terminal or a log line: control characters (C0, DEL,
// C1) and invalid UTF-8 bytes become \xNN escapes, backslashes double.
std::string EscapeForDisplay(std::string_view s);

}  // namespace braid::base

#endif  // BRAID_BASE_TEXT_H_
