// LinkState's receiving side (rdma_link.h): frames read from the receive buffers, their chunks
// from where the sender wrote them, in the order they arrived.
#include <cstring>

#include "net/errors.h"
#include "net/ibverbs/rdma_link.h"

namespace gossamer::net::ibverbs {

asio::awaitable<std::error_code> LinkState::readFrame(InFrame& frame) {
  midFrame_ = false;
  Arrival first;
  if (auto ec = co_await nextArrival(&first)) co_return ec;
  if (first.chunk) co_return Errc::malformedFrame;
  midFrame_ = true;
  const std::span<const std::byte> message(
      receives_.memory.get() + first.index * options_.receiveBytes, first.bytes);
  protocol::MetaPrefix prefix;
  if (auto ec = protocol::decodeMetaPrefix(message, limits(), &prefix)) co_return ec;
  // A frame message holds all of the meta, or as much as fits.
  if (message.size() < prefix.metaBytes && message.size() != sendInline_)
    co_return Errc::malformedFrame;
  rxMeta_.resize(prefix.metaBytes);  // bounded by the limits checked above
  std::memcpy(rxMeta_.data(), message.data(), message.size());
  if (auto ec = repostReceive(first.index)) co_return ec;
  ++dataFreed_;
  if (message.size() < prefix.metaBytes) {
    if (auto ec = co_await readSegment(std::span(rxMeta_).subspan(message.size()))) co_return ec;
  }
  if (auto ec = protocol::decodeMetaSizes(rxMeta_, prefix, limits(), &sizes_)) co_return ec;
  frame.header.assign(rxMeta_.end() - static_cast<std::ptrdiff_t>(prefix.headerBytes),
                      rxMeta_.end());

  // Where each payload goes: the caller's buffer, or the pool (waiting, freeing no slot, while
  // the receiver holds the pool's bound: the sender runs out of credits and waits).
  if (auto ec = co_await detail::placePayloads(target_, *pool_, sizes_, frame, placement_))
    co_return ec;
  std::size_t bytes = rxMeta_.size();
  for (const Payload& payload : frame.payloads) {
    if (auto ec = co_await readSegment(payload.bytes())) co_return ec;
    bytes += payload.size();
  }
  midFrame_ = false;
  bytesReceived_ += bytes;
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkState::readSegment(std::span<std::byte> out) {
  const bool device = !out.empty() && device_->isDeviceMemory(out.data());
  while (!out.empty()) {
    const std::size_t bytes = std::min(out.size(), chunkBytes_);
    Arrival arrival;
    if (auto ec = co_await nextArrival(&arrival)) co_return ec;
    if (!arrival.chunk || arrival.bytes != bytes) co_return Errc::malformedFrame;
    const std::byte* slot =
        slots_.memory.get() + (chunksConsumed_ % options_.slotCount) * options_.slotBytes;
    if (device) {
      options_.deviceMemory.copyToDevice(out.data(), slot, bytes);
    } else {
      std::memcpy(out.data(), slot, bytes);
    }
    ++chunksConsumed_;
    ++slotsFreed_;
    maybeSendCredits();
    out = out.subspan(bytes);
  }
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkState::nextArrival(Arrival* arrival) {
  std::unique_lock lock(waitMutex_);
  for (;;) {
    if (closed_) co_return closeError_;
    if (!arrivals_.empty()) {
      *arrival = arrivals_.front();
      arrivals_.pop_front();
      co_return std::error_code{};
    }
    if (peerGone_) {
      // Between frames the remote closed (or stopped answering); in the middle of one it
      // vanished.
      if (midFrame_) co_return asio::error::connection_reset;
      if (peerError_ == asio::error::broken_pipe) co_return asio::error::eof;
      co_return peerError_;
    }
    // About to wait for the remote: it may be waiting for what we freed.
    maybeSendCredits(true);
    if (auto ec = co_await receiveWake_.wait(lock)) co_return closed_ ? closeError_ : ec;
    lock.lock();
  }
}

}  // namespace gossamer::net::ibverbs
