#include "engine/runtime/host_buffers.h"

#include "engine/base/enforce.h"

namespace gossamer::engine::runtime {

std::shared_ptr<HostBufferPool> HostBufferPool::make(std::size_t slots, std::size_t slotBytes,
                                                     Allocate allocate, Free free,
                                                     kernels::MemoryMeter* meter) {
  return std::make_shared<HostBufferPool>(slots, slotBytes, std::move(allocate), std::move(free),
                                          meter);
}

HostBufferPool::HostBufferPool(std::size_t slots, std::size_t slotBytes, Allocate allocate,
                               Free free, kernels::MemoryMeter* meter)
    : slotBytes_(slotBytes), allocate_(std::move(allocate)), free_(std::move(free)), meter_(meter) {
  GOSSAMER_ENFORCE(slots > 0 && slotBytes > 0, "a host buffer pool needs slots ({}) and bytes ({})",
                   slots, slotBytes);
  for (std::size_t i = 0; i < slots; ++i) {
    all_.push_back(static_cast<std::byte*>(allocate_(slotBytes)));
    free_slots_.push_back(all_.back());
    if (meter_ != nullptr) meter_->allocated(slotBytes);
  }
}

HostBufferPool::~HostBufferPool() {
  for (std::byte* data : all_) free_(data);
  if (meter_ != nullptr) meter_->freed(all_.size() * slotBytes_);
}

std::shared_ptr<HostBuffer> HostBufferPool::take(std::size_t bytes) {
  std::byte* data = nullptr;
  bool oversize = false;
  if (bytes <= slotBytes_) {
    if (free_slots_.empty()) return nullptr;
    data = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (oversizeOut_) return nullptr;
    data = static_cast<std::byte*>(allocate_(bytes));
    if (meter_ != nullptr) meter_->allocated(bytes);
    oversizeOut_ = true;
    oversize = true;
  }
  // The buffer keeps the pool alive, so it can be released after the pool's owner let go.
  std::shared_ptr<HostBufferPool> self = shared_from_this();
  return std::shared_ptr<HostBuffer>(new HostBuffer(data, bytes), [self, oversize](HostBuffer* b) {
    self->give(b->data(), b->size(), oversize);
    delete b;
  });
}

void HostBufferPool::give(std::byte* data, std::size_t bytes, bool oversize) {
  {
    std::lock_guard lock(mutex_);
    if (oversize) {
      free_(data);
      if (meter_ != nullptr) meter_->freed(bytes);
      oversizeOut_ = false;
    } else {
      free_slots_.push_back(data);
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
  for (std::byte* slot : all_) out.emplace_back(slot, slotBytes_);
  return out;
}

std::size_t HostBufferPool::freeSlots() const {
  std::lock_guard lock(mutex_);
  return free_slots_.size();
}

}  // namespace gossamer::engine::runtime
