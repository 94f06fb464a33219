// The built-in components of gossamer, and the one place that knows which optional backends
// this build has.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/registry.h"
#include "kernels/compute.h"

namespace asio {
class io_context;
}

namespace gossamer::net {
class Transport;
struct Limits;
}  // namespace gossamer::net

namespace gossamer::engine {

// A registry holding every built-in model, dataset and topology. The algorithms library sits
// above the engine (DESIGN.md arrows), so its built-ins are added by
// algorithms::addBuiltinAlgorithms (algorithms/builtin.h); binaries call both.
Registry makeBuiltinRegistry();

// The Compute for `device`. When CUDA is asked for but this build has no CUDA backend, or no
// driver/device is usable, returns the CPU backend, logs why, and sets *fallbackReason (when
// given) to the reason; otherwise clears it.
std::unique_ptr<kernels::Compute> makeCompute(kernels::Device device,
                                              std::string* fallbackReason = nullptr);

// "cpu" or "cuda"; throws gossamer::Error otherwise.
kernels::Device parseDevice(const std::string& name);

// ---- the RDMA transport (net/ibverbs/, built when libibverbs-dev is present) ----

// Its settings, as `--rdma-*` flags set them.
struct RdmaOptions {
  std::string device;     // --rdma-device; empty: the first device with an active port
  int port = 0;           // --rdma-port; 0: the first active port
  int gidIndex = -1;      // --rdma-gid-index; -1: LID on InfiniBand, first GID in use on RoCE
  bool busyPoll = false;  // --rdma-busy-poll: poll completions on the io thread (a busy core)
  // For a peer whose flat buffers live in CUDA memory: which pointers are device memory, and
  // the Compute that copies between it and the host. Empty: host memory only.
  std::function<bool(const void*)> isDeviceMemory;
  kernels::Compute* compute = nullptr;
};

// True when this build has the RDMA transport and `options` select a usable device; otherwise
// false with the reason (not built, no RDMA device, device or port missing) in *reason.
bool rdmaViable(std::string* reason, const RdmaOptions& options = {});

// The RDMA transport on `io`. Throws gossamer::Error naming what is missing (not built, no RDMA
// device, ...), so a peer configured for RDMA fails at start, never later.
std::unique_ptr<net::Transport> makeRdmaTransport(asio::io_context& io, const RdmaOptions& options,
                                                  const net::Limits& limits);

}  // namespace gossamer::engine
