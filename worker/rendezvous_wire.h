// The rendezvous store's wire (worker/rendezvous_store.h): socket reads and
// writes with deadlines, the frames an authenticated connection exchanges
// (length, payload, MAC over a sequence number), and the payload encoding.
// Every size a peer sends is bounded before anything is allocated for it.
//
//   FramedChannel ch(fd, session_key, HandshakeRole::kClient, timeout);
//   Encoder e;
//   e.U8(static_cast<uint8_t>(StoreOp::kGet)).Bytes("key").I64(5000);
//   RETURN_IF_ERROR(ch.Send(e.data()));
//   ASSIGN_OR_RETURN(std::string reply, ch.Receive(deadline));
#ifndef BRAID_WORKER_RENDEZVOUS_WIRE_H_
#define BRAID_WORKER_RENDEZVOUS_WIRE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/rendezvous_auth.h"

namespace braid::worker::rendezvous {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt: wait for ever

// Bounds: a plan (the largest value the ranks exchange) is at most 256 MiB.
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = (size_t{256} << 20) + 4096;
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + 3 * kMaxKeyBytes;
inline constexpr size_t kMaxKeysPerRequest = 4096;
inline constexpr size_t kMaxStoreKeys = size_t{1} << 20;
inline constexpr size_t kMaxStoreBytes = size_t{1} << 30;

inline constexpr char kHelloMagic[] = "BRDZ1";  // 5 bytes, then the server nonce
inline constexpr uint8_t kAccept = 1;
inline constexpr uint8_t kRefuse = 0;

enum class StoreOp : uint8_t {
  kSet = 1,
  kGet = 2,         // key, timeout ms
  kAdd = 3,         // key, delta
  kCompareSet = 4,  // key, expected, desired
  kCheck = 5,       // keys
  kDelete = 6,      // key
  kNumKeys = 7,
  kWait = 8,        // keys, timeout ms
  kAwaitJoin = 9,   // timeout ms: until every rank joined
};

enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// `n` bytes from `fd` by `deadline`: DeadlineExceeded, or Unavailable when
// the peer closed or the socket failed.
absl::StatusOr<std::string> ReadExactly(int fd, size_t n, Deadline deadline);
absl::Status WriteAll(int fd, std::string_view data, Deadline deadline);

class Encoder {
 public:
  Encoder& U8(uint8_t v);
  Encoder& I64(int64_t v);
  Encoder& Bytes(std::string_view v);  // u32 length, then the bytes
  Encoder& Strings(const std::vector<std::string>& v);
  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

// Reads what an Encoder wrote; InvalidArgument for a short or oversized field.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  absl::StatusOr<uint8_t> U8();
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<std::string> Bytes(size_t max);
  absl::StatusOr<std::vector<std::string>> Strings(size_t max_count, size_t max_each);
  absl::Status Done() const;  // InvalidArgument when bytes are left over

 private:
  std::string_view in_;
};

// One authenticated connection after the handshake: frames of u32 length,
// payload, and the MAC of (sender's role, sequence, payload). A frame with a
// wrong MAC, out of order or replayed, or over kMaxFrameBytes ends the
// connection. Once a frame's first byte is there, the rest must come within
// `frame_timeout` (a slow peer holds no thread for ever).
class FramedChannel {
 public:
  FramedChannel(int fd, std::string session_key, HandshakeRole me,
                std::chrono::milliseconds frame_timeout)
      : fd_(fd), key_(std::move(session_key)), me_(me), frame_timeout_(frame_timeout) {}

  absl::Status Send(std::string_view payload);
  // `deadline` bounds the wait for the frame's first byte.
  absl::StatusOr<std::string> Receive(Deadline deadline);

 private:
  int fd_;
  std::string key_;
  HandshakeRole me_;
  std::chrono::milliseconds frame_timeout_;
  uint64_t sent_ = 0, received_ = 0;
};

}  // namespace braid::worker::rendezvous

#endif  // BRAID_WORKER_RENDEZVOUS_WIRE_H_
