#include "engine/runtime/staging.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::engine::runtime {
namespace {

// Payloads are laid out in a staging buffer at multiples of 4 bytes, so that each starts aligned
// for its float32/uint32 fields (an encoded payload may have any length; float32 ones lie back to
// back as before).
constexpr std::size_t kPayloadAlignment = 4;

std::size_t alignedSize(std::size_t bytes) {
  return (bytes + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
}

// The padding goes between payloads only: a single payload of a model's size fits a slot.
std::size_t bufferBytes(const OutgoingBytes& payloads) {
  std::size_t bytes = 0;
  for (const auto& payload : payloads.spans) bytes = alignedSize(bytes) + payload.size();
  return bytes;
}

// The payloads as they are (sent in place: their owner keeps them unchanged).
StagedBytes inPlace(const OutgoingBytes& payloads) {
  return StagedBytes{payloads.spans, payloads.owner};
}

// The payloads laid out one after another in `buffer`.
StagedBytes inBuffer(const OutgoingBytes& payloads, std::shared_ptr<HostBuffer> buffer) {
  StagedBytes staged;
  std::size_t offset = 0;
  for (const auto& payload : payloads.spans) {
    offset = alignedSize(offset);
    staged.spans.emplace_back(buffer->data() + offset, payload.size());
    offset += payload.size();
  }
  staged.owner = std::move(buffer);
  return staged;
}

}  // namespace

OutgoingBytes OutgoingBytes::of(const Message& message) {
  OutgoingBytes out{{}, message.owner};
  for (const auto& payload : message.payloads) out.spans.push_back(std::as_bytes(payload));
  return out;
}

// Device memory for uploads of received payloads: `slots` buffers of `slotFloats`, allocated up
// front; an upload that finds none free (or is larger) gets a buffer of its own, counted.
class Staging::DevicePool {
 public:
  DevicePool(kernels::Compute& compute, std::size_t slots, std::size_t slotFloats)
      : compute_(compute), state_(std::make_shared<State>()) {
    for (std::size_t i = 0; i < slots; ++i) {
      state_->all.push_back(compute.allocate<float>(slotFloats));
      state_->free.push_back(state_->all.back().data());
    }
    slotFloats_ = slotFloats;
  }

  DeviceView upload(std::span<const float> host) {
    float* slot = nullptr;
    if (host.size() <= slotFloats_) {
      std::lock_guard lock(state_->mutex);
      if (!state_->free.empty()) {
        slot = state_->free.back();
        state_->free.pop_back();
      }
    }
    if (slot == nullptr) {
      ++overflows_;
      auto own = std::make_shared<kernels::Buffer<float>>(compute_.allocate<float>(host.size()));
      compute_.upload(own->span(), host);
      const std::span<const float> view = own->span();
      return DeviceView(view, std::move(own));
    }
    const std::span<float> view(slot, host.size());
    compute_.upload(view, host);
    // The lease gives the slot back when the view goes; the state outlives late leases.
    auto lease = std::shared_ptr<void>(slot, [state = state_](float* p) {
      std::lock_guard lock(state->mutex);
      state->free.push_back(p);
    });
    return DeviceView(std::span<const float>(view), std::move(lease));
  }

  std::vector<std::span<std::byte>> slots() const {
    std::vector<std::span<std::byte>> out;
    for (const auto& buffer : state_->all)
      out.emplace_back(reinterpret_cast<std::byte*>(const_cast<float*>(buffer.data())),
                       buffer.size() * sizeof(float));
    return out;
  }

  std::size_t overflows() const { return overflows_; }

