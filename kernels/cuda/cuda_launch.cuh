// Launch geometry shared by the .cu files of the CUDA backend (nvcc only; internal).
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace gossamer::kernels::cuda::detail {

inline constexpr int kThreads = 256;
inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;
// Resident 256-thread blocks per SM on sm_90 (2048 threads). Grid-stride grids are capped at
// one such wave: enough warps to saturate HBM, no tail of partially filled waves.
inline constexpr int kBlocksPerMultiprocessor = 8;

// Blocks of kThreads for `items` independent work items, capped at one resident wave and `cap`.
inline unsigned blocksFor(std::size_t items, const Launch& launch, std::size_t cap = SIZE_MAX) {
  const std::size_t wave =
      static_cast<std::size_t>(std::max(launch.multiprocessors, 1)) * kBlocksPerMultiprocessor;
  std::size_t blocks = (items + kThreads - 1) / kThreads;
  blocks = std::min({blocks, wave, cap});
  return static_cast<unsigned>(std::max<std::size_t>(blocks, 1));
}

__device__ __forceinline__ std::size_t globalThread() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t gridThreads() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

}  // namespace gossamer::kernels::cuda::detail
