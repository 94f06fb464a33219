// Convolution and pooling kernels of the CUDA backend (contracts in cuda_kernels.h). The
// per-element math (which input an im2col entry copies, the order of the gradient sums, the
// window maximum) is conv_math.h's, the same functions the CPU reference is built on; the
// matrix products themselves are cuBLAS calls made by cuda_compute.cc.
//
// Every kernel is a grid-stride loop over its outputs with one thread per output element, so
// the result never depends on the grid, and gradients are gathered (each element sums its own
// contributions in a fixed order) rather than scattered with atomics: deterministic run to run.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/conv_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_launch.cuh"

namespace gossamer::kernels::cuda::detail {
namespace {

__global__ void __launch_bounds__(kThreads)
    im2colKernel(Conv2dShape shape, const float* input, float* columns) {
  const std::size_t cols = shape.columns();
  const std::size_t total = shape.patch() * cols;
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    const std::int64_t source = conv_math::im2colSource(shape, i / cols, i % cols);
    columns[i] = source < 0 ? 0.0f : input[source];
  }
}

__global__ void __launch_bounds__(kThreads)
    col2imKernel(Conv2dShape shape, const float* dColumns, float* dInput) {
  const std::size_t total = shape.inputSize();
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    dInput[i] = conv_math::col2imGather(shape, dColumns, i);
  }
}

__global__ void __launch_bounds__(kThreads)
    channelMajorToNchwKernel(const float* in, const float* bias, float* out, std::size_t batch,
                             std::size_t channels, std::size_t plane) {
  const std::size_t total = batch * channels * plane;
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    const std::size_t p = i % plane;
    const std::size_t c = (i / plane) % channels;
    const std::size_t n = i / (plane * channels);
    const float value = in[(c * batch + n) * plane + p];
    out[i] = bias == nullptr ? value : value + bias[c];
  }
}

__global__ void __launch_bounds__(kThreads)
    nchwToChannelMajorKernel(const float* in, float* out, std::size_t batch, std::size_t channels,
                             std::size_t plane) {
  const std::size_t total = batch * channels * plane;
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    const std::size_t p = i % plane;
    const std::size_t n = (i / plane) % batch;
    const std::size_t c = i / (plane * batch);
    out[i] = in[(n * channels + c) * plane + p];
  }
}

// One block per row (grid-stride over rows): each thread sums a strided part in double, then
// the block adds the threads' sums in a fixed tree order.
__global__ void __launch_bounds__(kThreads)
    rowSumsKernel(const float* rows, float* sums, std::size_t channels, std::size_t count) {
  __shared__ double partial[kThreads];
  for (std::size_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const float* row = rows + c * count;
    double sum = 0.0;
    for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) sum += row[i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) sums[c] = static_cast<float>(partial[0]);
    __syncthreads();  // `partial` is rewritten for the next row
  }
}

__global__ void __launch_bounds__(kThreads)
    maxPoolKernel(Pool2dShape shape, const float* input, float* output, std::int32_t* argmax) {
  const std::size_t total = shape.outputSize();
  const std::size_t outPlane = shape.outPlane();
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    const std::size_t q = i / outPlane;
    const std::size_t o = i % outPlane;
    output[i] = conv_math::windowMax(shape, input + q * shape.inPlane(), o / shape.outWidth(),
                                     o % shape.outWidth(), &argmax[i]);
  }
}

__global__ void __launch_bounds__(kThreads)
    maxPoolBackwardKernel(Pool2dShape shape, const float* dOutput, const std::int32_t* argmax,
                          float* dInput) {
  const std::size_t total = shape.inputSize();
  const std::size_t inPlane = shape.inPlane();
  const std::size_t outPlane = shape.outPlane();
  for (std::size_t i = globalThread(); i < total; i += gridThreads()) {
    const std::size_t q = i / inPlane;
    dInput[i] = conv_math::poolGather(shape, dOutput + q * outPlane, argmax + q * outPlane,
                                      i % inPlane);
  }
}

}  // namespace

cudaError_t im2col(const Conv2dShape& shape, const float* input, float* columns,
                   const Launch& launch) {
  const std::size_t total = shape.patch() * shape.columns();
  if (total == 0) return cudaGetLastError();
  im2colKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(shape, input, columns);
  return cudaGetLastError();
}

cudaError_t col2im(const Conv2dShape& shape, const float* dColumns, float* dInput,
                   const Launch& launch) {
  const std::size_t total = shape.inputSize();
  if (total == 0) return cudaGetLastError();
  col2imKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(shape, dColumns, dInput);
  return cudaGetLastError();
}

cudaError_t channelMajorToNchw(const float* in, const float* bias, float* out, std::size_t batch,
                               std::size_t channels, std::size_t plane, const Launch& launch) {
  const std::size_t total = batch * channels * plane;
  if (total == 0) return cudaGetLastError();
  channelMajorToNchwKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(
      in, bias, out, batch, channels, plane);
  return cudaGetLastError();
}

cudaError_t nchwToChannelMajor(const float* in, float* out, std::size_t batch,
                               std::size_t channels, std::size_t plane, const Launch& launch) {
  const std::size_t total = batch * channels * plane;
  if (total == 0) return cudaGetLastError();
  nchwToChannelMajorKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(
      in, out, batch, channels, plane);
  return cudaGetLastError();
}

cudaError_t rowSums(const float* rows, float* sums, std::size_t channels, std::size_t count,
                    const Launch& launch) {
  if (channels == 0) return cudaGetLastError();
  const std::size_t wave =
      static_cast<std::size_t>(std::max(launch.multiprocessors, 1)) * kBlocksPerMultiprocessor;
  const auto blocks = static_cast<unsigned>(std::min(channels, wave));
  rowSumsKernel<<<blocks, kThreads, 0, launch.stream>>>(rows, sums, channels, count);
  return cudaGetLastError();
}

cudaError_t maxPool2d(const Pool2dShape& shape, const float* input, float* output,
                      std::int32_t* argmax, const Launch& launch) {
  const std::size_t total = shape.outputSize();
  if (total == 0) return cudaGetLastError();
  maxPoolKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(shape, input, output,
                                                                         argmax);
  return cudaGetLastError();
}

cudaError_t maxPool2dBackward(const Pool2dShape& shape, const float* dOutput,
                              const std::int32_t* argmax, float* dInput, const Launch& launch) {
  const std::size_t total = shape.inputSize();
  if (total == 0) return cudaGetLastError();
  maxPoolBackwardKernel<<<blocksFor(total, launch), kThreads, 0, launch.stream>>>(
      shape, dOutput, argmax, dInput);
  return cudaGetLastError();
}

}  // namespace gossamer::kernels::cuda::detail
