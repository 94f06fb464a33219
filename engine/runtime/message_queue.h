// The inbox of one peer: messages the io thread received for the algorithm, waiting for the
// compute thread to claim them. Thread-safe; waits are bounded by deadlines and woken by every
// arrival and by wake() (a membership change, so that a wait for a peer that left ends early).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/algorithm.h"

namespace gossamer::engine::runtime {

class MessageQueue final : public Inbox {
 public:
  // Any thread.
  void push(Incoming message);
  void wake();
  // Fails every wait from now on (the peer is shutting down).
  void close();
  bool closed() const;

  // Calls `ready(queue)` under the lock until it returns true (then true), the deadline passes or
  // the queue closes (then false). `ready` may take messages out of the queue.
  template <typename Ready>
  bool waitUntil(std::chrono::steady_clock::time_point deadline, Ready ready) {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (ready(queue_)) return true;
      if (closed_) return false;
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return ready(queue_);
    }
  }

  std::vector<Incoming> drain(std::optional<std::uint32_t> kind = std::nullopt) override;
  bool wait(std::optional<std::uint32_t> kind, std::chrono::steady_clock::time_point deadline) override;
  std::size_t discardBefore(std::uint64_t step) override;
  std::size_t size() const override;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Incoming> queue_;
  bool closed_ = false;
};

}  // namespace gossamer::engine::runtime
