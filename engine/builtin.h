// The built-in components of gossamer, and the one place that knows which optional backends
// this build has.
#pragma once

#include <memory>
#include <string>

#include "engine/registry.h"
#include "kernels/compute.h"

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

}  // namespace gossamer::engine
