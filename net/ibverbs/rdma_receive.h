// The receive side of one RDMA link (rdma_link.h): what the receive completions brought
// (arrivals, in the order they came), the receives reposted and the slots freed as they are read
// (the credits the send side returns), and the frames read from them: the frame message from its
// receive buffer, then the meta's overflow and each payload from the slots the sender wrote them
// into, in ring order. Io thread, except bytesReceived().
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>

#include "net/frame.h"
#include "net/ibverbs/rdma_credits.h"
#include "net/ibverbs/rdma_link_core.h"
#include "net/ibverbs/rdma_resources.h"
#include "net/ibverbs/rdma_send.h"
#include "net/link_support.h"

namespace gossamer::net::ibverbs {

class LinkReceiver {
 public:
  // `credits`: what this side freed, which `sender` reports to the remote.
  LinkReceiver(LinkCore& core, LinkResources& resources, CreditReturn& credits, LinkSender& sender);
  LinkReceiver(const LinkReceiver&) = delete;
  LinkReceiver& operator=(const LinkReceiver&) = delete;

  // Posts receive buffer `index` again; a failure closes the link.
  std::error_code repostReceive(std::uint32_t index);
  // A receive completion of receive buffer `index` that succeeded, its credits taken: a chunk
  // (its receive is reposted at once), a credit message (reposted), or a frame message (kept
  // until read). Anything else, or more chunks than slots, closes the link (malformedFrame).
  void arrived(std::uint32_t index, const WorkCompletion& wc);
  // Reads the next frame (detail::FrameReceiver's readFrame).
  asio::awaitable<std::error_code> readFrame(InFrame& frame);
  void setPayloadTarget(PayloadTarget target) { target_ = std::move(target); }
  // Fails a receive waiting for pool buffers (the link closed).
  void close() { pool_->close(); }
  // Any thread.
  std::uint64_t bytesReceived() const { return bytesReceived_; }

 private:
  // What a receive completion brought: a frame message in receive buffer `index`, or a chunk in
  // the next slot.
  struct Arrival {
    bool chunk = false;
    std::uint32_t index = 0;
    std::uint32_t bytes = 0;
  };

  asio::awaitable<std::error_code> readSegment(std::span<std::byte> out);
  asio::awaitable<std::error_code> nextArrival(Arrival* arrival);

  LinkCore& core_;
  LinkResources& resources_;
  CreditReturn& credits_;
  LinkSender& sender_;
  std::deque<Arrival> arrivals_;
  std::uint64_t chunksArrived_ = 0;
  std::uint64_t chunksConsumed_ = 0;
  bool midFrame_ = false;
  std::vector<std::byte> rxMeta_;
  std::vector<std::uint64_t> sizes_;
  detail::PayloadPlacement placement_;
  std::shared_ptr<detail::BufferPool> pool_;
  PayloadTarget target_;
  std::atomic<std::uint64_t> bytesReceived_{0};
};

}  // namespace gossamer::net::ibverbs