 private:
  struct State {
    std::mutex mutex;
    std::vector<kernels::Buffer<float>> all;
    std::vector<float*> free;
  };
  kernels::Compute& compute_;
  std::shared_ptr<State> state_;
  std::size_t slotFloats_ = 0;
  std::atomic<std::size_t> overflows_{0};
};

// A compute-thread message on its way to the transport: released, in staging order, once its
// copies have landed.
struct Staging::InFlight {
  std::function<void(StagedBytes)> ready;
  StagedBytes bytes;
  std::atomic<std::size_t> copiesLeft{0};
  bool landed = false;  // guarded by orderMutex_
};

Staging::Staging(kernels::Compute& compute, std::size_t slotBytes, StagingSizes sizes)
    : compute_(compute) {
  const std::size_t bytes = std::max<std::size_t>(slotBytes, sizeof(float));
  auto allocate = [c = &compute](std::size_t n) { return c->allocateHost(n); };
  auto free = [c = &compute](void* p) { c->freeHost(p); };
  // Counted with the Compute's buffers (the peer's memory meter, if it has one).
  kernels::MemoryMeter* meter = compute.memoryMeter();
  const auto mode = sizes.preallocate || compute.device() != kernels::Device::kCpu
                        ? HostBufferPool::Slots::kPreallocated
                        : HostBufferPool::Slots::kOnDemand;
  const auto pool = [&](std::size_t slots) {
    return HostBufferPool::make(std::max<std::size_t>(slots, 1), bytes, allocate, free, meter,
                                mode);
  };
  send_ = pool(sizes.sendSlots);
  reply_ = pool(sizes.replySlots);
  receive_ = pool(sizes.receiveSlots);
  if (compute.device() != kernels::Device::kCpu)
    device_ = std::make_unique<DevicePool>(compute, std::max<std::size_t>(sizes.receiveSlots, 1),
                                           bytes / sizeof(float));
}

Staging::~Staging() = default;

bool Staging::stageFromCompute(const OutgoingBytes& payloads, Clock::duration wait,
                               std::function<void(StagedBytes)> ready) {
  auto flight = std::make_shared<InFlight>();
  flight->ready = std::move(ready);
  const std::size_t bytes = bufferBytes(payloads);
  const bool hostMemory = compute_.device() == kernels::Device::kCpu;
  std::shared_ptr<HostBuffer> buffer;
  if (bytes > 0 && !(payloads.owner && hostMemory)) {
    buffer =
        wait > Clock::duration::zero() ? send_->acquire(bytes, wait) : send_->tryAcquire(bytes);
    if (!buffer) return false;
  }
  flight->bytes = buffer ? inBuffer(payloads, buffer) : inPlace(payloads);
  flight->copiesLeft = buffer ? payloads.spans.size() : 0;
  {
    std::lock_guard lock(orderMutex_);
    inFlight_.push_back(flight);
  }
  if (!buffer) {
    release(flight);
    return true;
  }
  // The Compute copies every payload out, overlapped with the compute that follows; the last
  // copy to land releases the message (and any landed ones behind it).
  std::size_t offset = 0;
  for (const auto& payload : payloads.spans) {
    offset = alignedSize(offset);
    compute_.copyToHostAsync(buffer->data() + offset, payload.data(), payload.size(),
                             [this, flight] {
                               if (--flight->copiesLeft == 0) release(flight);
                             });
    offset += payload.size();
  }
  return true;
}

void Staging::release(const std::shared_ptr<InFlight>& done) {
  std::lock_guard lock(orderMutex_);
  done->landed = true;
  while (!inFlight_.empty() && inFlight_.front()->landed) {
    std::shared_ptr<InFlight> next = std::move(inFlight_.front());
    inFlight_.pop_front();
    next->ready(std::move(next->bytes));
  }
}

std::optional<StagedBytes> Staging::stageFromHost(const OutgoingBytes& payloads, bool reply,
                                                  Clock::duration wait) {
  const std::size_t bytes = bufferBytes(payloads);
  if (bytes == 0 || payloads.owner) return inPlace(payloads);
  HostBufferPool& pool = reply ? *reply_ : *send_;
  std::shared_ptr<HostBuffer> buffer =
      reply || wait <= Clock::duration::zero() ? pool.tryAcquire(bytes) : pool.acquire(bytes, wait);
  if (!buffer) return std::nullopt;
  std::size_t offset = 0;
  for (const auto& payload : payloads.spans) {
    offset = alignedSize(offset);
    if (!payload.empty()) std::memcpy(buffer->data() + offset, payload.data(), payload.size());
    offset += payload.size();
  }
  return inBuffer(payloads, std::move(buffer));
}

net::Payload Staging::receiveSlot(std::size_t bytes) {
  std::shared_ptr<HostBuffer> buffer = receive_->tryAcquire(bytes);
  if (!buffer) return {};
  const std::span<std::byte> slot = buffer->bytes();
  return net::Payload(slot, std::move(buffer));
}

DeviceView Staging::upload(std::span<const float> host) {
  if (!device_) return DeviceView(host, nullptr);  // the Compute reads host memory
  return device_->upload(host);
}

void Staging::registerWith(net::Transport& transport) {
  for (const auto* pool : {&send_, &reply_, &receive_})
    for (std::span<std::byte> slot : (*pool)->slots()) transport.registerMemory(slot);
  if (device_)
    for (std::span<std::byte> slot : device_->slots()) transport.registerMemory(slot);
}

void Staging::close() {
  send_->close();
  reply_->close();
}

std::size_t Staging::deviceOverflows() const { return device_ ? device_->overflows() : 0; }

}  // namespace gossamer::engine::runtime
