// Warp and block reductions shared by the .cu files of the CUDA backend (nvcc only; internal).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_launch.cuh"

namespace gossamer::kernels::cuda::detail {

inline constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// Butterfly reductions: every lane of the (fully active) warp gets the same result.
template <typename T>
__device__ __forceinline__ T warpSum(T value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}
__device__ __forceinline__ float warpMax(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

// Sum over a block of kThreads threads; the result is valid in thread 0. Every thread of the
// block must call it, once per kernel (it owns one static shared array per T).
template <typename T>
__device__ T blockSum(T value) {
  __shared__ T warpSums[kWarpsPerBlock];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  value = warpSum(value);
  if (lane == 0) warpSums[warp] = value;
  __syncthreads();
  T total = T(0);
  if (warp == 0) {
    total = lane < kWarpsPerBlock ? warpSums[lane] : T(0);
    total = warpSum(total);
  }
  return total;
}

// Enqueues finalizeSumKernel (cuda_kernels.cu) on `stream`: *result = the sum in double of
// partials[0 .. count), by one block of kThreads, in a fixed order. Launch errors are left for
// the caller's cudaGetLastError().
void finalizeSum(const double* partials, int count, double* result, cudaStream_t stream);

}  // namespace gossamer::kernels::cuda::detail
