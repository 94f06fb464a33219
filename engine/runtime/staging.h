// Staging: the memory every payload passes through between a peer's Compute and its transport
// (engine/runtime/README.md), bounded per peer, allocated on demand (preallocated for RDMA and
// device Computes) and registered with the transport once (RDMA registers it; tcp and inproc
// ignore it):
//
//   send slots     payloads of compute-thread messages are copied here (on CUDA asynchronously,
//                  overlapped with the compute that follows); a message whose owner keeps its
//                  payloads unchanged is sent from where it is instead, when that is host memory
//   reply slots    payloads of serve() replies (io thread, which never waits: no slot, no reply)
//   receive slots  incoming payloads land here (the mesh's envelope target); pinned on CUDA
//   device slots   a CUDA peer's device copies of received payloads (PeerContext::upload),
//                  reused from message to message instead of allocated per message
//
// Compute-thread messages leave in the order they were staged, whatever order their copies end
// in: a message without payloads (a notify, the runtime's `finished` mark) never overtakes one
// whose payloads are still being copied off the device.
//
// Threading: stageFromCompute() and upload() on the compute thread; stageFromHost() on any
// thread; receiveSlot() on the io thread; close() on any thread. Internally locked (leaf locks).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/algorithm.h"
#include "engine/runtime/host_buffers.h"
#include "kernels/compute.h"
#include "net/frame.h"
#include "net/transport.h"

namespace gossamer::engine::runtime {

struct StagingSizes {
  std::size_t sendSlots = 8;
  std::size_t replySlots = 4;
  std::size_t receiveSlots = 16;  // also the device slots kept for uploads on CUDA
  // Every slot allocated up front at a model's size, as a transport that registers memory once
  // (RDMA) needs; otherwise host slots come on demand at their payloads' sizes (host_buffers.h),
  // except on a device Compute, whose pinned slots are slow to allocate.
  bool preallocate = false;
};

// A message's payload bytes ready for the transport, and what keeps them alive until it is done.
struct StagedBytes {
  std::vector<std::span<const std::byte>> spans;
  std::shared_ptr<const void> owner;
};

// The payload bytes of an outgoing message as it will travel (float32 as is, or encoded), in the
// Compute's memory or host memory; `owner` as Message::owner (null: staged by copy).
struct OutgoingBytes {
  std::vector<std::span<const std::byte>> spans;
  std::shared_ptr<const void> owner;
  static OutgoingBytes of(const Message& message);
};

class Staging {
 public:
  // Slots of `slotBytes` each (a model's size); larger payloads get a buffer of their own, one
  // at a time per pool. `compute` must outlive the staging.
  Staging(kernels::Compute& compute, std::size_t slotBytes, StagingSizes sizes);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Compute thread. Stages the payloads of `message` (the Compute's memory) and calls
  // ready(bytes) once they are in host memory, in the order of the calls: on this thread before
  // returning when nothing is in flight (always on the CPU), else on the thread that ends the
  // last copy ahead of it (CUDA's callback thread): `ready` must not block. Waits up to `wait`
  // for a send slot; false when none came (nothing is staged and `ready` is never called).
  bool stageFromCompute(const OutgoingBytes& payloads, Clock::duration wait,
                        std::function<void(StagedBytes)> ready);
  bool stageFromCompute(const Message& message, Clock::duration wait,
                        std::function<void(StagedBytes)> ready) {
    return stageFromCompute(OutgoingBytes::of(message), wait, std::move(ready));
  }
  // Any thread. The same for payloads in host memory, copied at once into a reply slot (`reply`,
  // never waiting) or a send slot (waiting up to `wait`); sent in place when message.owner is set.
  std::optional<StagedBytes> stageFromHost(const OutgoingBytes& payloads, bool reply,
                                           Clock::duration wait);
  std::optional<StagedBytes> stageFromHost(const Message& message, bool reply,
                                           Clock::duration wait) {
    return stageFromHost(OutgoingBytes::of(message), reply, wait);
  }

  // Io thread: a receive slot of `bytes` for an incoming payload, or an empty Payload when none
  // is free (the link's own bounded pool takes it then).
  net::Payload receiveSlot(std::size_t bytes);

  // Compute thread: a view of received host data in the Compute's memory (PeerContext::upload).
  DeviceView upload(std::span<const float> host);

  // Announces every preallocated slot to `transport` (Transport::registerMemory), host and
  // device, so that RDMA registers them once.
  void registerWith(net::Transport& transport);

  // Fails waiting and later acquisitions of send slots (the peer is shutting down).
  void close();

  // Uploads that found no free device slot and allocated one of their own (CUDA).
  std::size_t deviceOverflows() const;

 private:
  class DevicePool;
  struct InFlight;
  void release(const std::shared_ptr<InFlight>& done);

  kernels::Compute& compute_;
  std::shared_ptr<HostBufferPool> send_, reply_, receive_;
  std::unique_ptr<DevicePool> device_;
  std::mutex orderMutex_;  // leaf; held while `ready` callbacks run (they only post)
  std::deque<std::shared_ptr<InFlight>> inFlight_;
};

}  // namespace gossamer::engine::runtime
