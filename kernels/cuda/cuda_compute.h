// The CUDA backend of kernels::Compute: custom kernels for the element-wise, optimizer and NN
// ops, cuBLAS for GEMM. Each Compute owns one CUDA stream and one cuBLAS handle bound to it, so
// several peers can share one GPU, each on its own stream.
#pragma once

#include <memory>
#include <string>

#include "kernels/compute.h"

namespace gossamer::kernels::cuda {

struct Options {
  int deviceIndex = 0;
};

// True when a CUDA driver and at least one device are usable; otherwise false with the reason
// (the CUDA runtime's error string, or "no CUDA device") in *reason.
bool isViable(std::string* reason);

// Throws gossamer::Error when the device cannot be used (call isViable first to fall back).
std::unique_ptr<Compute> makeCompute(const Options& options = {});

}  // namespace gossamer::kernels::cuda
