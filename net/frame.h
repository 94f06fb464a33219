// A Frame: a small header (opaque bytes to a transport; a Cap'n Proto message built by
// net/wire) and zero or more raw payload buffers sent and received without copies.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace gossamer::net {

// What a sender hands to Link::send. The header and every payload must stay valid and unchanged
// until the send completes (scatter-gather: nothing is copied into a staging buffer).
// (A constructor rather than an aggregate: GCC 12 destroys an aggregate temporary built inside a
// co_await expression twice, as in `co_await link.send(OutFrame{header, {}})`.)
struct OutFrame {
  OutFrame() = default;
  OutFrame(std::span<const std::byte> header, std::vector<std::span<const std::byte>> payloads = {})
      : header(header), payloads(std::move(payloads)) {}

  std::span<const std::byte> header;
  std::vector<std::span<const std::byte>> payloads;
};

// A received payload. Its bytes live either in a buffer the receiver supplied through a
// PayloadTarget, or in a buffer of the link's pool that returns to the pool when the Payload is
// destroyed (the pool is bounded by Limits::maxBufferedBytes).
class Payload {
 public:
  Payload() = default;
  // `owner` keeps pooled memory alive and returns it when released; null for caller memory.
  Payload(std::span<std::byte> bytes, std::shared_ptr<void> owner)
      : bytes_(bytes), owner_(std::move(owner)) {}
  std::span<std::byte> bytes() const { return bytes_; }
  std::size_t size() const { return bytes_.size(); }
  bool pooled() const { return owner_ != nullptr; }
  // Hands over what keeps the bytes alive (null for caller memory) and leaves this Payload empty,
  // so that a consumer takes ownership of received memory without wrapping it again.
  std::shared_ptr<void> releaseOwner() {
    bytes_ = {};
    return std::move(owner_);
  }

 private:
  std::span<std::byte> bytes_;
  std::shared_ptr<void> owner_;
};

struct InFrame {
  std::vector<std::byte> header;
  std::vector<Payload> payloads;
};

// Chooses where payload `index` (of `size` bytes) of the frame whose header is `header` lands.
// Returns a span of exactly `size` bytes owned by the caller, or an empty span to use the pool.
// Called on the link's io thread, after the header and before the payload bytes are read.
using PayloadTarget = std::function<std::span<std::byte>(std::span<const std::byte> header,
                                                         std::size_t index, std::size_t size)>;

}  // namespace gossamer::net
