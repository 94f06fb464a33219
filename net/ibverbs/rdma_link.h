// One RDMA link: its queue pair, completion queue and channel, receive slots and buffers, the
// credit accounting of protocol.h, and the send and receive of frames over them. Internal to
// the ibverbs backend (ibverbs_transport.cc makes these and hands them out as Links).
//
// LinkState owns the parts of the link and coordinates them (bring-up, the control connection,
// closing):
//   rdma_link_core.h     LinkCore (a base): the control connection, where the link stands, waits
//   rdma_resources.h     LinkResources: the verbs objects and the registered buffers
//   rdma_credits.h       SendWindow, CreditReturn: the credit accounting, one per direction
//   rdma_send.h          LinkSender: frames and credit messages posted under the send window
//   rdma_receive.h       LinkReceiver: arrivals, receives reposted, frames read
//   rdma_completions.h   CompletionPoller: completions taken and handed to the parts
//
// Lifetime: held in a shared_ptr by the Link, by the coroutines that take completions and watch
// the control connection, and by every send and receive in progress; the verbs objects are
// destroyed with the last of them (QP first, so that no transfer touches freed memory). Every
// member is used on the io thread, except close() and the byte counters.
#pragma once

#include <cstdint>
#include <memory>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "net/ibverbs/device.h"
#include "net/ibverbs/protocol.h"
#include "net/ibverbs/rdma_completions.h"
#include "net/ibverbs/rdma_credits.h"
#include "net/ibverbs/rdma_link_core.h"
#include "net/ibverbs/rdma_receive.h"
#include "net/ibverbs/rdma_resources.h"
#include "net/ibverbs/rdma_send.h"
#include "net/link_support.h"
#include "net/transport.h"

namespace gossamer::net::ibverbs {

class LinkState final : public std::enable_shared_from_this<LinkState>,
                        public LinkCore,
                        public detail::FrameReceiver<LinkState> {
 public:
  // A link over the control connection `control`: creates its CQ, channel and QP, moves the QP
  // to INIT and posts every receive (the remote may write as soon as it has our BootstrapInfo).
  // *out is set even when this fails (the caller closes it).
  static std::error_code create(std::shared_ptr<Device> device, asio::any_io_executor executor,
                                std::unique_ptr<Link> control, std::shared_ptr<LinkState>* out);
  LinkState(std::shared_ptr<Device> device, asio::any_io_executor executor,
            std::unique_ptr<Link> control);
  LinkState(const LinkState&) = delete;
  LinkState& operator=(const LinkState&) = delete;

  // control(), remoteAddress(): LinkCore's.
  protocol::BootstrapInfo localInfo() const { return resources_.localInfo(); }
  // Takes the remote's BootstrapInfo and moves the QP to RTR.
  std::error_code connect(const protocol::BootstrapInfo& remote);
  // Moves the QP to RTS (the remote is ready to receive) and starts taking completions and
  // watching the control connection.
  std::error_code start();

  static asio::awaitable<std::error_code> send(std::shared_ptr<LinkState> self, OutFrame frame);
  // receive(self, frame): detail::FrameReceiver's, over readFrame.
  void setPayloadTarget(PayloadTarget target) { receiver_.setPayloadTarget(std::move(target)); }
  // Any thread; runs inline on the io thread.
  void close();
  // Io thread. The first call fails pending and later operations with `reason`, closes the
  // control connection and moves the QP to the error state.
  void closeWith(std::error_code reason) override;
  std::uint64_t bytesSent() const { return sender_.bytesSent(); }
  std::uint64_t bytesReceived() const { return receiver_.bytesReceived(); }

 private:
  friend class detail::FrameReceiver<LinkState>;

  asio::awaitable<std::error_code> readFrame(InFrame& frame) { return receiver_.readFrame(frame); }
  static asio::awaitable<void> pollLoop(std::shared_ptr<LinkState> self);
  static asio::awaitable<void> watchControl(std::shared_ptr<LinkState> self);

  // In construction order: each part refers to those before it (and to the LinkCore).
  const asio::any_io_executor executor_;
  LinkResources resources_;
  CreditReturn credits_;  // what the receiver freed, reported by the sender
  LinkSender sender_;
  LinkReceiver receiver_;
  CompletionPoller poller_;
};

}  // namespace gossamer::net::ibverbs
