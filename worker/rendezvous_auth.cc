#include "worker/rendezvous_auth.h"

#include <sys/random.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "base/text.h"
#include "glog/logging.h"

namespace braid::worker {
namespace {

// Each field with its length, so no two different field lists give the same
// bytes (an address ending in digits cannot pass for the world size).
void Field(std::string& out, std::string_view name, std::string_view value) {
  absl::StrAppend(&out, std::string(name), ":", value.size(), ":");
  out.append(value);
  out += '\n';
}

const char* RoleName(HandshakeRole role) {
  return role == HandshakeRole::kClient ? "client" : "server";
}

std::string Transcript(std::string_view label, const RendezvousContext& ctx, int rank,
                       std::string_view server_nonce, std::string_view client_nonce) {
  std::string t = "braid-rendezvous-v1\n";
  Field(t, "label", label);
  Field(t, "address", ctx.address);
  Field(t, "world", absl::StrCat(ctx.world));
  Field(t, "rank", absl::StrCat(rank));
  Field(t, "server_nonce", server_nonce);
  Field(t, "client_nonce", client_nonce);
  return t;
}

}  // namespace

std::string DeriveRendezvousKey(std::string_view secret) {
  if (secret.empty()) return "";
  return HmacSha256Hex(secret, "braid rendezvous key v1");
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    // getrandom fails only for bad arguments or a kernel without it: a bug.
    PCHECK(r > 0) << "getrandom";
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string HandshakeProof(std::string_view key, const RendezvousContext& ctx, HandshakeRole role,
                           int rank, std::string_view server_nonce, std::string_view client_nonce) {
  return HmacSha256Hex(key, Transcript(RoleName(role), ctx, rank, server_nonce, client_nonce));
}

std::string SessionKey(std::string_view key, const RendezvousContext& ctx, int rank,
                       std::string_view server_nonce, std::string_view client_nonce) {
  return HmacSha256Hex(key, Transcript("session", ctx, rank, server_nonce, client_nonce));
}

std::string FrameMac(std::string_view session_key, HandshakeRole role, uint64_t sequence,
                     std::string_view payload) {
  // The payload's digest, not the payload, so a large frame is not copied.
  return HmacSha256Hex(session_key,
                       absl::StrCat(RoleName(role), "\n", sequence, "\n", Sha256Hex(payload)));
}

std::string EscapePeerText(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return base::EscapeForDisplay(text);
  return absl::StrCat(base::EscapeForDisplay(text.substr(0, max_bytes)), "...");
}

}  // namespace braid::worker
