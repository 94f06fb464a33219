// One RDMA link: its queue pair, completion queue and channel, receive slots and buffers, the
// credit accounting of protocol.h, and the send and receive of frames over them. Internal to
// the ibverbs backend (ibverbs_transport.cc makes these and hands them out as Links).
//
// Lifetime: held in a shared_ptr by the Link, by the coroutines that take completions and watch
// the control connection, and by every send and receive in progress; the verbs objects are
// destroyed with the last of them (QP first, so that no transfer touches freed memory). Every
// member is used on the io thread, except close() and the byte counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include "net/ibverbs/device.h"
#include "net/ibverbs/protocol.h"
#include "net/ibverbs/verbs.h"
#include "net/link_support.h"
#include "net/transport.h"

namespace gossamer::net::ibverbs {

class LinkState final : public std::enable_shared_from_this<LinkState>,
                        public detail::FrameReceiver<LinkState> {
 public:
  // A link over the control connection `control`: creates its CQ, channel and QP, moves the QP
  // to INIT and posts every receive (the remote may write as soon as it has our BootstrapInfo).
  static std::error_code create(std::shared_ptr<Device> device, asio::any_io_executor executor,
                                std::unique_ptr<Link> control, std::shared_ptr<LinkState>* out);
  LinkState(std::shared_ptr<Device> device, asio::any_io_executor executor,
            std::unique_ptr<Link> control);
  ~LinkState();
  LinkState(const LinkState&) = delete;
  LinkState& operator=(const LinkState&) = delete;

  Link& control() { return *control_; }
  protocol::BootstrapInfo localInfo() const;
  // Takes the remote's BootstrapInfo and moves the QP to RTR.
  std::error_code connect(const protocol::BootstrapInfo& remote);
  // Moves the QP to RTS (the remote is ready to receive) and starts taking completions and
  // watching the control connection.
  std::error_code start();

  static asio::awaitable<std::error_code> send(std::shared_ptr<LinkState> self, OutFrame frame);
  // receive(self, frame): detail::FrameReceiver's, over readFrame.
  void setPayloadTarget(PayloadTarget target) { target_ = std::move(target); }
  // Any thread; runs inline on the io thread.
  void close();
  // Io thread. The first call fails pending and later operations with `reason`, closes the
  // control connection and moves the QP to the error state.
  void closeWith(std::error_code reason);
  const std::string& remoteAddress() const { return remote_; }
  std::uint64_t bytesSent() const { return bytesSent_; }
  std::uint64_t bytesReceived() const { return bytesReceived_; }

 private:
  friend class detail::FrameReceiver<LinkState>;

  struct Buffer {
    std::unique_ptr<std::byte[]> memory;
    std::size_t bytes = 0;
    MemoryRegion mr;
  };
  // What a receive completion brought: a frame message in receive buffer `index`, or a chunk in
  // the next slot.
  struct Arrival {
    bool chunk = false;
    std::uint32_t index = 0;
    std::uint32_t bytes = 0;
  };

  std::error_code allocate(Buffer& buffer, std::size_t bytes, unsigned access);
  void release(Buffer& buffer);
  const Limits& limits() const { return device_->options().limits; }

  // Completions.
  static asio::awaitable<void> pollLoop(std::shared_ptr<LinkState> self);
  static asio::awaitable<void> watchControl(std::shared_ptr<LinkState> self);
  std::size_t drain();
  void handle(const WorkCompletion& wc);
  void failed(const WorkCompletion& wc);
  // The remote is gone (its control connection ended, or it stopped acknowledging): sends fail
  // with `error`, receives get what arrived before, then eof (or the error).
  void lostRemote(std::error_code error);
  void applyCredits(std::uint32_t imm);
  std::error_code failWith(std::error_code ec);

  // Sending.
  bool canPostData() const;
  bool canPostChunk() const;
  bool canPostCredit() const;
  std::error_code post(SendOpcode opcode, std::uint64_t wrId, std::span<const Sge> sges,
                       std::uint64_t remoteAddress = 0);
  asio::awaitable<std::error_code> postFrame(const OutFrame& frame, std::uint64_t* last);
  asio::awaitable<std::error_code> postSegment(std::span<const std::byte> data, bool staged);
  std::error_code takeStaging(std::size_t* index);
  // Sends a credit message when the rules of protocol.h call for one (`flush`: whatever is
  // unreported, because the receiver is about to wait).
  void maybeSendCredits(bool flush = false);

  // Receiving.
  asio::awaitable<std::error_code> readFrame(InFrame& frame);
  asio::awaitable<std::error_code> readSegment(std::span<std::byte> out);
  asio::awaitable<std::error_code> nextArrival(Arrival* arrival);
  std::error_code repostReceive(std::uint32_t index);

  // Waits on `condition` until `ready()`; fails with the close error, or peerError_ when the
  // remote went away (and `failOnPeerGone`).
  template <typename Ready>
  asio::awaitable<std::error_code> waitUntil(detail::AsyncCondition& condition, Ready ready,
                                             bool failOnPeerGone);
  void wakeAll();

  const std::shared_ptr<Device> device_;
  Verbs& verbs_;
  const Options& options_;
  const asio::any_io_executor executor_;
  std::unique_ptr<Link> control_;
  const std::string remote_;

  ChannelHandle channel_;
  CqHandle cq_;
  QpHandle qp_;
  std::uint32_t qpn_ = 0;
  std::uint32_t psn_ = 0;
  asio::posix::stream_descriptor events_;
  unsigned unackedEvents_ = 0;
  std::uint32_t sendDepth_ = 0;
  std::uint32_t dataWindow_ = 0;    // our receives for data messages
  std::uint32_t creditWindow_ = 0;  // our receives for credit messages

  Buffer slots_;     // slotCount * slotBytes, remote write
  Buffer receives_;  // (dataWindow_ + creditWindow_) * receiveBytes
  Buffer controls_;  // frame messages being sent, sendInline_ each
  std::vector<std::uint32_t> freeControls_;
  std::vector<Buffer> staging_;  // chunks being sent from unregistered memory, made on demand
  std::vector<std::uint32_t> freeStaging_;

  // Negotiated with the remote (the same on both ends).
  protocol::BootstrapInfo remoteInfo_;
  std::size_t chunkBytes_ = 0;
  std::size_t sendInline_ = 0;
  std::size_t maxStaging_ = 0;

  // Sending: what we posted, and what the remote reported freed.
  std::uint64_t dataSent_ = 0;
  std::uint64_t chunksSent_ = 0;
  std::uint64_t creditsSent_ = 0;
  std::uint64_t peerDataFreed_ = 0;
  std::uint64_t peerSlotsFreed_ = 0;
  std::uint64_t peerCreditsFreed_ = 0;
  std::uint64_t sendPosted_ = 0;
  std::uint64_t sendCompleted_ = 0;
  std::uint64_t firstFailedSend_ = UINT64_MAX;  // the number of the first send that failed
  std::deque<std::uint64_t> frameEnds_;         // the last work request of each frame not completed
  detail::FifoGate sendTurn_;
  std::vector<std::byte> txMeta_;

  // Receiving: what we freed and what we told the remote.
  std::uint64_t dataFreed_ = 0;
  std::uint64_t slotsFreed_ = 0;
  std::uint64_t creditsFreed_ = 0;
  std::uint64_t dataReported_ = 0;
  std::uint64_t slotsReported_ = 0;
  std::uint64_t creditsReported_ = 0;
  std::uint64_t chunksArrived_ = 0;
  std::uint64_t chunksConsumed_ = 0;
  bool flushWanted_ = false;  // a credit message to flush everything is owed
  std::deque<Arrival> arrivals_;
  bool midFrame_ = false;
  std::vector<std::byte> rxMeta_;
  std::vector<std::uint64_t> sizes_;
  detail::PayloadPlacement placement_;
  std::shared_ptr<detail::BufferPool> pool_;
  PayloadTarget target_;

  bool started_ = false;
  bool closed_ = false;
  bool peerGone_ = false;
  std::error_code peerError_;  // what sends fail with once peerGone_
  std::error_code closeError_;
  std::mutex waitMutex_;  // only for AsyncCondition's interface: all waiters are on the io thread
  detail::AsyncCondition sendWake_;
  detail::AsyncCondition receiveWake_;

  std::atomic<std::uint64_t> bytesSent_{0};
  std::atomic<std::uint64_t> bytesReceived_{0};
};

}  // namespace gossamer::net::ibverbs
