// Partitions (shaped_transport.h): the peer pairs that cannot talk, and the loss rates between
// peers, shared by the shaped transports of a test.
#include <algorithm>
#include <mutex>
#include <utility>

#include "engine/base/enforce.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::net::shaped {
namespace {

std::pair<std::size_t, std::size_t> ordered(std::size_t a, std::size_t b) {
  return {std::min(a, b), std::max(a, b)};
}

}  // namespace

void Partitions::cut(std::size_t a, std::size_t b) {
  std::lock_guard lock(mutex_);
  cut_.insert(ordered(a, b));
}

void Partitions::heal(std::size_t a, std::size_t b) {
  std::lock_guard lock(mutex_);
  cut_.erase(ordered(a, b));
}

void Partitions::cut(std::span<const std::size_t> groupA, std::span<const std::size_t> groupB) {
  std::lock_guard lock(mutex_);
  for (std::size_t a : groupA) {
    for (std::size_t b : groupB) {
      if (a != b) cut_.insert(ordered(a, b));
    }
  }
}

void Partitions::heal(std::span<const std::size_t> groupA, std::span<const std::size_t> groupB) {
  std::lock_guard lock(mutex_);
  for (std::size_t a : groupA) {
    for (std::size_t b : groupB) cut_.erase(ordered(a, b));
  }
}

void Partitions::healAll() {
  std::lock_guard lock(mutex_);
  cut_.clear();
}

bool Partitions::blocked(std::size_t a, std::size_t b) const {
  std::lock_guard lock(mutex_);
  return !cut_.empty() && cut_.contains(ordered(a, b));
}

void Partitions::setLoss(std::size_t from, std::size_t to, double rate) {
  GOSSAMER_ENFORCE(rate >= 0 && rate <= 1, "a loss rate must be in [0, 1], not {}", rate);
  std::lock_guard lock(mutex_);
  if (rate == 0)
    loss_.erase({from, to});
  else
    loss_[{from, to}] = rate;
}

void Partitions::clearLoss() {
  std::lock_guard lock(mutex_);
  loss_.clear();
}

double Partitions::loss(std::size_t from, std::size_t to) const {
  std::lock_guard lock(mutex_);
  if (loss_.empty()) return 0;
  const auto it = loss_.find({from, to});
  return it == loss_.end() ? 0 : it->second;
}

std::size_t Partitions::size() const {
  std::lock_guard lock(mutex_);
  return cut_.size();
}

}  // namespace gossamer::net::shaped
