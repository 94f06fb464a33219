// The send side of one RDMA link (rdma_link.h): frames posted as protocol.h says (the frame
// message from a control buffer, then the meta's overflow and each payload in chunks, from
// registered memory where they lie or through a staging buffer), under the send window's
// credits, one frame at a time in the order the sends started; and the credit messages that
// return what the receive side freed. Io thread, except bytesSent().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <system_error>
#include <vector>

#include <asio/awaitable.hpp>

#include "net/frame.h"
#include "net/ibverbs/rdma_credits.h"
#include "net/ibverbs/rdma_link_core.h"
#include "net/ibverbs/rdma_resources.h"
#include "net/link_support.h"

namespace gossamer::net::ibverbs {

class LinkSender {
 public:
  // `credits`: the receive side's, reported in every message posted.
  LinkSender(LinkCore& core, LinkResources& resources, CreditReturn& credits);
  LinkSender(const LinkSender&) = delete;
  LinkSender& operator=(const LinkSender&) = delete;

  // After LinkResources::negotiate: every control buffer free, the window's bounds set.
  void connected();
  // Sends `frame` once its turn comes, and waits until its last request completed (the HCA may
  // read the caller's buffers until then). Fails with the close error, or the remote's when it
  // is gone; a frame that is not sent whole (a request failed) is lost.
  asio::awaitable<std::error_code> send(const OutFrame& frame);
  // A send request of `kind` completed (they complete in the order posted): frees its buffer,
  // and marks it failed unless `succeeded`.
  void completed(WorkKind kind, std::uint32_t index, bool succeeded);
  // Takes the credits a message of the remote carried in its immediate.
  void applyCredits(std::uint32_t imm) { window_.apply(imm); }
  // Sends a credit message when the rules of protocol.h call for one (`flush`: whatever is
  // unreported, because the receiver is about to wait).
  void maybeSendCredits(bool flush = false);
  // Fails the sends waiting for their turn (the link closed).
  void close() { sendTurn_.close(); }
  // Any thread.
  std::uint64_t bytesSent() const { return bytesSent_; }

 private:
  std::error_code post(SendOpcode opcode, std::uint64_t wrId, std::span<const Sge> sges,
                       std::uint64_t remoteAddress = 0);
  asio::awaitable<std::error_code> postFrame(const OutFrame& frame, std::uint64_t* last);
  asio::awaitable<std::error_code> postSegment(std::span<const std::byte> data, bool staged);
  std::error_code takeStaging(std::size_t* index);

  LinkCore& core_;
  LinkResources& resources_;
  CreditReturn& credits_;
  SendWindow window_;
  std::vector<std::uint32_t> freeControls_;
  std::vector<std::uint32_t> freeStaging_;
  std::deque<std::uint64_t> frameEnds_;  // the last work request of each frame not completed
  detail::FifoGate sendTurn_;
  std::vector<std::byte> txMeta_;  // the meta of the frame being posted
  std::atomic<std::uint64_t> bytesSent_{0};
};

}  // namespace gossamer::net::ibverbs
