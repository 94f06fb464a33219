#include "net/ibverbs/rdma_link.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>

#include "engine/base/log.h"
#include "net/errors.h"

namespace gossamer::net::ibverbs {
namespace {

using detail::kUseTuple;

// Receives each link keeps posted for credit messages (protocol.h).
constexpr std::uint32_t kCreditWindow = 16;
// Completion events acknowledged at once (ibv_ack_cq_events takes a mutex).
constexpr unsigned kAckBatch = 16;
// Spare send queue entries beyond what the credits allow.
constexpr std::uint32_t kSendSpare = 8;
constexpr std::size_t kPollBatch = 32;

// What a work request id names: kind in the top byte, an index below.
enum class Kind : std::uint64_t {
  kReceive = 1,  // receive buffer `index`
  kFrame,        // the frame message in control buffer `index`
  kDirect,       // a chunk written from registered memory
  kStaged,       // a chunk written from staging buffer `index`
  kCredit,       // a credit message
};

std::uint64_t wrIdOf(Kind kind, std::uint64_t index) {
  return static_cast<std::uint64_t>(kind) << 56 | index;
}

std::uint64_t addressOf(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

std::uint32_t controlBuffers(const Limits& limits) {
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(limits.maxInFlightSends, 1, 64));
}

// The error a failed work completion closes the link with.
std::error_code errorOf(WcStatus status) {
  switch (status) {
    case WcStatus::kRetryExceeded:
      return asio::error::connection_reset;  // the remote is gone
    case WcStatus::kRnrRetryExceeded:
      return asio::error::timed_out;
    case WcStatus::kRemoteAccessError:
    case WcStatus::kRemoteInvalidRequest:
    case WcStatus::kLocalProtectionError:
      return Errc::rdmaAccessError;
    case WcStatus::kLocalLengthError:
      return Errc::malformedFrame;  // a SEND beyond our buffers
    default:
      return Errc::rdmaFailure;
  }
}

}  // namespace

LinkState::LinkState(std::shared_ptr<Device> device, asio::any_io_executor executor,
                     std::unique_ptr<Link> control)
    : device_(std::move(device)),
      verbs_(device_->verbs()),
      options_(device_->options()),
      executor_(std::move(executor)),
      control_(std::move(control)),
      remote_(control_->remoteAddress()),
      events_(executor_),
      pool_(std::make_shared<detail::BufferPool>(options_.limits.maxBufferedBytes)) {}

std::error_code LinkState::create(std::shared_ptr<Device> device, asio::any_io_executor executor,
                                  std::unique_ptr<Link> control, std::shared_ptr<LinkState>* out) {
  auto self =
      std::make_shared<LinkState>(std::move(device), std::move(executor), std::move(control));
  LinkState& s = *self;
  const Options& o = s.options_;
  s.dataWindow_ = static_cast<std::uint32_t>(o.slotCount + o.headerDepth);
  s.creditWindow_ = kCreditWindow;
  const std::uint32_t receiveDepth = s.dataWindow_ + s.creditWindow_;
  s.sendDepth_ = controlBuffers(o.limits) + static_cast<std::uint32_t>(o.slotCount) +
                 kCreditWindow + kSendSpare;
  *out = self;

  const ContextHandle context = s.device_->context();
  if (!o.busyPoll) {
    if (auto ec = s.verbs_.createChannel(context, &s.channel_)) return ec;
    std::error_code ec;
    s.events_.assign(s.verbs_.channelFd(s.channel_), ec);
    if (ec) return ec;
  }
  if (auto ec = s.verbs_.createCq(context, static_cast<int>(s.sendDepth_ + receiveDepth),
                                  s.channel_, &s.cq_))
    return ec;
  const QpCapabilities caps{.maxSendWr = s.sendDepth_, .maxRecvWr = receiveDepth};
  if (auto ec = s.verbs_.createQp(s.device_->pd(), s.cq_, caps, &s.qp_, &s.qpn_)) return ec;
  if (auto ec = s.allocate(s.slots_, o.slotCount * o.slotBytes, kLocalWrite | kRemoteWrite))
    return ec;
  if (auto ec = s.allocate(s.receives_, receiveDepth * o.receiveBytes, kLocalWrite)) return ec;
  QpTransition init;
  init.target = QpState::kInit;
  init.port = s.device_->choice().port;
  init.access = kLocalWrite | kRemoteWrite;
  if (auto ec = s.verbs_.modifyQp(s.qp_, init)) return ec;
  for (std::uint32_t i = 0; i < receiveDepth; ++i) {
    if (auto ec = s.repostReceive(i)) return ec;
  }
  std::random_device random;
  s.psn_ = random() & 0xffffff;
  return {};
}

LinkState::~LinkState() {
  if (events_.is_open()) events_.release();  // the channel owns the descriptor
  if (qp_) verbs_.destroyQp(qp_);
  release(slots_);
  release(receives_);
  release(controls_);
  for (Buffer& buffer : staging_) release(buffer);
  if (cq_) {
    if (unackedEvents_ > 0) verbs_.ackCqEvents(cq_, unackedEvents_);
    verbs_.destroyCq(cq_);
  }
  if (channel_) verbs_.destroyChannel(channel_);
}

std::error_code LinkState::allocate(Buffer& buffer, std::size_t bytes, unsigned access) {
  buffer.memory.reset(new (std::nothrow) std::byte[bytes]);
  if (!buffer.memory) return std::make_error_code(std::errc::not_enough_memory);
  buffer.bytes = bytes;
  if (auto ec =
          verbs_.registerMemory(device_->pd(), buffer.memory.get(), bytes, access, &buffer.mr)) {
    buffer.memory.reset();
    return ec;
  }
  return {};
}

void LinkState::release(Buffer& buffer) {
  if (!buffer.memory) return;
  verbs_.deregisterMemory(buffer.mr.handle);
  buffer.memory.reset();
}

protocol::BootstrapInfo LinkState::localInfo() const {
  const DeviceChoice& choice = device_->choice();
  return protocol::BootstrapInfo{.qpn = qpn_,
                                 .psn = psn_,
                                 .lid = choice.attributes.lid,
                                 .gid = choice.gid,
                                 .useGid = choice.useGid,
                                 .mtu = static_cast<std::uint32_t>(choice.attributes.activeMtu),
                                 .slotAddress = addressOf(slots_.memory.get()),
                                 .slotRkey = slots_.mr.rkey,
                                 .slotCount = static_cast<std::uint32_t>(options_.slotCount),
                                 .slotBytes = options_.slotBytes,
                                 .dataWindow = dataWindow_,
                                 .creditWindow = creditWindow_,
                                 .receiveBytes = static_cast<std::uint32_t>(options_.receiveBytes)};
}

std::error_code LinkState::connect(const protocol::BootstrapInfo& remote) {
  remoteInfo_ = remote;
  // Both ends compute the same: chunks and frame messages fit the smaller end's buffers, and
  // what we allocate is bounded by our own options, whatever the remote announced.
  chunkBytes_ = std::min<std::size_t>(options_.slotBytes, remote.slotBytes);
  sendInline_ = std::min<std::size_t>(options_.receiveBytes, remote.receiveBytes);
  maxStaging_ = std::min<std::size_t>(options_.slotCount, remote.slotCount);
  const std::uint32_t controls = controlBuffers(options_.limits);
  if (auto ec = allocate(controls_, controls * sendInline_, kLocalWrite)) return ec;
  for (std::uint32_t i = controls; i-- > 0;) freeControls_.push_back(i);

  const DeviceChoice& choice = device_->choice();
  QpTransition rtr;
  rtr.target = QpState::kReadyToReceive;
  rtr.port = choice.port;
  rtr.pathMtu = std::min<int>(choice.attributes.activeMtu, static_cast<int>(remote.mtu));
  rtr.remoteQpn = remote.qpn;
  rtr.remoteLid = remote.lid;
  rtr.useGid = choice.useGid;
  rtr.remoteGid = remote.gid;
  rtr.gidIndex = choice.gidIndex;
  rtr.receivePsn = remote.psn;
  return verbs_.modifyQp(qp_, rtr);
}

std::error_code LinkState::start() {
  QpTransition rts;
  rts.target = QpState::kReadyToSend;
  rts.sendPsn = psn_;
  rts.timeout = options_.ackTimeout;
  rts.retryCount = options_.retryCount;
  rts.rnrRetry = options_.rnrRetry;
  if (auto ec = verbs_.modifyQp(qp_, rts)) return ec;
  started_ = true;
  asio::co_spawn(executor_, pollLoop(shared_from_this()), asio::detached);
  asio::co_spawn(executor_, watchControl(shared_from_this()), asio::detached);
  return {};
}

// ---- completions ----

asio::awaitable<void> LinkState::pollLoop(std::shared_ptr<LinkState> self) {
  if (self->options_.busyPoll) {
    while (!self->closed_) {
      self->drain();
      co_await asio::post(self->executor_, asio::use_awaitable);  // let the io loop run
    }
    co_return;
  }
  for (;;) {
    // Arm, then take what came before arming; the next completion makes an event.
    if (auto ec = self->verbs_.requestNotify(self->cq_)) {
      self->failWith(ec);
      co_return;
    }
    self->drain();
    if (self->closed_) co_return;
    auto [ec] =
        co_await self->events_.async_wait(asio::posix::descriptor_base::wait_read, kUseTuple);
    if (self->closed_) co_return;
    if (ec) {
      self->failWith(ec);
      co_return;
    }
    CqHandle cq;
    while (!self->verbs_.getCqEvent(self->channel_, &cq)) ++self->unackedEvents_;
    if (self->unackedEvents_ >= kAckBatch) {
      self->verbs_.ackCqEvents(self->cq_, self->unackedEvents_);
      self->unackedEvents_ = 0;
    }
  }
}

asio::awaitable<void> LinkState::watchControl(std::shared_ptr<LinkState> self) {
  // Nothing is sent on the control connection after the bootstrap: whatever ends this receive
  // (the remote closed or vanished, or broke the protocol) means the remote is gone.
  InFrame frame;
  const std::error_code ec = co_await self->control_->receive(frame);
  if (self->closed_ || self->peerGone_) co_return;
  log::get("net")->debug("ibverbs: link to {} lost its control connection ({})", self->remote_,
                         ec ? ec.message() : "unexpected frame");
  // What the remote sent before it went is in our completion queue: take it first, so that the
  // receiver gets those frames before the end of the link.
  self->drain();
  self->lostRemote(asio::error::broken_pipe);
}

std::size_t LinkState::drain() {
  std::array<WorkCompletion, kPollBatch> completions;
  std::size_t total = 0;
  while (!closed_) {
    std::size_t count = 0;
    if (auto ec = verbs_.pollCq(cq_, completions, &count)) {
      failWith(ec);
      break;
    }
    for (std::size_t i = 0; i < count && !closed_; ++i) handle(completions[i]);
    total += count;
    if (count < completions.size()) break;
  }
  if (total > 0 && !closed_) {
    maybeSendCredits();
    wakeAll();
  }
  return total;
}

void LinkState::handle(const WorkCompletion& wc) {
  const auto kind = static_cast<Kind>(wc.wrId >> 56);
  const auto index = static_cast<std::uint32_t>(wc.wrId & ((std::uint64_t{1} << 56) - 1));
  if (kind != Kind::kReceive) {
    ++sendCompleted_;
    if (wc.status != WcStatus::kSuccess)
      firstFailedSend_ = std::min(firstFailedSend_, sendCompleted_);
    while (!frameEnds_.empty() && frameEnds_.front() <= sendCompleted_) frameEnds_.pop_front();
    if (kind == Kind::kFrame) freeControls_.push_back(index);
    if (kind == Kind::kStaged) freeStaging_.push_back(index);
  }
  if (wc.status != WcStatus::kSuccess) {
    failed(wc);
    return;
  }
  if (kind != Kind::kReceive) return;
  if (!wc.hasImm) {
    failWith(Errc::malformedFrame);
    return;
  }
  applyCredits(wc.imm);
  if (wc.opcode == WcOpcode::kRecvRdmaWithImm) {
    arrivals_.push_back(Arrival{.chunk = true, .index = 0, .bytes = wc.byteLength});
    // More chunks than slots: the remote ignored its credits.
    if (++chunksArrived_ - chunksConsumed_ > options_.slotCount) {
      failWith(Errc::malformedFrame);
      return;
    }
    if (repostReceive(index)) return;
    ++dataFreed_;
  } else if (wc.opcode == WcOpcode::kRecv && wc.byteLength == 0) {
    if (repostReceive(index)) return;
    ++creditsFreed_;
  } else if (wc.opcode == WcOpcode::kRecv) {
    arrivals_.push_back(Arrival{.chunk = false, .index = index, .bytes = wc.byteLength});
  } else {
    failWith(Errc::malformedFrame);
  }
}

void LinkState::failed(const WorkCompletion& wc) {
  if (wc.status == WcStatus::kFlushed) {
    // The QP is in the error state: because we closed the link or lost the remote (then this
    // is expected), or on its own after a fatal error.
    if (!closed_ && !peerGone_) failWith(Errc::rdmaFailure);
    return;
  }
  if (closed_) return;
  const bool unanswered =
      wc.status == WcStatus::kRetryExceeded || wc.status == WcStatus::kRnrRetryExceeded;
  // Requests to a remote known to be gone are expected to fail: not worth a warning.
  log::get("net")->log(unanswered && peerGone_ ? spdlog::level::debug : spdlog::level::warn,
                       "ibverbs: link to {}: a work request failed: {} (vendor error {:#x})",
                       remote_, statusName(wc.status), wc.vendorError);
  if (unanswered) {
    // The remote stopped answering: like its disconnect, what it sent before can still be
    // received, but nothing can be sent. Tell it (if it is still there) by closing the control
    // connection.
    lostRemote(errorOf(wc.status));
    control_->close();
    return;
  }
  failWith(errorOf(wc.status));
}

void LinkState::lostRemote(std::error_code error) {
  if (peerGone_) return;
  peerGone_ = true;
  peerError_ = error;
  wakeAll();
}

void LinkState::applyCredits(std::uint32_t imm) {
  const protocol::Credits credits = protocol::unpackImm(imm);
  peerDataFreed_ = protocol::advance(peerDataFreed_, credits.dataFreed, protocol::kDataBits);
  peerSlotsFreed_ = protocol::advance(peerSlotsFreed_, credits.slotsFreed, protocol::kSlotBits);
  peerCreditsFreed_ =
      protocol::advance(peerCreditsFreed_, credits.creditsFreed, protocol::kCreditBits);
}

std::error_code LinkState::failWith(std::error_code ec) {
  if (closed_) return closeError_;
  closeWith(ec);
  return ec;
}

void LinkState::close() {
  asio::dispatch(executor_,
                 [self = shared_from_this()] { self->closeWith(asio::error::operation_aborted); });
}

void LinkState::closeWith(std::error_code reason) {
  if (closed_) return;
  closed_ = true;
  closeError_ = reason;
  control_->close();  // the remote learns at once
  if (qp_) {
    QpTransition error;
    error.target = QpState::kError;
    verbs_.modifyQp(qp_, error);  // stops transfers; pending requests are flushed
  }
  std::error_code ignored;
  if (events_.is_open()) events_.cancel(ignored);
  sendTurn_.close();
  pool_->close();
  wakeAll();
}

void LinkState::wakeAll() {
  sendWake_.notifyAll();
  receiveWake_.notifyAll();
}

template <typename Ready>
asio::awaitable<std::error_code> LinkState::waitUntil(detail::AsyncCondition& condition,
                                                      Ready ready, bool failOnPeerGone) {
  std::unique_lock lock(waitMutex_);
  for (;;) {
    if (closed_) co_return closeError_;
    if (ready()) co_return std::error_code{};
    if (failOnPeerGone && peerGone_) co_return peerError_;
    if (auto ec = co_await condition.wait(lock)) co_return closed_ ? closeError_ : ec;
    lock.lock();
  }
}

// ---- sending ----

bool LinkState::canPostData() const {
  return sendPosted_ - sendCompleted_ < sendDepth_ &&
         dataSent_ - peerDataFreed_ < remoteInfo_.dataWindow;
}

bool LinkState::canPostChunk() const {
  return canPostData() && chunksSent_ - peerSlotsFreed_ < remoteInfo_.slotCount;
}

bool LinkState::canPostCredit() const {
  return sendPosted_ - sendCompleted_ < sendDepth_ &&
         creditsSent_ - peerCreditsFreed_ < remoteInfo_.creditWindow;
}

std::error_code LinkState::post(SendOpcode opcode, std::uint64_t wrId, std::span<const Sge> sges,
                                std::uint64_t remoteAddress) {
  const SendRequest request{.wrId = wrId,
                            .opcode = opcode,
                            .sges = sges,
                            .imm = protocol::packImm(dataFreed_, slotsFreed_, creditsFreed_),
                            .remoteAddress = remoteAddress,
                            .rkey = remoteInfo_.slotRkey};
  if (auto ec = verbs_.postSend(qp_, request)) return failWith(ec);
  dataReported_ = dataFreed_;
  slotsReported_ = slotsFreed_;
  creditsReported_ = creditsFreed_;
  ++sendPosted_;
  return {};
}

asio::awaitable<std::error_code> LinkState::send(std::shared_ptr<LinkState> self, OutFrame frame) {
  if (auto ec = detail::checkFrameShape(frame, self->limits())) co_return ec;
  if (frame.header.size() > UINT32_MAX) co_return Errc::frameTooLarge;  // the meta's u32
  if (frame.payloads.size() > UINT32_MAX) co_return Errc::tooManyPayloads;
  if (self->closed_) co_return self->closeError_;
  if (self->peerGone_) co_return self->peerError_;
  if (auto ec = co_await self->sendTurn_.enter()) co_return self->closed_ ? self->closeError_ : ec;
  std::uint64_t last = 0;
  std::size_t bytes = 0;
  {
    detail::FifoGate::Turn turn(self->sendTurn_);
    if (auto ec = co_await self->postFrame(frame, &last)) co_return ec;
    bytes = self->txMeta_.size();  // the meta buffer is the next turn holder's afterwards
  }
  // The caller's buffers may be read by the HCA until the frame's last request completes.
  if (auto ec = co_await self->waitUntil(
          self->sendWake_, [&] { return self->sendCompleted_ >= last; }, true))
    co_return ec;
  if (self->firstFailedSend_ <= last) {
    // A request of this frame failed (the remote stopped answering): the frame is lost.
    if (self->closed_) co_return self->closeError_;
    co_return self->peerGone_ ? self->peerError_ : make_error_code(Errc::rdmaFailure);
  }
  for (const auto& payload : frame.payloads) bytes += payload.size();
  self->bytesSent_ += bytes;
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkState::postFrame(const OutFrame& frame, std::uint64_t* last) {
  const std::size_t maxFrames = std::max<std::size_t>(limits().maxInFlightSends, 1);
  if (auto ec = co_await waitUntil(
          sendWake_, [&] { return frameEnds_.size() < maxFrames; }, true))
    co_return ec;
  txMeta_ = protocol::encodeMeta(frame);
  const std::size_t inlineBytes = std::min(txMeta_.size(), sendInline_);
  if (auto ec = co_await waitUntil(
          sendWake_, [&] { return canPostData() && !freeControls_.empty(); }, true))
    co_return ec;
  const std::uint32_t control = freeControls_.back();
  freeControls_.pop_back();
  std::byte* message = controls_.memory.get() + control * sendInline_;
  std::memcpy(message, txMeta_.data(), inlineBytes);
  const Sge sge{addressOf(message), static_cast<std::uint32_t>(inlineBytes), controls_.mr.lkey};
  if (auto ec = post(SendOpcode::kSendWithImm, wrIdOf(Kind::kFrame, control), {&sge, 1}))
    co_return ec;
  ++dataSent_;
  if (txMeta_.size() > inlineBytes) {
    if (auto ec = co_await postSegment(std::span(txMeta_).subspan(inlineBytes), true)) co_return ec;
  }
  for (const auto& payload : frame.payloads) {
    if (auto ec = co_await postSegment(payload, false)) co_return ec;
  }
  *last = sendPosted_;
  frameEnds_.push_back(sendPosted_);
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkState::postSegment(std::span<const std::byte> data,
                                                        bool staged) {
  while (!data.empty()) {
    const std::size_t bytes = std::min(data.size(), chunkBytes_);
    const std::span<const std::byte> piece = data.first(bytes);
    const Device::Region* region = staged ? nullptr : device_->findRegion(piece.data(), bytes);
    if (auto ec = co_await waitUntil(
            sendWake_,
            [&] {
              return canPostChunk() &&
                     (region != nullptr || !freeStaging_.empty() || staging_.size() < maxStaging_);
            },
            true))
      co_return ec;
    Sge sge;
    std::uint64_t wrId = 0;
    if (region != nullptr) {
      sge = Sge{addressOf(piece.data()), static_cast<std::uint32_t>(bytes), region->mr.lkey};
      wrId = wrIdOf(Kind::kDirect, 0);
    } else {
      std::size_t index = 0;
      if (auto ec = takeStaging(&index)) co_return failWith(ec);
      std::byte* buffer = staging_[index].memory.get();
      if (!staged && device_->isDeviceMemory(piece.data())) {
        options_.deviceMemory.copyToHost(buffer, piece.data(), bytes);
      } else {
        std::memcpy(buffer, piece.data(), bytes);
      }
      sge = Sge{addressOf(buffer), static_cast<std::uint32_t>(bytes), staging_[index].mr.lkey};
      wrId = wrIdOf(Kind::kStaged, index);
    }
    const std::uint64_t slot = chunksSent_ % remoteInfo_.slotCount;
    if (auto ec = post(SendOpcode::kWriteWithImm, wrId, {&sge, 1},
                       remoteInfo_.slotAddress + slot * remoteInfo_.slotBytes))
      co_return ec;
    ++dataSent_;
    ++chunksSent_;
    data = data.subspan(bytes);
  }
  co_return std::error_code{};
}

std::error_code LinkState::takeStaging(std::size_t* index) {
  if (!freeStaging_.empty()) {
    *index = freeStaging_.back();
    freeStaging_.pop_back();
    return {};
  }
  Buffer buffer;
  if (auto ec = allocate(buffer, chunkBytes_, kLocalWrite)) return ec;
  staging_.push_back(std::move(buffer));
  *index = staging_.size() - 1;
  return {};
}

void LinkState::maybeSendCredits(bool flush) {
  if (!started_ || closed_ || peerGone_) return;
  const std::uint64_t data = dataFreed_ - dataReported_;
  const std::uint64_t slots = slotsFreed_ - slotsReported_;
  const std::uint64_t credits = creditsFreed_ - creditsReported_;
  // Report before the remote can run dry, and acknowledge its credit messages every quarter of
  // their window, so that it can always send ours (protocol.h).
  flushWanted_ = flushWanted_ || flush;
  const bool due = (flushWanted_ && data + slots > 0) ||
                   slots >= std::max<std::uint64_t>(1, options_.slotCount / 2) ||
                   data >= std::max<std::uint64_t>(1, dataWindow_ / 2) ||
                   credits >= std::max<std::uint64_t>(1, creditWindow_ / 4);
  if (!due) {
    flushWanted_ = false;
    return;
  }
  if (!canPostCredit()) return;  // tried again after the next completions
  if (post(SendOpcode::kSendWithImm, wrIdOf(Kind::kCredit, 0), {})) return;
  ++creditsSent_;
  flushWanted_ = false;
}

// ---- receiving ----

std::error_code LinkState::repostReceive(std::uint32_t index) {
  const Sge sge{addressOf(receives_.memory.get() + index * options_.receiveBytes),
                static_cast<std::uint32_t>(options_.receiveBytes), receives_.mr.lkey};
  if (auto ec = verbs_.postRecv(qp_, RecvRequest{wrIdOf(Kind::kReceive, index), {&sge, 1}}))
    return failWith(ec);
  return {};
}

}  // namespace gossamer::net::ibverbs
