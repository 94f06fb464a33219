#include "kernels/compute.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace gossamer::kernels {

void* Compute::allocateHost(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* pointer = std::aligned_alloc(64, rounded);
  GOSSAMER_ENFORCE(pointer != nullptr, "out of host memory allocating {} bytes", bytes);
  return pointer;
}

void Compute::freeHost(void* pointer) { std::free(pointer); }

void Compute::copyToHostAsync(void* hostDst, const void* deviceSrc, std::size_t bytes,
                              std::function<void()> done) {
  copyToHost(hostDst, deviceSrc, bytes);
  done();
}

std::string MemoryPlace::describe() const {
  return device == Device::kCpu ? std::string("cpu")
                                : std::string(deviceName(device)) + ":" + std::to_string(index);
}

const char* deviceName(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace gossamer::kernels
