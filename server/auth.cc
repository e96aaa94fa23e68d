#include "server/auth.h"

#include <string>

namespace braid::server {

namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace

absl::Status CheckBearer(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                         std::string_view token) {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing metadata 'authorization: Bearer <token>'");
  }
  std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kPrefix = "Bearer ";
  if (value.substr(0, kPrefix.size()) != kPrefix) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  if (token.empty() || !ConstantTimeEquals(value.substr(kPrefix.size()), token)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace braid::server
