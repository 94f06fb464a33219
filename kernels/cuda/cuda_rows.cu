// Row-wise kernels of the CUDA backend: softmax cross-entropy, argmax, countCorrect, bias add/grad.
//
// Host launchers with their contracts in cuda_kernels.h. Softmax cross-entropy, argmax and
// countCorrect run one warp per row; the loss sum uses the per-block partials and the one-block
// finalize of cuda_kernels.cu (finalizeSum, cuda_reduce.cuh), so it does not depend on atomic
// ordering. CMake compiles this file with --fmad=false, like cuda_kernels.cu.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include <math_constants.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_reduce.cuh"

namespace gossamer::kernels::cuda::detail {
namespace {

// ---- warp-per-row kernels (row loops are warp-uniform, so full-mask shuffles are safe) ----

__device__ __forceinline__ std::size_t globalWarp() {
  return static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ __forceinline__ std::size_t gridWarps() {
  return static_cast<std::size_t>(gridDim.x) * kWarpsPerBlock;
}

// First index of the maximum of x[0 .. classes), returned in every lane, with the semantics of
// the scan `best = 0; for j: if (x[j] > x[best]) best = j`: NaNs other than x[0] are skipped
// and a NaN x[0] wins. classes <= INT32_MAX.
__device__ int warpArgmax(const float* x, std::size_t classes, int lane) {
  float best = -CUDART_INF_F;
  int bestIndex = INT_MAX;  // no element strictly above -inf seen yet
  for (std::size_t j = lane; j < classes; j += kWarpSize) {
    const float v = x[j];
    if (v > best) {
      best = v;
      bestIndex = static_cast<int>(j);
    }
  }
  // Lexicographic (larger value, smaller index): a total order on the non-NaN candidates.
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float otherValue = __shfl_xor_sync(kFullMask, best, offset);
    const int otherIndex = __shfl_xor_sync(kFullMask, bestIndex, offset);
    if (otherValue > best || (otherValue == best && otherIndex < bestIndex)) {
      best = otherValue;
      bestIndex = otherIndex;
    }
  }
  // Nothing above -inf (all -inf or NaN), or x[0] is NaN: the scan keeps index 0.
  if (bestIndex == INT_MAX || isnan(x[0])) bestIndex = 0;
  return bestIndex;
}

// *badRow = min(*badRow, smallest row whose label is outside [0, classes)).
__global__ void __launch_bounds__(kThreads)
    validateLabelsKernel(const std::int32_t* labels, std::size_t rows, std::size_t classes,
                         unsigned long long* badRow) {
  for (std::size_t row = globalThread(); row < rows; row += gridThreads()) {
    const std::int32_t label = labels[row];
    if (label < 0 || static_cast<std::size_t>(label) >= classes) {
      atomicMin(badRow, static_cast<unsigned long long>(row));
    }
  }
}

// Runs after validateLabelsKernel on the same stream: when it found a bad label, nothing is
// written (like the CPU reference, which throws before any output). Mirrors the CPU's rounding
// steps: exp in float, row sum in double, d[j] = e_j * float(gradScale / sum), then
// d[label] -= gradScale; loss = log(sum) + max - x[label] in double.
__global__ void __launch_bounds__(kThreads)
    softmaxCrossEntropyKernel(const float* logits, const std::int32_t* labels, std::size_t rows,
                              std::size_t classes, float* dlogits, float gradScale,
                              double* partials, const unsigned long long* badRow) {
  const int lane = threadIdx.x % kWarpSize;
  const bool labelsValid = *badRow == kNoBadRow;  // same value in every thread
  double lossSum = 0.0;                           // accumulated by lane 0 only
  for (std::size_t row = globalWarp(); labelsValid && row < rows; row += gridWarps()) {
    const float* x = logits + row * classes;
    const auto label = static_cast<std::size_t>(labels[row]);
    float maxValue = -CUDART_INF_F;
    for (std::size_t j = lane; j < classes; j += kWarpSize) maxValue = fmaxf(maxValue, x[j]);
    maxValue = warpMax(maxValue);
    double sum = 0.0;
    for (std::size_t j = lane; j < classes; j += kWarpSize) sum += expf(x[j] - maxValue);
    sum = warpSum(sum);
    const float target = x[label];
    if (lane == 0) {
      lossSum += log(sum) + static_cast<double>(maxValue) - static_cast<double>(target);
    }
    if (dlogits != nullptr) {
      // dlogits may alias logits: every lane's reads of this row (x[label] included) happen
      // before any lane's writes.
      __syncwarp(kFullMask);
      const auto factor = static_cast<float>(static_cast<double>(gradScale) / sum);
      float* d = dlogits + row * classes;
      for (std::size_t j = lane; j < classes; j += kWarpSize) {
        float value = expf(x[j] - maxValue) * factor;
        if (j == label) value -= gradScale;
        d[j] = value;
      }
    }
  }
  const double total = blockSum(lossSum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    argmaxKernel(const float* x, std::size_t rows, std::size_t classes, std::int32_t* out) {
  const int lane = threadIdx.x % kWarpSize;
  for (std::size_t row = globalWarp(); row < rows; row += gridWarps()) {
    const int best = warpArgmax(x + row * classes, classes, lane);
    if (lane == 0) out[row] = best;
  }
}

__global__ void __launch_bounds__(kThreads)
    countCorrectKernel(const float* logits, const std::int32_t* labels, std::size_t rows,
                       std::size_t classes, unsigned long long* count) {
  const int lane = threadIdx.x % kWarpSize;
  unsigned long long correct = 0;  // counted by lane 0 only
  for (std::size_t row = globalWarp(); row < rows; row += gridWarps()) {
    const int best = warpArgmax(logits + row * classes, classes, lane);
    if (lane == 0 && best == labels[row]) ++correct;
  }
  const unsigned long long total = blockSum(correct);
  if (threadIdx.x == 0 && total != 0) atomicAdd(count, total);
}

// Blocks for a warp-per-row kernel over `rows` rows.
unsigned rowBlocksFor(std::size_t rows, const Launch& launch, std::size_t cap = SIZE_MAX) {
  return blocksFor(rows * kWarpSize, launch, cap);
}

// ---- bias kernels ----

// Index is 32-bit when total + grid threads fits, which avoids 64-bit division for the column.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    biasAddKernel(float* y, const float* bias, Index total, Index cols) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    y[i] += bias[i % cols];
  }
}

constexpr int kBiasGradRowsPerBlock = 8;  // block = (kWarpSize columns) x (8 row lanes)

// One block sums a tile of 32 columns: thread (tx, ty) sums rows ty, ty + 8, ... of column
// tile * 32 + tx (coalesced across tx), then row 0 of the block adds the 8 partials in order.
__global__ void __launch_bounds__(kWarpSize* kBiasGradRowsPerBlock)
    biasGradKernel(float* dbias, const float* dy, std::size_t rows, std::size_t cols) {
  __shared__ float partial[kBiasGradRowsPerBlock][kWarpSize + 1];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  for (std::size_t tile = blockIdx.x; tile * kWarpSize < cols; tile += gridDim.x) {
    const std::size_t j = tile * kWarpSize + tx;
    float sum = 0.0f;
    if (j < cols) {
      for (std::size_t r = ty; r < rows; r += kBiasGradRowsPerBlock) sum += dy[r * cols + j];
    }
    partial[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && j < cols) {
      float total = 0.0f;
#pragma unroll
      for (int k = 0; k < kBiasGradRowsPerBlock; ++k) total += partial[k][tx];
      dbias[j] = total;
    }
    __syncthreads();  // `partial` is rewritten by the next tile
  }
}

}  // namespace

// ---- launchers ----

cudaError_t biasAdd(float* y, const float* bias, std::size_t rows, std::size_t cols,
                    const Launch& launch) {
  const std::size_t total = rows * cols;
  if (total == 0) return cudaGetLastError();
  const unsigned blocks = blocksFor(total, launch);
  if (total <= static_cast<std::size_t>(INT32_MAX)) {
    biasAddKernel<std::uint32_t><<<blocks, kThreads, 0, launch.stream>>>(
        y, bias, static_cast<std::uint32_t>(total), static_cast<std::uint32_t>(cols));
  } else {
    biasAddKernel<std::size_t><<<blocks, kThreads, 0, launch.stream>>>(y, bias, total, cols);
  }
  return cudaGetLastError();
}

cudaError_t biasGrad(float* dbias, const float* dy, std::size_t rows, std::size_t cols,
                     const Launch& launch) {
  if (cols == 0) return cudaGetLastError();
  const std::size_t tiles = (cols + kWarpSize - 1) / kWarpSize;
  const std::size_t wave =
      static_cast<std::size_t>(std::max(launch.multiprocessors, 1)) * kBlocksPerMultiprocessor;
  const unsigned blocks = static_cast<unsigned>(std::min(tiles, wave));
  biasGradKernel<<<blocks, dim3(kWarpSize, kBiasGradRowsPerBlock), 0, launch.stream>>>(dbias, dy,
                                                                                       rows, cols);
  return cudaGetLastError();
}

cudaError_t softmaxCrossEntropy(const float* logits, const std::int32_t* labels, std::size_t rows,
                                std::size_t classes, float* dlogits, float gradScale,
                                Scratch* scratch, const Launch& launch) {
  double* result = &scratch->results.value;
  unsigned long long* badRow = &scratch->results.badRow;
  // 0xff bytes = kNoBadRow.
  if (const cudaError_t e = cudaMemsetAsync(badRow, 0xff, sizeof(*badRow), launch.stream);
      e != cudaSuccess) {
    return e;
  }
  if (rows == 0) {
    if (const cudaError_t e = cudaMemsetAsync(result, 0, sizeof(double), launch.stream);
        e != cudaSuccess)
      return e;
    return cudaGetLastError();
  }
  validateLabelsKernel<<<blocksFor(rows, launch), kThreads, 0, launch.stream>>>(labels, rows,
                                                                                classes, badRow);
  const unsigned blocks = rowBlocksFor(rows, launch, kMaxReductionBlocks);
  softmaxCrossEntropyKernel<<<blocks, kThreads, 0, launch.stream>>>(
      logits, labels, rows, classes, dlogits, gradScale, scratch->partials, badRow);
  finalizeSum(scratch->partials, static_cast<int>(blocks), result, launch.stream);
  return cudaGetLastError();
}

cudaError_t argmax(const float* x, std::size_t rows, std::size_t classes, std::int32_t* out,
                   const Launch& launch) {
  if (rows == 0) return cudaGetLastError();
  argmaxKernel<<<rowBlocksFor(rows, launch), kThreads, 0, launch.stream>>>(x, rows, classes, out);
  return cudaGetLastError();
}

cudaError_t countCorrect(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, Scratch* scratch, const Launch& launch) {
  unsigned long long* count = &scratch->results.count;
  if (const cudaError_t e = cudaMemsetAsync(count, 0, sizeof(*count), launch.stream);
      e != cudaSuccess)
    return e;
  if (rows == 0) return cudaGetLastError();
  countCorrectKernel<<<rowBlocksFor(rows, launch), kThreads, 0, launch.stream>>>(
      logits, labels, rows, classes, count);
  return cudaGetLastError();
}

}  // namespace gossamer::kernels::cuda::detail
