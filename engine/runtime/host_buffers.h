// Bounded pools of host buffers for a peer's exchanges: send buffers that payloads are staged into
// (so params can change while the transport still sends), and preallocated receive buffers that
// incoming payloads land in. For a CUDA peer the memory is pinned (Compute::allocateHost).
//
// A pool holds at most `slots` buffers of at most `slotBytes` each. acquire() hands one out as a
// shared_ptr that returns it to the pool when the last owner lets go (on any thread); a request
// larger than a slot gets a buffer of its own, allocated and freed on the spot, so memory stays
// within slots x slotBytes plus one oversize buffer at a time.
//
//   preallocated  every slot is allocated at full size up front and kept for the pool's life:
//                 what RDMA registers once (slots()), and pinned memory, slow to allocate
//   on demand     (the default) a slot is allocated when no free one fits, at the request's size
//                 class (rounded up by at most 1/8, so that near-equal requests reuse a slot),
//                 and kept for reuse when given back; with `slots` buffers out or kept, a kept one
//                 too small is freed to make room. A pool that carries a ring's chunks of a
//                 model then holds chunks, not models (the peer's tracked peak memory).
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "kernels/memory_meter.h"

namespace gossamer::engine::runtime {

class HostBuffer {
 public:
  HostBuffer(std::byte* data, std::size_t size, std::size_t capacity)
      : data_(data), size_(size), capacity_(capacity) {}
  std::span<std::byte> bytes() const { return {data_, size_}; }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }  // the slot's bytes

 private:
  std::byte* data_;
  std::size_t size_;  // what was asked for (the slot may be larger)
  std::size_t capacity_;
};

class HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  // How the pool gets and gives back memory (Compute::allocateHost / freeHost).
  using Allocate = std::function<void*(std::size_t)>;
  using Free = std::function<void(void*)>;

  enum class Slots { kOnDemand, kPreallocated };

  // `meter` (null: none) counts the slots and the oversize buffer while they exist; it must
  // outlive the pool and its buffers.
  static std::shared_ptr<HostBufferPool> make(std::size_t slots, std::size_t slotBytes,
                                              Allocate allocate, Free free,
                                              kernels::MemoryMeter* meter = nullptr,
                                              Slots mode = Slots::kOnDemand);
  // The slot size class of a request of `bytes` (<= slotBytes): `bytes` rounded up to a multiple
  // of 2^(floor(log2 bytes) - 3), at least 4 KiB, at most slotBytes.
  static std::size_t sizeClass(std::size_t bytes, std::size_t slotBytes);
  ~HostBufferPool();

  // A buffer of `bytes`, waiting up to `timeout` for room; null on timeout or after close().
  std::shared_ptr<HostBuffer> acquire(std::size_t bytes,
                                      std::chrono::steady_clock::duration timeout);
  // The same without waiting.
  std::shared_ptr<HostBuffer> tryAcquire(std::size_t bytes);
  // Wakes and fails every waiting acquire; later ones fail at once.
  void close();

  std::size_t slotBytes() const { return slotBytes_; }
  // Slots that a request could have without waiting: the free ones and those not allocated yet.
  std::size_t freeSlots() const;
  // The slots allocated now (preallocated: all of them, fixed for the pool's life): what a
  // transport registers once (Transport::registerMemory) so that RDMA sends and receives need no
  // registration per message.
  std::vector<std::span<std::byte>> slots() const;

  HostBufferPool(std::size_t slots, std::size_t slotBytes, Allocate allocate, Free free,
                 kernels::MemoryMeter* meter, Slots mode);

 private:
  struct Slot {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
  };
  std::shared_ptr<HostBuffer> take(std::size_t bytes);  // with mutex_ held; null if no room
  // With mutex_ held: a free slot of at least `bytes` (allocated or grown on demand), if any.
  std::optional<Slot> slotFor(std::size_t bytes);
  Slot allocateSlot(std::size_t capacity);
  void freeSlot(Slot slot);
  void give(Slot slot, bool oversize);

  const std::size_t maxSlots_;
  const std::size_t slotBytes_;
  Allocate allocate_;
  Free free_;
  kernels::MemoryMeter* meter_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<Slot> all_;
  std::vector<Slot> free_slots_;
  bool oversizeOut_ = false;
  bool closed_ = false;
};

}  // namespace gossamer::engine::runtime
