// The verbs objects of one RDMA link (rdma_link.h) and the memory registered for it: the
// completion channel and the descriptor its events are waited on through, the completion queue,
// the reliable-connected queue pair, and the buffers: the receive slots (the remote writes its
// chunks into them), the receive buffers (frame and credit messages), the control buffers
// (frame messages being sent) and the staging buffers (chunks sent from unregistered memory,
// made on demand). They are destroyed together, QP first, so that no transfer touches freed
// memory. Io thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include "net/ibverbs/device.h"
#include "net/ibverbs/protocol.h"
#include "net/ibverbs/verbs.h"

namespace gossamer::net::ibverbs {

// What a work request id names: kind in the top byte, an index below.
enum class WorkKind : std::uint64_t {
  kReceive = 1,  // receive buffer `index`
  kFrame,        // the frame message in control buffer `index`
  kDirect,       // a chunk written from registered memory
  kStaged,       // a chunk written from staging buffer `index`
  kCredit,       // a credit message
};

inline std::uint64_t wrIdOf(WorkKind kind, std::uint64_t index) {
  return static_cast<std::uint64_t>(kind) << 56 | index;
}
inline WorkKind kindOf(std::uint64_t wrId) { return static_cast<WorkKind>(wrId >> 56); }
inline std::uint32_t indexOf(std::uint64_t wrId) {
  return static_cast<std::uint32_t>(wrId & ((std::uint64_t{1} << 56) - 1));
}

inline std::uint64_t addressOf(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer);
}

// Memory registered on the device.
struct RegisteredBuffer {
  std::unique_ptr<std::byte[]> memory;
  std::size_t bytes = 0;
  MemoryRegion mr;
};

// What both ends make of each other's BootstrapInfo (the same on both ends): chunks and frame
// messages fit the smaller end's buffers, and what we allocate is bounded by our own options,
// whatever the remote announced.
struct Negotiated {
  protocol::BootstrapInfo remote;
  std::size_t chunkBytes = 0;  // the most one chunk holds
  std::size_t sendInline = 0;  // the most of a frame's meta its frame message holds
  std::size_t maxStaging = 0;  // staging buffers at most
};

class LinkResources {
 public:
  // Nothing is created yet; `executor` is the link's (the channel's events are waited on there).
  LinkResources(std::shared_ptr<Device> device, const asio::any_io_executor& executor);
  ~LinkResources();
  LinkResources(const LinkResources&) = delete;
  LinkResources& operator=(const LinkResources&) = delete;

  // Bring-up, in order (RESET -> INIT -> RTR -> RTS). create: the channel (unless busy
  // polling), the CQ and the QP, the slots and the receive buffers, the QP to INIT, and our PSN;
  // no receive is posted yet. negotiate: takes the remote's BootstrapInfo (negotiated()) and
  // makes the control buffers. readyToReceive: the QP to RTR. readyToSend: the QP to RTS.
  std::error_code create();
  std::error_code negotiate(const protocol::BootstrapInfo& remote);
  std::error_code readyToReceive();
  std::error_code readyToSend();
  // Moves the QP, if there is one, to the error state: transfers stop, and pending requests
  // complete as flushed.
  void toError();
  protocol::BootstrapInfo localInfo() const;

  Device& device() const { return *device_; }
  const Options& options() const { return device_->options(); }
  const Limits& limits() const { return device_->options().limits; }
  const Negotiated& negotiated() const { return negotiated_; }
  std::uint32_t sendDepth() const { return sendDepth_; }
  std::uint32_t dataWindow() const { return dataWindow_; }      // our receives for data messages
  std::uint32_t creditWindow() const { return creditWindow_; }  // ... and for credit messages
  std::uint32_t receiveDepth() const { return dataWindow_ + creditWindow_; }
  std::uint32_t controlCount() const;

  std::error_code postSend(const SendRequest& request) { return verbs_.postSend(qp_, request); }
  // Posts receive buffer `index` for the remote's next message.
  std::error_code postReceive(std::uint32_t index);

  // Completions. Arm the CQ, poll it, and wait on events() for the event the next completion
  // makes; takeEvents() takes the events that came (acknowledged in batches, the rest before
  // the CQ is destroyed). cancelEvents() ends a wait on events().
  std::error_code requestNotify() { return verbs_.requestNotify(cq_); }
  std::error_code poll(std::span<WorkCompletion> out, std::size_t* count) {
    return verbs_.pollCq(cq_, out, count);
  }
  asio::posix::stream_descriptor& events() { return events_; }
  void takeEvents();
  void cancelEvents();

  // Receive buffer `index`, and the slot the `chunk`-th chunk of the remote was written into
  // (it writes them in ring order).
  const std::byte* receiveBuffer(std::uint32_t index) const;
  const std::byte* slot(std::uint64_t chunk) const;
  // Control buffer `index` (sendInline bytes), and the key of all of them.
  std::byte* controlBuffer(std::uint32_t index);
  std::uint32_t controlKey() const { return controls_.mr.lkey; }
  // Staging buffers (chunkBytes each): addStaging makes one more, its index in *index.
  std::size_t stagingCount() const { return staging_.size(); }
  const RegisteredBuffer& staging(std::size_t index) const { return staging_[index]; }
  std::error_code addStaging(std::size_t* index);

 private:
  std::error_code allocate(RegisteredBuffer& buffer, std::size_t bytes, unsigned access);
  void release(RegisteredBuffer& buffer);

  const std::shared_ptr<Device> device_;
  Verbs& verbs_;
  const std::uint32_t sendDepth_;
  const std::uint32_t dataWindow_;
  const std::uint32_t creditWindow_;

  ChannelHandle channel_;
  asio::posix::stream_descriptor events_;  // the channel's descriptor, owned by the channel
  unsigned unackedEvents_ = 0;
  CqHandle cq_;
  QpHandle qp_;
  std::uint32_t qpn_ = 0;
  std::uint32_t psn_ = 0;

  RegisteredBuffer slots_;     // slotCount * slotBytes, remote write
  RegisteredBuffer receives_;  // receiveDepth() * receiveBytes
  RegisteredBuffer controls_;  // controlCount() * sendInline
  std::vector<RegisteredBuffer> staging_;
  Negotiated negotiated_;
};

}  // namespace gossamer::net::ibverbs
