// Digests that let training ranks trust a plan they did not fetch themselves
// (the activator, worker/activator.h): SHA-256 to compare with a digest
// obtained over an authenticated channel (the server's GetPlan), and
// HMAC-SHA256 keyed by a secret the ranks share, for plans that come from a
// file. A bare checksum catches corruption; only a digest from a trusted
// source or a keyed MAC catches tampering. OpenSSL's EVP and HMAC do the work.
//
//   std::string d = Sha256Hex(plan_bytes);            // 64 lowercase hex digits
//   std::string tag = HmacSha256Hex(secret, plan_bytes);
//   if (!DigestsEqual(tag, received_tag)) { /* refuse */ }
#ifndef BRAID_BASE_DIGEST_H_
#define BRAID_BASE_DIGEST_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace braid {

std::string Sha256Hex(std::string_view data);
std::string HmacSha256Hex(std::string_view key, std::string_view data);

// Constant-time comparison of two hex digests (case-insensitive), so a
// verifier does not leak how much of a forged tag was right.
bool DigestsEqual(std::string_view a, std::string_view b);

// The shared plan secret: the contents of `path` when not empty, else of
// $BRAID_PLAN_SECRET_FILE, else $BRAID_PLAN_SECRET. Surrounding whitespace is
// dropped. NotFound when none is set, FailedPrecondition when the secret is
// shorter than 16 bytes (too short to key a MAC), NotFound naming an
// unreadable file.
absl::StatusOr<std::string> LoadPlanSecret(const std::string& path);

}  // namespace braid

#endif  // BRAID_BASE_DIGEST_H_
