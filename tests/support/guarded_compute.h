// A device-like Compute for tests on a machine without a GPU: the CPU backend's kernels over
// "device" memory that the host cannot touch. Every allocation is its own mapping, protected
// (PROT_NONE) except while this Compute itself works on it: inside its copies (copyToDevice,
// copyToHost, copyToHostAsync) and its kernels. So code that dereferences device memory on the
// host, where a real GPU would hand it a device pointer, faults here (SIGSEGV, which doctest
// reports with the test case) instead of passing by luck. It reports Device::kCuda, so callers
// take their device paths (staging's host copies, receive pools on the device).
//
// While any thread is inside one of its calls every guarded mapping is open, so a concurrent
// host access from another thread can go unnoticed then: the guard catches host accesses, it
// does not prove their absence. Memory is counted against a MemoryMeter as the backends' is.
//
// Several GuardedComputes may share one GuardedDevice, as a framework's allocator and a peer's
// Compute share one GPU: each sees the other's allocations as device memory and opens them.
// waitForStream and orderStreamAfter are recorded (orderings()), so a test can check when the
// runtime orders itself with a caller's stream.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "engine/base/enforce.h"
#include "kernels/compute.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::test {

// The "device": its live mappings, and how many calls hold them open.
struct GuardedDevice {
  std::mutex mutex;
  std::map<char*, std::size_t> regions;  // every live allocation: address, mapped bytes
  int opens = 0;                         // calls in progress (the mappings are open while > 0)
  ~GuardedDevice() {
    for (const auto& [address, bytes] : regions) ::munmap(address, bytes);
  }
};

// One ordering with a caller's stream, as the runtime asked for it.
struct StreamOrdering {
  enum Kind { kWaitForStream, kOrderStreamAfter } kind;
  void* stream;
};

class GuardedCompute final : public kernels::Compute {
 public:
  explicit GuardedCompute(std::shared_ptr<GuardedDevice> device = std::make_shared<GuardedDevice>())
      : inner_(kernels::cpu::makeCompute()), device_(std::move(device)) {}

  kernels::Device device() const override { return kernels::Device::kCuda; }
  std::string describe() const override {
    return "guarded device (CPU kernels; host access to device memory faults)";
  }
  void setMemoryMeter(kernels::MemoryMeter* meter) override { meter_ = meter; }
  kernels::MemoryMeter* memoryMeter() const override { return meter_; }

