#include "net/ibverbs/rdma_resources.h"

#include <algorithm>
#include <new>
#include <random>
#include <utility>

namespace gossamer::net::ibverbs {
namespace {

// Receives each link keeps posted for credit messages (protocol.h).
constexpr std::uint32_t kCreditWindow = 16;
// Completion events acknowledged at once (ibv_ack_cq_events takes a mutex).
constexpr unsigned kAckBatch = 16;
// Spare send queue entries beyond what the credits allow.
constexpr std::uint32_t kSendSpare = 8;

std::uint32_t controlBuffers(const Limits& limits) {
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(limits.maxInFlightSends, 1, 64));
}

}  // namespace

LinkResources::LinkResources(std::shared_ptr<Device> device, const asio::any_io_executor& executor)
    : device_(std::move(device)),
      verbs_(device_->verbs()),
      sendDepth_(controlBuffers(options().limits) +
                 static_cast<std::uint32_t>(options().slotCount) + kCreditWindow + kSendSpare),
      dataWindow_(static_cast<std::uint32_t>(options().slotCount + options().headerDepth)),
      creditWindow_(kCreditWindow),
      events_(executor) {}

LinkResources::~LinkResources() {
  if (events_.is_open()) events_.release();  // the channel owns the descriptor
  if (qp_) verbs_.destroyQp(qp_);
  release(slots_);
  release(receives_);
  release(controls_);
  for (RegisteredBuffer& buffer : staging_) release(buffer);
  if (cq_) {
    if (unackedEvents_ > 0) verbs_.ackCqEvents(cq_, unackedEvents_);
    verbs_.destroyCq(cq_);
  }
  if (channel_) verbs_.destroyChannel(channel_);
}

std::uint32_t LinkResources::controlCount() const { return controlBuffers(limits()); }

std::error_code LinkResources::allocate(RegisteredBuffer& buffer, std::size_t bytes,
                                        unsigned access) {
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

void LinkResources::release(RegisteredBuffer& buffer) {
  if (!buffer.memory) return;
  verbs_.deregisterMemory(buffer.mr.handle);
  buffer.memory.reset();
}

std::error_code LinkResources::create() {
  const Options& o = options();
  const ContextHandle context = device_->context();
  if (!o.busyPoll) {
    if (auto ec = verbs_.createChannel(context, &channel_)) return ec;
    std::error_code ec;
    events_.assign(verbs_.channelFd(channel_), ec);
    if (ec) return ec;
  }
  if (auto ec =
          verbs_.createCq(context, static_cast<int>(sendDepth_ + receiveDepth()), channel_, &cq_))
    return ec;
  const QpCapabilities caps{.maxSendWr = sendDepth_, .maxRecvWr = receiveDepth()};
  if (auto ec = verbs_.createQp(device_->pd(), cq_, caps, &qp_, &qpn_)) return ec;
  if (auto ec = allocate(slots_, o.slotCount * o.slotBytes, kLocalWrite | kRemoteWrite)) return ec;
  if (auto ec = allocate(receives_, receiveDepth() * o.receiveBytes, kLocalWrite)) return ec;
  QpTransition init;
  init.target = QpState::kInit;
  init.port = device_->choice().port;
  init.access = kLocalWrite | kRemoteWrite;
  if (auto ec = verbs_.modifyQp(qp_, init)) return ec;
  std::random_device random;
  psn_ = random() & 0xffffff;
  return {};
}

std::error_code LinkResources::negotiate(const protocol::BootstrapInfo& remote) {
  const Options& o = options();
  negotiated_.remote = remote;
  negotiated_.chunkBytes = std::min<std::size_t>(o.slotBytes, remote.slotBytes);
  negotiated_.sendInline = std::min<std::size_t>(o.receiveBytes, remote.receiveBytes);
  negotiated_.maxStaging = std::min<std::size_t>(o.slotCount, remote.slotCount);
  return allocate(controls_, controlCount() * negotiated_.sendInline, kLocalWrite);
}

std::error_code LinkResources::readyToReceive() {
  const protocol::BootstrapInfo& remote = negotiated_.remote;
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

std::error_code LinkResources::readyToSend() {
  const Options& o = options();
  QpTransition rts;
  rts.target = QpState::kReadyToSend;
  rts.sendPsn = psn_;
  rts.timeout = o.ackTimeout;
  rts.retryCount = o.retryCount;
  rts.rnrRetry = o.rnrRetry;
  return verbs_.modifyQp(qp_, rts);
}

void LinkResources::toError() {
  if (!qp_) return;
  QpTransition error;
  error.target = QpState::kError;
  verbs_.modifyQp(qp_, error);
}

protocol::BootstrapInfo LinkResources::localInfo() const {
  const DeviceChoice& choice = device_->choice();
  const Options& o = options();
  return protocol::BootstrapInfo{.qpn = qpn_,
                                 .psn = psn_,
                                 .lid = choice.attributes.lid,
                                 .gid = choice.gid,
                                 .useGid = choice.useGid,
                                 .mtu = static_cast<std::uint32_t>(choice.attributes.activeMtu),
                                 .slotAddress = addressOf(slots_.memory.get()),
                                 .slotRkey = slots_.mr.rkey,
                                 .slotCount = static_cast<std::uint32_t>(o.slotCount),
                                 .slotBytes = o.slotBytes,
                                 .dataWindow = dataWindow_,
                                 .creditWindow = creditWindow_,
                                 .receiveBytes = static_cast<std::uint32_t>(o.receiveBytes)};
}

std::error_code LinkResources::postReceive(std::uint32_t index) {
  const std::size_t bytes = options().receiveBytes;
  const Sge sge{addressOf(receives_.memory.get() + index * bytes),
                static_cast<std::uint32_t>(bytes), receives_.mr.lkey};
  return verbs_.postRecv(qp_, RecvRequest{wrIdOf(WorkKind::kReceive, index), {&sge, 1}});
}

void LinkResources::takeEvents() {
  CqHandle cq;
  while (!verbs_.getCqEvent(channel_, &cq)) ++unackedEvents_;
  if (unackedEvents_ >= kAckBatch) {
    verbs_.ackCqEvents(cq_, unackedEvents_);
    unackedEvents_ = 0;
  }
}

void LinkResources::cancelEvents() {
  std::error_code ignored;
  if (events_.is_open()) events_.cancel(ignored);
}

const std::byte* LinkResources::receiveBuffer(std::uint32_t index) const {
  return receives_.memory.get() + index * options().receiveBytes;
}

const std::byte* LinkResources::slot(std::uint64_t chunk) const {
  return slots_.memory.get() + (chunk % options().slotCount) * options().slotBytes;
}

std::byte* LinkResources::controlBuffer(std::uint32_t index) {
  return controls_.memory.get() + index * negotiated_.sendInline;
}

std::error_code LinkResources::addStaging(std::size_t* index) {
  RegisteredBuffer buffer;
  if (auto ec = allocate(buffer, negotiated_.chunkBytes, kLocalWrite)) return ec;
  staging_.push_back(std::move(buffer));
  *index = staging_.size() - 1;
  return {};
}

}  // namespace gossamer::net::ibverbs
