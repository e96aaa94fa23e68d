#include "worker/rendezvous_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/digest.h"

namespace braid::worker::rendezvous {
namespace {

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status PollUntil(int fd, short events, Deadline deadline) {
  while (true) {
    int wait_ms = -1;
    if (deadline.has_value()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return absl::DeadlineExceededError("the peer did not answer in time");
      wait_ms = static_cast<int>(std::min<int64_t>(left, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, wait_ms);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<std::string> ReadExactly(int fd, size_t n, Deadline deadline) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    if (absl::Status s = PollUntil(fd, POLLIN, deadline); !s.ok()) return s;
    const ssize_t r = recv(fd, out.data() + got, n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return absl::UnavailableError("the peer closed the connection");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("recv: ", strerror(errno)));
    }
  }
  return out;
}

absl::Status WriteAll(int fd, std::string_view data, Deadline deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (absl::Status s = PollUntil(fd, POLLOUT, deadline); !s.ok()) return s;
    const ssize_t r = send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<size_t>(r);
    } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

Encoder& Encoder::U8(uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}

Encoder& Encoder::I64(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}

Encoder& Encoder::Bytes(std::string_view v) {
  const auto n = static_cast<uint32_t>(v.size());
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out_.append(v);
  return *this;
}

Encoder& Encoder::Strings(const std::vector<std::string>& v) {
  I64(static_cast<int64_t>(v.size()));
  for (const std::string& s : v) Bytes(s);
  return *this;
}

absl::StatusOr<uint8_t> Decoder::U8() {
  if (in_.empty()) return absl::InvalidArgumentError("rendezvous frame: short (u8)");
  const auto v = static_cast<uint8_t>(in_[0]);
  in_.remove_prefix(1);
  return v;
}

absl::StatusOr<int64_t> Decoder::I64() {
  if (in_.size() < 8) return absl::InvalidArgumentError("rendezvous frame: short (i64)");
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
  in_.remove_prefix(8);
  return static_cast<int64_t>(u);
}

absl::StatusOr<std::string> Decoder::Bytes(size_t max) {
  if (in_.size() < 4) return absl::InvalidArgumentError("rendezvous frame: short (length)");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(in_[i])} << (8 * i);
  in_.remove_prefix(4);
  if (n > max) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous frame: a field of ", n,
                                                   " bytes (at most ", max, ")"));
  }
  if (in_.size() < n) return absl::InvalidArgumentError("rendezvous frame: short (bytes)");
  std::string v(in_.substr(0, n));
  in_.remove_prefix(n);
  return v;
}

absl::StatusOr<std::vector<std::string>> Decoder::Strings(size_t max_count, size_t max_each) {
  absl::StatusOr<int64_t> n = I64();
  if (!n.ok()) return n.status();
  if (*n < 0 || static_cast<uint64_t>(*n) > max_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous frame: ", *n, " keys (at most ", max_count, ")"));
  }
  std::vector<std::string> out;
  for (int64_t i = 0; i < *n; ++i) {
    absl::StatusOr<std::string> s = Bytes(max_each);
    if (!s.ok()) return s.status();
    out.push_back(*std::move(s));
  }
  return out;
}

absl::Status Decoder::Done() const {
  if (!in_.empty()) return absl::InvalidArgumentError("rendezvous frame: trailing bytes");
  return absl::OkStatus();
}

absl::Status FramedChannel::Send(std::string_view payload) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: a frame of ", payload.size(), " bytes (at most ", kMaxFrameBytes, ")"));
  }
  Encoder e;
  e.Bytes(payload);
  std::string frame = e.data();
  frame += FrameMac(key_, me_, sent_++, payload);
  return WriteAll(fd_, frame, Clock::now() + frame_timeout_);
}

absl::StatusOr<std::string> FramedChannel::Receive(Deadline deadline) {
  absl::StatusOr<std::string> head = ReadExactly(fd_, 1, deadline);
  if (!head.ok()) return head.status();
  const Clock::time_point rest = Clock::now() + frame_timeout_;
  absl::StatusOr<std::string> len = ReadExactly(fd_, 3, rest);
  if (!len.ok()) return len.status();
  const std::string n4 = *head + *len;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(n4[i])} << (8 * i);
  if (n > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: the peer sent a frame of ", n, " bytes (at most ", kMaxFrameBytes, ")"));
  }
  absl::StatusOr<std::string> payload = ReadExactly(fd_, n, rest);
  if (!payload.ok()) return payload.status();
  absl::StatusOr<std::string> mac = ReadExactly(fd_, kRendezvousMacBytes, rest);
  if (!mac.ok()) return mac.status();
  const HandshakeRole peer = me_ == HandshakeRole::kClient ? HandshakeRole::kServer : HandshakeRole::kClient;
  if (!DigestsEqual(*mac, FrameMac(key_, peer, received_++, *payload))) {
    return absl::PermissionDeniedError(
        "rendezvous: a frame failed its MAC (changed, replayed or out of order)");
  }
  return payload;
}

}  // namespace braid::worker::rendezvous
