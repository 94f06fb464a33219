// A queue of received messages waiting for the compute thread: the algorithm's inbox, and the
// queue of replies to the runtime's own requests. Thread-safe; its lock is a leaf (nothing else
// is locked while it is held, see engine/runtime/README.md).
//
// Every push, wake() and close() bumps a change counter, so that a waiter can check conditions
// that live elsewhere (the membership view, the barriers) outside the lock and then sleep until
// something changed since it looked: waitChanged(seen, deadline).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/algorithm.h"

namespace gossamer::engine::runtime {

class MessageQueue final : public Inbox {
 public:
  // Any thread.
  void push(Incoming message);
  // Wakes every waiter (a membership change: a wait for a peer that left ends early).
  void wake();
  // Fails every wait from now on and drops what is queued (the peer is shutting down).
  void close();
  bool closed() const;
  // The latest step of a message `sender` pushed here (nullopt: none yet). Any thread.
  std::optional<std::uint64_t> latestStepFrom(PeerId sender) const;

  // The change counter; pass it to waitChanged() after checking conditions outside the lock.
  std::uint64_t version() const;
  // Sleeps until the counter differs from `seen`, the deadline passes or the queue closes; true
  // when something changed (a close counts as a change).
  bool waitChanged(std::uint64_t seen, Clock::time_point deadline);
  // Removes and returns the first queued message for which `match` is true, if any.
  std::optional<Incoming> take(const std::function<bool(const Incoming&)>& match);

  // engine::Inbox (the algorithm's view).
  std::vector<Incoming> drain(std::optional<std::uint32_t> kind = std::nullopt) override;
  std::size_t discardBefore(std::uint64_t step) override;
  std::size_t size() const override;
  bool wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) override;

 private:
  void changed(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Incoming> queue_;
  std::map<PeerId, std::uint64_t> latestStep_;
  std::uint64_t version_ = 0;
  bool closed_ = false;
};

// Waits until `queue` holds a message tagged `tag` from every peer of `from`, taking them out, or
// until `deadline`, or until every one still missing is `gone` (it will send nothing more: it
// left the view, say). Returns the messages in the order of `from`, and the peers that sent none.
// `gone` is called without the queue's lock held; a peer's message that was queued before it
// became gone is still taken.
GatherResult gather(MessageQueue& queue, std::span<const PeerId> from, std::uint64_t tag,
                    Clock::time_point deadline, const std::function<bool(PeerId)>& gone);

}  // namespace gossamer::engine::runtime
