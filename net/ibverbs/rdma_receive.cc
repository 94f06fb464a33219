#include "net/ibverbs/rdma_receive.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "net/errors.h"

namespace gossamer::net::ibverbs {

LinkReceiver::LinkReceiver(LinkCore& core, LinkResources& resources, CreditReturn& credits,
                           LinkSender& sender)
    : core_(core),
      resources_(resources),
      credits_(credits),
      sender_(sender),
      pool_(std::make_shared<detail::BufferPool>(resources.limits().maxBufferedBytes)) {}

std::error_code LinkReceiver::repostReceive(std::uint32_t index) {
  if (auto ec = resources_.postReceive(index)) return core_.failWith(ec);
  return {};
}

void LinkReceiver::arrived(std::uint32_t index, const WorkCompletion& wc) {
  if (wc.opcode == WcOpcode::kRecvRdmaWithImm) {
    arrivals_.push_back(Arrival{.chunk = true, .index = 0, .bytes = wc.byteLength});
    // More chunks than slots: the remote ignored its credits.
    if (++chunksArrived_ - chunksConsumed_ > resources_.options().slotCount) {
      core_.failWith(Errc::malformedFrame);
      return;
    }
    if (repostReceive(index)) return;
    ++credits_.dataFreed;
  } else if (wc.opcode == WcOpcode::kRecv && wc.byteLength == 0) {
    if (repostReceive(index)) return;
    ++credits_.creditsFreed;
  } else if (wc.opcode == WcOpcode::kRecv) {
    arrivals_.push_back(Arrival{.chunk = false, .index = index, .bytes = wc.byteLength});
  } else {
    core_.failWith(Errc::malformedFrame);
  }
}

asio::awaitable<std::error_code> LinkReceiver::readFrame(InFrame& frame) {
  const Limits& limits = resources_.limits();
  midFrame_ = false;
  Arrival first;
  if (auto ec = co_await nextArrival(&first)) co_return ec;
  if (first.chunk) co_return Errc::malformedFrame;
  midFrame_ = true;
  const std::span<const std::byte> message(resources_.receiveBuffer(first.index), first.bytes);
  protocol::MetaPrefix prefix;
  if (auto ec = protocol::decodeMetaPrefix(message, limits, &prefix)) co_return ec;
  // A frame message holds all of the meta, or as much as fits.
  if (message.size() < prefix.metaBytes && message.size() != resources_.negotiated().sendInline)
    co_return Errc::malformedFrame;
  rxMeta_.resize(prefix.metaBytes);  // bounded by the limits checked above
  std::memcpy(rxMeta_.data(), message.data(), message.size());
  if (auto ec = repostReceive(first.index)) co_return ec;
  ++credits_.dataFreed;
  if (message.size() < prefix.metaBytes) {
    if (auto ec = co_await readSegment(std::span(rxMeta_).subspan(message.size()))) co_return ec;
  }
  if (auto ec = protocol::decodeMetaSizes(rxMeta_, prefix, limits, &sizes_)) co_return ec;
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

asio::awaitable<std::error_code> LinkReceiver::readSegment(std::span<std::byte> out) {
  const Options& options = resources_.options();
  const bool device = !out.empty() && resources_.device().isDeviceMemory(out.data());
  while (!out.empty()) {
    const std::size_t bytes = std::min(out.size(), resources_.negotiated().chunkBytes);
    Arrival arrival;
    if (auto ec = co_await nextArrival(&arrival)) co_return ec;
    if (!arrival.chunk || arrival.bytes != bytes) co_return Errc::malformedFrame;
    const std::byte* slot = resources_.slot(chunksConsumed_);
    if (device) {
      options.deviceMemory.copyToDevice(out.data(), slot, bytes);
    } else {
      std::memcpy(out.data(), slot, bytes);
    }
    ++chunksConsumed_;
    ++credits_.slotsFreed;
    sender_.maybeSendCredits();
    out = out.subspan(bytes);
  }
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkReceiver::nextArrival(Arrival* arrival) {
  std::unique_lock lock(core_.waitMutex());
  for (;;) {
    if (core_.closed()) co_return core_.closeError();
    if (!arrivals_.empty()) {
      *arrival = arrivals_.front();
      arrivals_.pop_front();
      co_return std::error_code{};
    }
    if (core_.peerGone()) {
      // Between frames the remote closed (or stopped answering); in the middle of one it
      // vanished.
      if (midFrame_) co_return asio::error::connection_reset;
      if (core_.peerError() == asio::error::broken_pipe) co_return asio::error::eof;
      co_return core_.peerError();
    }
    // About to wait for the remote: it may be waiting for what we freed.
    sender_.maybeSendCredits(true);
    if (auto ec = co_await core_.receiveWake().wait(lock))
      co_return core_.closed() ? core_.closeError() : ec;
    lock.lock();
  }
}

}  // namespace gossamer::net::ibverbs
