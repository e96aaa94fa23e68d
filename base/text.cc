#include "base/text.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace braid::base {

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string EscapeForDisplay(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02x", c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A multi-byte sequence: keep it when it is valid and not a C1 control.
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len != 0 && i + len <= s.size() && IsValidUtf8(s.substr(i, len))) {
      const bool c1 = len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
      if (!c1) {
        out.append(s.substr(i, len));
        i += len;
        continue;
      }
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(s[i + 1]));
      i += len;
      continue;
    }
    out += absl::StrFormat("\\x%02x", c);
    ++i;
  }
  return out;
}

absl::Status CheckTextField(const char* field, std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": longer than ", max_bytes, " bytes"));
  }
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not valid UTF-8 ('", EscapeForDisplay(text.substr(0, 80)), "')"));
  }
  return absl::OkStatus();
}

}  // namespace braid::base
