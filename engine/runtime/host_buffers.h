// Bounded pools of host buffers for a peer's exchanges: send buffers that payloads are staged into
// (so params can change while the transport still sends), and preallocated receive buffers that
// incoming payloads land in. For a CUDA peer the memory is pinned (Compute::allocateHost).
//
// A pool holds `slots` buffers of `slotBytes`, allocated up front. acquire() hands one out as a
// shared_ptr that returns it to the pool when the last owner lets go (on any thread); a request
// larger than a slot gets a buffer of its own, allocated and freed on the spot, counted against
// the same bound, so memory stays within slots x slotBytes plus one oversize buffer at a time.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kernels/memory_meter.h"

namespace gossamer::engine::runtime {

class HostBuffer {
 public:
  HostBuffer(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  std::span<std::byte> bytes() const { return {data_, size_}; }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::byte* data_;
  std::size_t size_;  // what was asked for (the slot may be larger)
};

class HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  // How the pool gets and gives back memory (Compute::allocateHost / freeHost).
  using Allocate = std::function<void*(std::size_t)>;
  using Free = std::function<void(void*)>;

  // `meter` (null: none) counts the slots and the oversize buffer while they exist; it must
  // outlive the pool and its buffers.
  static std::shared_ptr<HostBufferPool> make(std::size_t slots, std::size_t slotBytes,
                                              Allocate allocate, Free free,
                                              kernels::MemoryMeter* meter = nullptr);
  ~HostBufferPool();

  // A buffer of `bytes`, waiting up to `timeout` for room; null on timeout or after close().
  std::shared_ptr<HostBuffer> acquire(std::size_t bytes,
                                      std::chrono::steady_clock::duration timeout);
  // The same without waiting.
  std::shared_ptr<HostBuffer> tryAcquire(std::size_t bytes);
  // Wakes and fails every waiting acquire; later ones fail at once.
  void close();

  std::size_t slotBytes() const { return slotBytes_; }
  std::size_t freeSlots() const;
  // The preallocated slots (fixed for the pool's life): what a transport registers once
  // (Transport::registerMemory) so that RDMA sends and receives need no registration per message.
  std::vector<std::span<std::byte>> slots() const;

  HostBufferPool(std::size_t slots, std::size_t slotBytes, Allocate allocate, Free free,
                 kernels::MemoryMeter* meter);

 private:
  std::shared_ptr<HostBuffer> take(std::size_t bytes);  // with mutex_ held; null if no room
  void give(std::byte* data, std::size_t bytes, bool oversize);

  const std::size_t slotBytes_;
  Allocate allocate_;
  Free free_;
  kernels::MemoryMeter* meter_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::byte*> all_;
  std::vector<std::byte*> free_slots_;
  bool oversizeOut_ = false;
  bool closed_ = false;
};

}  // namespace gossamer::engine::runtime
