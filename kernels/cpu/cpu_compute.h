// The CPU backend of kernels::Compute: plain loops the compiler vectorises, OpenBLAS for GEMM.
// It is the reference every other backend is tested against.
#pragma once

#include <memory>

#include "kernels/compute.h"

namespace gossamer::kernels::cpu {

struct Options {
  // OpenBLAS threads for gemm. 1 by default: several peers share a machine's cores. OpenBLAS
  // keeps this setting per process, so the last Compute made sets it for all.
  int blasThreads = 1;
};

std::unique_ptr<Compute> makeCompute(const Options& options = {});

}  // namespace gossamer::kernels::cpu
