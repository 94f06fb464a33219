#include "engine/runtime/host_buffers.h"

#include <algorithm>
#include <bit>

#include "engine/base/enforce.h"

namespace gossamer::engine::runtime {

std::shared_ptr<HostBufferPool> HostBufferPool::make(std::size_t slots, std::size_t slotBytes,
                                                     Allocate allocate, Free free,
                                                     kernels::MemoryMeter* meter, Slots mode) {
  return std::make_shared<HostBufferPool>(slots, slotBytes, std::move(allocate), std::move(free),
                                          meter, mode);
}

std::size_t HostBufferPool::sizeClass(std::size_t bytes, std::size_t slotBytes) {
  constexpr std::size_t kMinimum = 4096;
  if (bytes <= kMinimum) return std::min(kMinimum, slotBytes);
  const std::size_t step = std::size_t{1} << (std::bit_width(bytes) - 1 - 3);
  return std::min((bytes + step - 1) / step * step, slotBytes);
}

HostBufferPool::HostBufferPool(std::size_t slots, std::size_t slotBytes, Allocate allocate,
                               Free free, kernels::MemoryMeter* meter, Slots mode)
    : maxSlots_(slots),
      slotBytes_(slotBytes),
      allocate_(std::move(allocate)),
      free_(std::move(free)),
      meter_(meter) {
  GOSSAMER_ENFORCE(slots > 0 && slotBytes > 0, "a host buffer pool needs slots ({}) and bytes ({})",
                   slots, slotBytes);
  if (mode == Slots::kOnDemand) return;
  for (std::size_t i = 0; i < slots; ++i) free_slots_.push_back(allocateSlot(slotBytes));
}

HostBufferPool::~HostBufferPool() {
  for (const Slot& slot : all_) {
    free_(slot.data);
    if (meter_ != nullptr) meter_->freed(slot.capacity);
  }
}

HostBufferPool::Slot HostBufferPool::allocateSlot(std::size_t capacity) {
  const Slot slot{static_cast<std::byte*>(allocate_(capacity)), capacity};
  all_.push_back(slot);
  if (meter_ != nullptr) meter_->allocated(capacity);
  return slot;
}

void HostBufferPool::freeSlot(Slot slot) {
  std::erase_if(all_, [&](const Slot& s) { return s.data == slot.data; });
  free_(slot.data);
  if (meter_ != nullptr) meter_->freed(slot.capacity);
}

std::optional<HostBufferPool::Slot> HostBufferPool::slotFor(std::size_t bytes) {
  // The smallest free slot that fits.
  auto best = free_slots_.end();
  for (auto it = free_slots_.begin(); it != free_slots_.end(); ++it)
    if (it->capacity >= bytes && (best == free_slots_.end() || it->capacity < best->capacity))
      best = it;
  if (best != free_slots_.end()) {
    const Slot slot = *best;
    free_slots_.erase(best);
    return slot;
  }
  if (all_.size() == maxSlots_) {
    if (free_slots_.empty()) return std::nullopt;
    // Every slot exists and the free ones are too small: the largest of them makes room.
    auto largest =
        std::max_element(free_slots_.begin(), free_slots_.end(),
                         [](const Slot& a, const Slot& b) { return a.capacity < b.capacity; });
    const Slot evicted = *largest;
    free_slots_.erase(largest);
    freeSlot(evicted);
  }
  return allocateSlot(sizeClass(bytes, slotBytes_));
}

std::shared_ptr<HostBuffer> HostBufferPool::take(std::size_t bytes) {
  Slot slot;
  bool oversize = false;
  if (bytes <= slotBytes_) {
    const std::optional<Slot> found = slotFor(bytes);
    if (!found) return nullptr;
    slot = *found;
  } else {
    if (oversizeOut_) return nullptr;
    slot = Slot{static_cast<std::byte*>(allocate_(bytes)), bytes};
    if (meter_ != nullptr) meter_->allocated(bytes);
    oversizeOut_ = true;
    oversize = true;
  }
  // The buffer keeps the pool alive, so it can be released after the pool's owner let go.
  std::shared_ptr<HostBufferPool> self = shared_from_this();
  return std::shared_ptr<HostBuffer>(new HostBuffer(slot.data, bytes, slot.capacity),
                                     [self, oversize](HostBuffer* b) {
                                       self->give(Slot{b->data(), b->capacity()}, oversize);
                                       delete b;
                                     });
}

void HostBufferPool::give(Slot slot, bool oversize) {
  {
    std::lock_guard lock(mutex_);
    if (oversize) {
      free_(slot.data);
      if (meter_ != nullptr) meter_->freed(slot.capacity);
      oversizeOut_ = false;
    } else {
      free_slots_.push_back(slot);
    }
  }
  freed_.notify_all();
}

std::shared_ptr<HostBuffer> HostBufferPool::acquire(std::size_t bytes,
                                                    std::chrono::steady_clock::duration timeout) {
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (closed_) return nullptr;
    if (auto buffer = take(bytes)) return buffer;
    if (freed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return closed_ ? nullptr : take(bytes);
    }
  }
}

std::shared_ptr<HostBuffer> HostBufferPool::tryAcquire(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  return closed_ ? nullptr : take(bytes);
}

void HostBufferPool::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  freed_.notify_all();
}

std::vector<std::span<std::byte>> HostBufferPool::slots() const {
  std::lock_guard lock(mutex_);
  std::vector<std::span<std::byte>> out;
  for (const Slot& slot : all_) out.emplace_back(slot.data, slot.capacity);
  return out;
}

std::size_t HostBufferPool::freeSlots() const {
  std::lock_guard lock(mutex_);
  return free_slots_.size() + (maxSlots_ - all_.size());
}

}  // namespace gossamer::engine::runtime
