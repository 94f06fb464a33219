#include "net/ibverbs/rdma_send.h"

#include <algorithm>
#include <cstring>

#include "net/errors.h"

namespace gossamer::net::ibverbs {

LinkSender::LinkSender(LinkCore& core, LinkResources& resources, CreditReturn& credits)
    : core_(core), resources_(resources), credits_(credits) {}

void LinkSender::connected() {
  for (std::uint32_t i = resources_.controlCount(); i-- > 0;) freeControls_.push_back(i);
  const protocol::BootstrapInfo& remote = resources_.negotiated().remote;
  window_.sendDepth = resources_.sendDepth();
  window_.dataWindow = remote.dataWindow;
  window_.slotCount = remote.slotCount;
  window_.creditWindow = remote.creditWindow;
}

std::error_code LinkSender::post(SendOpcode opcode, std::uint64_t wrId, std::span<const Sge> sges,
                                 std::uint64_t remoteAddress) {
  const SendRequest request{.wrId = wrId,
                            .opcode = opcode,
                            .sges = sges,
                            .imm = credits_.imm(),
                            .remoteAddress = remoteAddress,
                            .rkey = resources_.negotiated().remote.slotRkey};
  if (auto ec = resources_.postSend(request)) return core_.failWith(ec);
  credits_.reported();
  ++window_.posted;
  return {};
}

asio::awaitable<std::error_code> LinkSender::send(const OutFrame& frame) {
  if (auto ec = detail::checkFrameShape(frame, resources_.limits())) co_return ec;
  if (frame.header.size() > UINT32_MAX) co_return Errc::frameTooLarge;  // the meta's u32
  if (frame.payloads.size() > UINT32_MAX) co_return Errc::tooManyPayloads;
  if (core_.closed()) co_return core_.closeError();
  if (core_.peerGone()) co_return core_.peerError();
  if (auto ec = co_await sendTurn_.enter()) co_return core_.closed() ? core_.closeError() : ec;
  std::uint64_t last = 0;
  std::size_t bytes = 0;
  {
    detail::FifoGate::Turn turn(sendTurn_);
    if (auto ec = co_await postFrame(frame, &last)) co_return ec;
    bytes = txMeta_.size();  // the meta buffer is the next turn holder's afterwards
  }
  // The caller's buffers may be read by the HCA until the frame's last request completes.
  if (auto ec = co_await core_.waitUntil(
          core_.sendWake(), [&] { return window_.completed >= last; }, true))
    co_return ec;
  if (window_.firstFailed <= last) {
    // A request of this frame failed (the remote stopped answering): the frame is lost.
    if (core_.closed()) co_return core_.closeError();
    co_return core_.peerGone() ? core_.peerError() : make_error_code(Errc::rdmaFailure);
  }
  for (const auto& payload : frame.payloads) bytes += payload.size();
  bytesSent_ += bytes;
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkSender::postFrame(const OutFrame& frame, std::uint64_t* last) {
  const std::size_t maxFrames = std::max<std::size_t>(resources_.limits().maxInFlightSends, 1);
  if (auto ec = co_await core_.waitUntil(
          core_.sendWake(), [&] { return frameEnds_.size() < maxFrames; }, true))
    co_return ec;
  txMeta_ = protocol::encodeMeta(frame);
  const std::size_t inlineBytes = std::min(txMeta_.size(), resources_.negotiated().sendInline);
  if (auto ec = co_await core_.waitUntil(
          core_.sendWake(), [&] { return window_.canPostData() && !freeControls_.empty(); }, true))
    co_return ec;
  const std::uint32_t control = freeControls_.back();
  freeControls_.pop_back();
  std::byte* message = resources_.controlBuffer(control);
  std::memcpy(message, txMeta_.data(), inlineBytes);
  const Sge sge{addressOf(message), static_cast<std::uint32_t>(inlineBytes),
                resources_.controlKey()};
  if (auto ec = post(SendOpcode::kSendWithImm, wrIdOf(WorkKind::kFrame, control), {&sge, 1}))
    co_return ec;
  ++window_.dataSent;
  if (txMeta_.size() > inlineBytes) {
    if (auto ec = co_await postSegment(std::span(txMeta_).subspan(inlineBytes), true)) co_return ec;
  }
  for (const auto& payload : frame.payloads) {
    if (auto ec = co_await postSegment(payload, false)) co_return ec;
  }
  *last = window_.posted;
  frameEnds_.push_back(window_.posted);
  co_return std::error_code{};
}

asio::awaitable<std::error_code> LinkSender::postSegment(std::span<const std::byte> data,
                                                         bool staged) {
  const Negotiated& negotiated = resources_.negotiated();
  Device& device = resources_.device();
  while (!data.empty()) {
    const std::size_t bytes = std::min(data.size(), negotiated.chunkBytes);
    const std::span<const std::byte> piece = data.first(bytes);
    const Device::Region* region = staged ? nullptr : device.findRegion(piece.data(), bytes);
    if (auto ec = co_await core_.waitUntil(
            core_.sendWake(),
            [&] {
              return window_.canPostChunk() && (region != nullptr || !freeStaging_.empty() ||
                                                resources_.stagingCount() < negotiated.maxStaging);
            },
            true))
      co_return ec;
    Sge sge;
    std::uint64_t wrId = 0;
    if (region != nullptr) {
      sge = Sge{addressOf(piece.data()), static_cast<std::uint32_t>(bytes), region->mr.lkey};
      wrId = wrIdOf(WorkKind::kDirect, 0);
    } else {
      std::size_t index = 0;
      if (auto ec = takeStaging(&index)) co_return core_.failWith(ec);
      const RegisteredBuffer& staging = resources_.staging(index);
      std::byte* buffer = staging.memory.get();
      if (!staged && device.isDeviceMemory(piece.data())) {
        resources_.options().deviceMemory.copyToHost(buffer, piece.data(), bytes);
      } else {
        std::memcpy(buffer, piece.data(), bytes);
      }
      sge = Sge{addressOf(buffer), static_cast<std::uint32_t>(bytes), staging.mr.lkey};
      wrId = wrIdOf(WorkKind::kStaged, index);
    }
    const std::uint64_t slot = window_.chunksSent % negotiated.remote.slotCount;
    if (auto ec = post(SendOpcode::kWriteWithImm, wrId, {&sge, 1},
                       negotiated.remote.slotAddress + slot * negotiated.remote.slotBytes))
      co_return ec;
    ++window_.dataSent;
    ++window_.chunksSent;
    data = data.subspan(bytes);
  }
  co_return std::error_code{};
}

std::error_code LinkSender::takeStaging(std::size_t* index) {
  if (!freeStaging_.empty()) {
    *index = freeStaging_.back();
    freeStaging_.pop_back();
    return {};
  }
  return resources_.addStaging(index);
}

void LinkSender::completed(WorkKind kind, std::uint32_t index, bool succeeded) {
  ++window_.completed;
  if (!succeeded) window_.firstFailed = std::min(window_.firstFailed, window_.completed);
  while (!frameEnds_.empty() && frameEnds_.front() <= window_.completed) frameEnds_.pop_front();
  if (kind == WorkKind::kFrame) freeControls_.push_back(index);
  if (kind == WorkKind::kStaged) freeStaging_.push_back(index);
}

void LinkSender::maybeSendCredits(bool flush) {
  if (!core_.started() || core_.closed() || core_.peerGone()) return;
  if (!credits_.messageDue(flush, resources_.options().slotCount, resources_.dataWindow(),
                           resources_.creditWindow()))
    return;
  if (!window_.canPostCredit()) return;  // tried again after the next completions
  if (post(SendOpcode::kSendWithImm, wrIdOf(WorkKind::kCredit, 0), {})) return;
  ++window_.creditsSent;
  credits_.flushWanted = false;
}

}  // namespace gossamer::net::ibverbs
