#include "base/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace braid {
namespace {

std::string Hex(const unsigned char* d, unsigned int n) {
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(d), n));
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  CHECK_EQ(EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr), 1);
  return Hex(md, n);
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
             reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &n) != nullptr);
  return Hex(md, n);
}

bool DigestsEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(absl::ascii_tolower(static_cast<unsigned char>(a[i])) ^
                                       absl::ascii_tolower(static_cast<unsigned char>(b[i])));
  }
  return diff == 0;
}

absl::StatusOr<std::string> LoadPlanSecret(const std::string& path) {
  std::string file = path;
  if (file.empty()) {
    if (const char* f = std::getenv("BRAID_PLAN_SECRET_FILE"); f != nullptr && *f != '\0') file = f;
  }
  std::string secret;
  std::string source;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("plan secret file ", file, ": cannot read it"));
    std::stringstream ss;
    ss << in.rdbuf();
    secret = ss.str();
    source = file;
  } else if (const char* s = std::getenv("BRAID_PLAN_SECRET"); s != nullptr && *s != '\0') {
    secret = s;
    source = "$BRAID_PLAN_SECRET";
  } else {
    return absl::NotFoundError(
        "no plan secret: set BRAID_PLAN_SECRET or BRAID_PLAN_SECRET_FILE, or pass --secret-file "
        "(the same on every rank)");
  }
  secret = std::string(absl::StripAsciiWhitespace(secret));
  if (secret.size() < 16) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan secret from ", source, " has ", secret.size(), " bytes; at least 16 are needed"));
  }
  return secret;
}

}  // namespace braid
