// The built-in components of gossamer, and the one place that knows which optional backends
// this build has.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/registry.h"
#include "kernels/compute.h"
#include "net/transport.h"

namespace gossamer::engine {

// A registry holding every built-in model, dataset, topology and transport. The algorithms library sits
// above the engine (the dependency arrows of CMakeLists.txt), so its built-ins are added by
// algorithms::addBuiltinAlgorithms (algorithms/builtin.h); binaries call both.
Registry makeBuiltinRegistry();

// The compute device a user asks for: auto (CUDA when this build has it and a GPU is usable,
// else the CPU, with the reason logged), cpu, or cuda (a peer fails at start without a GPU).
enum class DeviceChoice { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; throws gossamer::Error otherwise.
DeviceChoice parseDevice(const std::string& name);

// True when this build has the CUDA backend and a GPU is usable; otherwise false with the reason
// (no backend in this build, no driver, no device) in *reason.
bool cudaUsable(std::string* reason);

// The Compute for `choice`. kCuda without a usable GPU throws gossamer::Error giving the reason.
// kAuto without one returns the CPU backend, logs the reason at info, and sets *fallbackReason
// (when given) to it; otherwise *fallbackReason is cleared.
std::unique_ptr<kernels::Compute> makeCompute(DeviceChoice choice,
                                              std::string* fallbackReason = nullptr);

// The Compute for memory a caller owns at `place`: the CPU backend for host memory, the CUDA
// backend on device place.index otherwise (throws gossamer::Error, giving the reason, without a
// usable GPU or CUDA backend).
std::unique_ptr<kernels::Compute> makeCompute(const kernels::MemoryPlace& place);

// What a transport sees of memory on `compute`: which pointers are device memory and the copies
// between it and the host. Empty on the CPU backend (all memory is host memory).
net::DeviceMemory deviceMemoryOf(kernels::Compute& compute);

}  // namespace gossamer::engine
