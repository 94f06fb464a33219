// The opened RDMA device of one transport: its verbs context, port, addressing and protection
// domain, and the memory registered on it (Transport::registerMemory). Shared by the transport
// and its links (a link may outlive its transport), used on the transport's io thread only.
// Internal to the ibverbs backend.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/ibverbs/ibverbs_transport.h"
#include "net/ibverbs/verbs.h"

namespace gossamer::net::ibverbs {

// Which device, port and GID the options select.
struct DeviceChoice {
  std::string device;
  int port = 0;
  PortAttributes attributes;
  bool useGid = false;
  int gidIndex = 0;
  Gid gid{};
};

// Opens the device and port that `options` select (see Options) and leaves the context open in
// *context, or returns false with the reason (naming the missing device or port) in *reason.
bool chooseDevice(Verbs& verbs, const Options& options, DeviceChoice* choice,
                  ContextHandle* context, std::string* reason);

class Device final {
 public:
  // Opens the device; throws gossamer::Error with the reason when it cannot.
  Device(std::shared_ptr<Verbs> verbs, const Options& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Verbs& verbs() const { return *verbs_; }
  ContextHandle context() const { return context_; }
  PdHandle pd() const { return pd_; }
  const DeviceChoice& choice() const { return choice_; }
  const Options& options() const { return options_; }

  // A region registered with registerMemory.
  struct Region {
    const std::byte* begin = nullptr;
    std::size_t bytes = 0;
    MemoryRegion mr;
    bool device = false;  // device (CUDA) memory registered directly (GPUDirect RDMA)
  };

  // Registers `memory` for sending from (local read access only: read-only memory works too, and
  // no remote can touch it), once; device memory directly only with GPUDirect RDMA, otherwise it
  // is staged when sent (the choice is logged).
  void registerMemory(std::span<std::byte> memory);
  // The registered region holding all of [data, data + bytes), or null.
  const Region* findRegion(const void* data, std::size_t bytes) const;
  bool isDeviceMemory(const void* data) const {
    return options_.deviceMemory.isDevice && options_.deviceMemory.isDevice(data);
  }

  // "mlx5_0 port 1 (InfiniBand, LID 3)".
  std::string describe() const;

 private:
  const std::shared_ptr<Verbs> verbs_;
  const Options options_;
  DeviceChoice choice_;
  ContextHandle context_;
  PdHandle pd_;
  std::vector<Region> regions_;
  std::vector<std::pair<const std::byte*, std::size_t>> staged_;  // device memory not registered
};

}  // namespace gossamer::net::ibverbs