  void* allocateBytes(std::size_t bytes) override {
    const std::size_t mapped = roundUp(std::max<std::size_t>(bytes, 1));
    std::lock_guard lock(device_->mutex);
    void* address = ::mmap(nullptr, mapped, device_->opens > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    GOSSAMER_ENFORCE(address != MAP_FAILED, "guarded compute: cannot map {} bytes", mapped);
    device_->regions[static_cast<char*>(address)] = mapped;
    return address;
  }
  void freeBytes(void* pointer) override {
    if (pointer == nullptr) return;
    std::lock_guard lock(device_->mutex);
    const auto it = device_->regions.find(static_cast<char*>(pointer));
    GOSSAMER_ENFORCE(it != device_->regions.end(),
                     "guarded compute: freeing memory its device did not allocate");
    ::munmap(it->first, it->second);
    device_->regions.erase(it);
  }
  bool isDeviceMemory(const void* pointer) const override {
    std::lock_guard lock(device_->mutex);
    const char* p = static_cast<const char*>(pointer);
    auto it = device_->regions.upper_bound(const_cast<char*>(p));
    if (it == device_->regions.begin()) return false;
    --it;
    return p < it->first + it->second;
  }
  void copyToDevice(void* deviceDst, const void* hostSrc, std::size_t bytes) override {
    Open open(*this);
    if (bytes > 0) std::memcpy(deviceDst, hostSrc, bytes);
  }
  void copyToHost(void* hostDst, const void* deviceSrc, std::size_t bytes) override {
    Open open(*this);
    if (bytes > 0) std::memcpy(hostDst, deviceSrc, bytes);
  }
  // The bytes are copied at once; `done` runs at once too, or, with deferAsyncCopies(true), when
  // the test lands the pending copies (landInReverse: in an order no real stream would give).
  void copyToHostAsync(void* hostDst, const void* deviceSrc, std::size_t bytes,
                       std::function<void()> done) override {
    copyToHost(hostDst, deviceSrc, bytes);
    {
      std::lock_guard lock(mutex_);
      if (deferAsync_) {
        pending_.push_back(std::move(done));
        return;
      }
    }
    done();
  }
  void deferAsyncCopies(bool defer) {
    std::lock_guard lock(mutex_);
    deferAsync_ = defer;
  }
  // Runs the `done` of every pending asynchronous copy, the last first.
  void landInReverse() {
    std::vector<std::function<void()>> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(pending_);
    }
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)();
  }
  // Allocations alive now (on the device: of every Compute sharing it).
  std::size_t allocations() const {
    std::lock_guard lock(device_->mutex);
    return device_->regions.size();
  }
  void synchronize() override {}
  void waitForStream(void* stream) override {
    std::lock_guard lock(mutex_);
    orderings_.push_back({StreamOrdering::kWaitForStream, stream});
  }
  void orderStreamAfter(void* stream) override {
    std::lock_guard lock(mutex_);
    orderings_.push_back({StreamOrdering::kOrderStreamAfter, stream});
  }
  // The orderings asked for since the last call, oldest first.
  std::vector<StreamOrdering> takeOrderings() {
    std::lock_guard lock(mutex_);
    return std::exchange(orderings_, {});
  }

  // ---- the kernels: the CPU backend's, with the device memory open ----
  void copy(std::span<float> dst, std::span<const float> src) override {
    run([&] { inner_->copy(dst, src); });
  }
  void fill(std::span<float> x, float value) override {
    run([&] { inner_->fill(x, value); });
  }
  void scale(std::span<float> x, float a) override {
    run([&] { inner_->scale(x, a); });
  }
  void axpby(std::span<float> y, float a, std::span<const float> x, float b) override {
    run([&] { inner_->axpby(y, a, x, b); });
  }
  void weightedSum(std::span<float> out, std::span<const kernels::WeightedInput> inputs) override {
    run([&] { inner_->weightedSum(out, inputs); });
  }
  void elasticPull(std::span<float> x, std::span<float> center, float a, float b) override {
    run([&] { inner_->elasticPull(x, center, a, b); });
  }
  double dot(std::span<const float> x, std::span<const float> y) override {
    return run([&] { return inner_->dot(x, y); });
  }
  double norm2(std::span<const float> x) override {
    return run([&] { return inner_->norm2(x); });
  }
  void sgdStep(std::span<float> w, std::span<const float> g, const kernels::SgdHyper& h) override {
    run([&] { inner_->sgdStep(w, g, h); });
  }
  void momentumStep(std::span<float> w, std::span<const float> g, std::span<float> velocity,
                    const kernels::MomentumHyper& h) override {
    run([&] { inner_->momentumStep(w, g, velocity, h); });
  }
  void adamStep(std::span<float> w, std::span<const float> g, std::span<float> m,
                std::span<float> v, std::int64_t step, const kernels::AdamHyper& h) override {
    run([&] { inner_->adamStep(w, g, m, v, step, h); });
  }
  std::size_t encode(const kernels::Codec& codec, std::span<const float> input,
                     std::span<float> residual, std::span<std::byte> out,
                     std::uint64_t seed) override {
    return run([&] { return inner_->encode(codec, input, residual, out, seed); });
  }
  void decode(const kernels::Codec& codec, std::span<const std::byte> payload, std::span<float> out,
              kernels::DecodeMode mode) override {
    run([&] { inner_->decode(codec, payload, out, mode); });
  }
  void gemm(kernels::Transpose transA, kernels::Transpose transB, std::size_t m, std::size_t n,
            std::size_t k, float alpha, std::span<const float> a, std::span<const float> b,
            float beta, std::span<float> c) override {
    run([&] { inner_->gemm(transA, transB, m, n, k, alpha, a, b, beta, c); });
  }
  void biasAdd(std::span<float> y, std::span<const float> bias, std::size_t rows) override {
    run([&] { inner_->biasAdd(y, bias, rows); });
  }
  void biasGrad(std::span<float> dbias, std::span<const float> dy, std::size_t rows) override {
    run([&] { inner_->biasGrad(dbias, dy, rows); });
  }
  void relu(std::span<float> x) override {
    run([&] { inner_->relu(x); });
  }
  void reluBackward(std::span<float> dy, std::span<const float> y) override {
    run([&] { inner_->reluBackward(dy, y); });
  }
  double softmaxCrossEntropy(std::span<const float> logits, std::span<const std::int32_t> labels,
                             std::size_t classes, std::span<float> dlogits,
                             float gradScale) override {
    return run(
        [&] { return inner_->softmaxCrossEntropy(logits, labels, classes, dlogits, gradScale); });
  }
  void argmax(std::span<const float> x, std::size_t classes, std::span<std::int32_t> out) override {
    run([&] { inner_->argmax(x, classes, out); });
  }
  std::size_t countCorrect(std::span<const float> logits, std::span<const std::int32_t> labels,
                           std::size_t classes) override {
    return run([&] { return inner_->countCorrect(logits, labels, classes); });
  }
  void conv2d(const kernels::Conv2dShape& shape, std::span<const float> input,
              std::span<const float> weight, std::span<const float> bias, std::span<float> output,
              std::span<float> workspace) override {
    run([&] { inner_->conv2d(shape, input, weight, bias, output, workspace); });
  }
  void conv2dBackwardData(const kernels::Conv2dShape& shape, std::span<const float> dOutput,
                          std::span<const float> weight, std::span<float> dInput,
                          std::span<float> workspace) override {
    run([&] { inner_->conv2dBackwardData(shape, dOutput, weight, dInput, workspace); });
  }
  void conv2dBackwardWeights(const kernels::Conv2dShape& shape, std::span<const float> input,
                             std::span<const float> dOutput, std::span<float> dWeight,
                             std::span<float> dBias, std::span<float> workspace) override {
    run([&] { inner_->conv2dBackwardWeights(shape, input, dOutput, dWeight, dBias, workspace); });
  }
  void maxPool2d(const kernels::Pool2dShape& shape, std::span<const float> input,
                 std::span<float> output, std::span<std::int32_t> argmax) override {
    run([&] { inner_->maxPool2d(shape, input, output, argmax); });
  }
  void maxPool2dBackward(const kernels::Pool2dShape& shape, std::span<const float> dOutput,
                         std::span<const std::int32_t> argmax, std::span<float> dInput) override {
    run([&] { inner_->maxPool2dBackward(shape, dOutput, argmax, dInput); });
  }

 private:
  // Every guarded mapping open while it lives (counted: calls on several threads nest).
  class Open {
   public:
    explicit Open(GuardedCompute& c) : c_(c) { c_.protect(+1); }
    ~Open() { c_.protect(-1); }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    GuardedCompute& c_;
  };

  template <typename Kernel>
  std::invoke_result_t<Kernel&> run(Kernel&& kernel) {
    Open open(*this);
    return kernel();
  }
  void protect(int delta) {
    GuardedDevice& d = *device_;
    std::lock_guard lock(d.mutex);
    const bool was = d.opens > 0;
    d.opens += delta;
    if (was == (d.opens > 0)) return;
    for (const auto& [address, bytes] : d.regions)
      GOSSAMER_ENFORCE(
          ::mprotect(address, bytes, d.opens > 0 ? PROT_READ | PROT_WRITE : PROT_NONE) == 0,
          "guarded compute: mprotect failed");
  }
  static std::size_t roundUp(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }

  std::unique_ptr<kernels::Compute> inner_;
  kernels::MemoryMeter* meter_ = nullptr;
  std::shared_ptr<GuardedDevice> device_;
  mutable std::mutex mutex_;  // this Compute's own state, below
  bool deferAsync_ = false;
  std::vector<std::function<void()>> pending_;  // deferred asynchronous copies' `done`
  std::vector<StreamOrdering> orderings_;
};

}  // namespace gossamer::test
