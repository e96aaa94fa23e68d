// How the training ranks of one activation recognise each other at the
// rendezvous (worker/rendezvous_store.h): a mutual, nonce-based HMAC-SHA256
// challenge over a key only the ranks hold, and the per-frame MACs of the
// channel it opens. The key is derived from the ranks' shared secret (the
// plan secret for a plan file, the job's credential for a server job), never
// the secret itself, so a rendezvous proof cannot be mistaken for a plan tag.
//
// The handshake (rank 0 serves, rank r > 0 joins):
//   rank 0 -> r: "BRDZ1" + Ns                 (32 fresh random bytes)
//   r -> rank 0: r, Nc, HMAC(K, client | context | r | Ns | Nc)
//   rank 0 -> r: accept + HMAC(K, server | context | r | Ns | Nc), or refuse
// where context names the rendezvous address and the world size. Fresh
// nonces on both sides make a recorded transcript worthless: a replayed
// client proof does not cover the server's new Ns, a replayed server proof
// not the client's new Nc; the direction labels stop reflection. After it,
// every frame carries HMAC(session key, direction | sequence | SHA-256 of
// the frame), the session key bound to both nonces and the rank.
//
//   const std::string k = DeriveRendezvousKey(secret);
//   RendezvousContext ctx{.address = "10.0.0.1:29500", .world = 4};
//   std::string proof = HandshakeProof(k, ctx, HandshakeRole::kClient, 2, ns, nc);
#ifndef BRAID_WORKER_RENDEZVOUS_AUTH_H_
#define BRAID_WORKER_RENDEZVOUS_AUTH_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace braid::worker {

inline constexpr size_t kRendezvousNonceBytes = 32;
inline constexpr size_t kRendezvousMacBytes = 64;  // HMAC-SHA256, hex

// What every rank of one activation agrees on; each proof covers it.
struct RendezvousContext {
  std::string address;  // --rendezvous as given, HOST:PORT
  int world = 0;
};

// The rendezvous key of a shared secret; empty for an empty secret.
std::string DeriveRendezvousKey(std::string_view secret);

// `n` bytes from the kernel's random source (getrandom).
std::string RandomBytes(size_t n);

enum class HandshakeRole { kClient, kServer };

// The proof `role` sends for rank `rank` joining with the server's nonce
// `server_nonce` and the client's `client_nonce`.
std::string HandshakeProof(std::string_view key, const RendezvousContext& ctx, HandshakeRole role,
                           int rank, std::string_view server_nonce, std::string_view client_nonce);

// The key both ends MAC every later frame with.
std::string SessionKey(std::string_view key, const RendezvousContext& ctx, int rank,
                       std::string_view server_nonce, std::string_view client_nonce);

// The MAC of frame number `sequence` sent by `role`.
std::string FrameMac(std::string_view session_key, HandshakeRole role, uint64_t sequence,
                     std::string_view payload);

// `text` safe to print (base::EscapeForDisplay: control characters, terminal
// escapes among them, and invalid UTF-8 become \xNN), cut to `max_bytes` of
// input and marked with "..." when longer. For every text a peer sends.
std::string EscapePeerText(std::string_view text, size_t max_bytes = 4096);

}  // namespace braid::worker

#endif  // BRAID_WORKER_RENDEZVOUS_AUTH_H_
