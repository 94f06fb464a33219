// Buffers of the Compute's memory that messages are sent from in place (Message::owner): the
// transport holds a buffer until it is done with it, so a buffer is written again only once
// nothing else holds it. Reusing them spares a large allocation, and its page faults, per send.
// Compute thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/compute.h"

namespace gossamer::algorithms {

class SpareBuffers {
 public:
  // Keeps at most `keep` spares.
  explicit SpareBuffers(std::size_t keep) : keep_(keep) {}

  // A buffer of `size` floats: a spare that nothing else holds any more, or a new one.
  std::shared_ptr<kernels::Buffer<float>> take(kernels::Compute& compute, std::size_t size) {
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      // A copy increments the count with acquire-release ordering: it orders this thread after
      // the last holder's release (the transport's decrement, on the io thread), so the
      // transport's reads of the buffer happen before the caller writes it. use_count() alone is
      // a relaxed load and orders nothing (ThreadSanitizer reports the race).
      const std::shared_ptr<kernels::Buffer<float>> probe = *it;
      if (probe.use_count() != 2 || probe->size() != size) continue;
      std::shared_ptr<kernels::Buffer<float>> found = std::move(*it);
      spares_.erase(it);
      return found;
    }
    return std::make_shared<kernels::Buffer<float>>(compute.allocate<float>(size));
  }

  // Keeps `buffer` for a later take() (dropped when `keep` spares are kept already).
  void give(std::shared_ptr<kernels::Buffer<float>> buffer) {
    if (buffer && spares_.size() < keep_) spares_.push_back(std::move(buffer));
  }

  void clear() { spares_.clear(); }

 private:
  std::size_t keep_;
  std::vector<std::shared_ptr<kernels::Buffer<float>>> spares_;
};

}  // namespace gossamer::algorithms
