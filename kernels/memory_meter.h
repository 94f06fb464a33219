// How many bytes a peer holds in the allocations it tracks, and the most it held at once: its
// Compute's buffers (model, gradients, optimizer state, the algorithm's buffers, activations) and
// its staging pools (send, reply and receive slots, device upload slots). Any thread.
#pragma once

#include <atomic>
#include <cstddef>

namespace gossamer::kernels {

class MemoryMeter {
 public:
  void allocated(std::size_t bytes) {
    const std::size_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void freed(std::size_t bytes) { current_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::size_t current() const { return current_.load(std::memory_order_relaxed); }
  std::size_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

}  // namespace gossamer::kernels
