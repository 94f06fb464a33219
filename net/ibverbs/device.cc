#include "net/ibverbs/device.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::net::ibverbs {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

bool isZero(const Gid& gid) {
  return std::all_of(gid.begin(), gid.end(), [](std::uint8_t b) { return b == 0; });
}

// Fills the port and GID part of *choice for `port` of the open `context`; false with the
// reason when the port is not usable.
bool choosePort(Verbs& verbs, ContextHandle context, const Options& options, int port,
                DeviceChoice* choice, std::string* reason) {
  PortAttributes attributes;
  if (auto ec = verbs.queryPort(context, port, &attributes)) {
    *reason = fmt::format("cannot query port {} of RDMA device '{}': {}", port, choice->device,
                          ec.message());
    return false;
  }
  if (!attributes.active) {
    *reason = fmt::format("port {} of RDMA device '{}' is not active", port, choice->device);
    return false;
  }
  choice->port = port;
  choice->attributes = attributes;
  choice->useGid = false;
  if (options.gidIndex >= 0) {
    if (auto ec = verbs.queryGid(context, port, options.gidIndex, &choice->gid)) {
      *reason = fmt::format("GID index {} of port {} of RDMA device '{}' is not readable: {}",
                            options.gidIndex, port, choice->device, ec.message());
      return false;
    }
    choice->useGid = true;
    choice->gidIndex = options.gidIndex;
  } else if (attributes.linkLayer == LinkLayer::kEthernet) {
    // RoCE has no LIDs: take the first GID in use.
    for (int index = 0; index < attributes.gidTableLength && !choice->useGid; ++index) {
      Gid gid{};
      if (!verbs.queryGid(context, port, index, &gid) && !isZero(gid)) {
        choice->useGid = true;
        choice->gidIndex = index;
        choice->gid = gid;
      }
    }
    if (!choice->useGid) {
      *reason =
          fmt::format("port {} of RoCE device '{}' has no GID configured", port, choice->device);
      return false;
    }
  }
  return true;
}

}  // namespace

bool chooseDevice(Verbs& verbs, const Options& options, DeviceChoice* choice,
                  ContextHandle* context, std::string* reason) {
  std::vector<std::string> names;
  if (auto ec = verbs.deviceNames(&names)) {
    *reason = fmt::format("cannot list RDMA devices: {}", ec.message());
    return false;
  }
  if (names.empty()) {
    *reason =
        "no RDMA device found (the verbs device list is empty: no InfiniBand/RoCE adapter, or its "
        "driver is not loaded)";
    return false;
  }
  if (!options.device.empty() &&
      std::find(names.begin(), names.end(), options.device) == names.end()) {
    *reason =
        fmt::format("RDMA device '{}' not found (present: {})", options.device, joined(names));
    return false;
  }
  std::vector<std::string> reasons;
  for (const std::string& name : names) {
    if (!options.device.empty() && name != options.device) continue;
    ContextHandle opened;
    if (auto ec = verbs.open(name, &opened)) {
      reasons.push_back(fmt::format("cannot open RDMA device '{}': {}", name, ec.message()));
      continue;
    }
    choice->device = name;
    int ports = 0;
    if (auto ec = verbs.portCount(opened, &ports)) {
      reasons.push_back(fmt::format("cannot query RDMA device '{}': {}", name, ec.message()));
      verbs.close(opened);
      continue;
    }
    if (options.port > ports) {
      reasons.push_back(
          fmt::format("RDMA device '{}' has no port {} (it has {})", name, options.port, ports));
      verbs.close(opened);
      continue;
    }
    std::string portReason;
    for (int port = options.port > 0 ? options.port : 1;
         port <= (options.port > 0 ? options.port : ports); ++port) {
      if (choosePort(verbs, opened, options, port, choice, &portReason)) {
        *context = opened;
        return true;
      }
      reasons.push_back(portReason);
    }
    if (ports == 0) reasons.push_back(fmt::format("RDMA device '{}' has no ports", name));
    verbs.close(opened);
  }
  *reason = reasons.size() == 1 ? reasons.front()
                                : fmt::format("no usable RDMA port: {}", fmt::join(reasons, "; "));
  return false;
}

Device::Device(std::shared_ptr<Verbs> verbs, const Options& options)
    : verbs_(std::move(verbs)), options_(options) {
  std::string reason;
  if (!chooseDevice(*verbs_, options_, &choice_, &context_, &reason))
    GOSSAMER_THROW("the ibverbs transport cannot start: {}", reason);
  if (auto ec = verbs_->allocPd(context_, &pd_)) {
    verbs_->close(context_);
    GOSSAMER_THROW("the ibverbs transport cannot start: protection domain on '{}': {}",
                   choice_.device, ec.message());
  }
  log::get("net")->info("ibverbs: using {}", describe());
}

Device::~Device() {
  for (const Region& region : regions_) verbs_->deregisterMemory(region.mr.handle);
  verbs_->deallocPd(pd_);
  verbs_->close(context_);
}

void Device::registerMemory(std::span<std::byte> memory) {
  if (memory.empty() || findRegion(memory.data(), memory.size()) != nullptr) return;
  const bool device = isDeviceMemory(memory.data());
  if (device) {
    for (const auto& [begin, bytes] : staged_)
      if (begin == memory.data() && bytes == memory.size()) return;
    std::string why;
    if (options_.gpuDirect == GpuDirect::kOff) {
      why = "GPUDirect RDMA is off";
    } else if (!verbs_->peerMemoryAvailable()) {
      why = "no GPUDirect RDMA (the nvidia_peermem module is not loaded)";
    } else {
      MemoryRegion mr;
      if (auto ec = verbs_->registerMemory(pd_, memory.data(), memory.size(), 0, &mr)) {
        why = fmt::format("registering it failed: {}", ec.message());
      } else {
        regions_.push_back(Region{memory.data(), memory.size(), mr, true});
        log::get("net")->info(
            "ibverbs: {} bytes of device memory registered directly (GPUDirect RDMA)",
            memory.size());
        return;
      }
    }
    staged_.emplace_back(memory.data(), memory.size());
    log::get("net")->info(
        "ibverbs: {} bytes of device memory will be staged through registered host memory: {}",
        memory.size(), why);
    return;
  }
  MemoryRegion mr;
  if (auto ec = verbs_->registerMemory(pd_, memory.data(), memory.size(), 0, &mr)) {
    log::get("net")->warn("ibverbs: registering {} bytes failed ({}); sends from them are staged",
                          memory.size(), ec.message());
    return;
  }
  regions_.push_back(Region{memory.data(), memory.size(), mr, false});
  log::get("net")->debug("ibverbs: registered {} bytes", memory.size());
}

const Device::Region* Device::findRegion(const void* data, std::size_t bytes) const {
  const auto* begin = static_cast<const std::byte*>(data);
  for (const Region& region : regions_) {
    if (begin >= region.begin &&
        begin - region.begin <= static_cast<std::ptrdiff_t>(region.bytes) &&
        bytes <= region.bytes - static_cast<std::size_t>(begin - region.begin))
      return &region;
  }
  return nullptr;
}

std::string Device::describe() const {
  const PortAttributes& port = choice_.attributes;
  return fmt::format("{} port {} ({}, LID {}, MTU {}{})", choice_.device, choice_.port,
                     port.linkLayer == LinkLayer::kEthernet ? "RoCE" : "InfiniBand", port.lid,
                     port.activeMtu,
                     choice_.useGid ? fmt::format(", GID index {}", choice_.gidIndex) : "");
}

}  // namespace gossamer::net::ibverbs
