#include "engine/runtime/message_queue.h"

#include <algorithm>

namespace gossamer::engine::runtime {

void MessageQueue::push(Incoming message) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    queue_.push_back(std::move(message));
  }
  changed_.notify_all();
}

void MessageQueue::wake() {
  { std::lock_guard lock(mutex_); }
  changed_.notify_all();
}

void MessageQueue::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    queue_.clear();
  }
  changed_.notify_all();
}

bool MessageQueue::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
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

bool MessageQueue::wait(std::optional<std::uint32_t> kind,
                        std::chrono::steady_clock::time_point deadline) {
  return waitUntil(deadline, [&](std::deque<Incoming>& queue) {
    return std::any_of(queue.begin(), queue.end(),
                       [&](const Incoming& m) { return !kind || m.kind == *kind; });
  });
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

}  // namespace gossamer::engine::runtime
