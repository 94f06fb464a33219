#include "engine/runtime/message_queue.h"

#include <algorithm>

namespace gossamer::engine::runtime {

void MessageQueue::changed(std::unique_lock<std::mutex>& lock) {
  ++version_;
  lock.unlock();
  changed_.notify_all();
}

void MessageQueue::push(Incoming message) {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  std::uint64_t& latest = latestStep_[message.from];
  latest = std::max(latest, message.step);
  queue_.push_back(std::move(message));
  changed(lock);
}

std::optional<std::uint64_t> MessageQueue::latestStepFrom(PeerId sender) const {
  std::lock_guard lock(mutex_);
  const auto it = latestStep_.find(sender);
  if (it == latestStep_.end()) return std::nullopt;
  return it->second;
}

void MessageQueue::wake() {
  std::unique_lock lock(mutex_);
  changed(lock);
}

void MessageQueue::close() {
  std::deque<Incoming> dropped;
  std::unique_lock lock(mutex_);
  closed_ = true;
  dropped.swap(queue_);  // released after the lock: their buffers go back to other pools
  changed(lock);
}

bool MessageQueue::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::uint64_t MessageQueue::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

bool MessageQueue::waitChanged(std::uint64_t seen, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return closed_ || version_ != seen; });
}

std::optional<Incoming> MessageQueue::take(const std::function<bool(const Incoming&)>& match) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(queue_.begin(), queue_.end(), match);
  if (it == queue_.end()) return std::nullopt;
  Incoming message = std::move(*it);
  queue_.erase(it);
  return message;
}

std::vector<Incoming> MessageQueue::drain(std::optional<std::uint32_t> kind) {
  std::vector<Incoming> out;
  std::lock_guard lock(mutex_);
  std::deque<Incoming> kept;
  for (Incoming& message : queue_) {
    if (!kind || message.kind == *kind) {
      out.push_back(std::move(message));
    } else {
      kept.push_back(std::move(message));
    }
  }
  queue_.swap(kept);
  return out;
}

std::size_t MessageQueue::discardBefore(std::uint64_t step) {
  std::lock_guard lock(mutex_);
  const std::size_t before = queue_.size();
  std::erase_if(queue_, [step](const Incoming& m) { return m.step < step; });
  return before - queue_.size();
}

std::size_t MessageQueue::size() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

bool MessageQueue::wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  const auto queued = [&] {
    return std::any_of(queue_.begin(), queue_.end(),
                       [&](const Incoming& m) { return !kind || m.kind == *kind; });
  };
  changed_.wait_until(lock, deadline, [&] { return closed_ || queued(); });
  return !closed_ && queued();
}

GatherResult gather(MessageQueue& queue, std::span<const PeerId> from, std::uint64_t tag,
                    Clock::time_point deadline, const std::function<bool(PeerId)>& gone) {
  std::vector<std::optional<Incoming>> got(from.size());
  std::vector<bool> given(from.size(), false);  // gone, and nothing of theirs was queued
  const auto takeFrom = [&](std::size_t i) {
    got[i] = queue.take([&](const Incoming& m) { return m.from == from[i] && m.tag == tag; });
    return got[i].has_value();
  };
  for (;;) {
    const std::uint64_t seen = queue.version();
    bool done = true;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (got[i] || given[i] || takeFrom(i)) continue;
      // What it sent before it was gone is queued by now: one more look, then give up on it.
      if (gone(from[i])) {
        given[i] = !takeFrom(i);
        continue;
      }
      done = false;
    }
    if (done || queue.closed()) break;
    if (!queue.waitChanged(seen, deadline)) {
      for (std::size_t i = 0; i < from.size(); ++i)
        if (!got[i] && !given[i]) takeFrom(i);  // a last look at the deadline
      break;
    }
  }
  return GatherResult::of(from, got);
}

}  // namespace gossamer::engine::runtime
