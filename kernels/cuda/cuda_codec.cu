// Codec kernels of the CUDA backend (contracts in cuda_kernels.h, layouts and numerics in
// kernels/codec.h). The element-wise math is codec_math.h's, the very functions the CPU
// reference runs, compiled here with --fmad=false, so both backends give the same bits.
//
// - fp16/bf16/none: grid-stride element-wise kernels.
// - int8/int4: one thread block per quantization block (grid-stride over the blocks): a block
//   max of the magnitude bit patterns, then the quantization of the same elements (in L1/L2).
// - top-k: exact by radix-sorting 64-bit (magnitude, ~index) keys descending, so ties go to the
//   lower index as on the CPU, then sorting the k winning indices ascending; sampled by sorting
//   the m sampled magnitudes for the threshold and a stable DeviceSelect of the positions at or
//   above it. Both use CUB (CUDA Toolkit) and stream-ordered temporary memory.
// - random-k: each thread computes its own stratum's index from the counter-based hash.
#include <cstddef>
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "kernels/codec_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_launch.cuh"

namespace gossamer::kernels::cuda::detail {
namespace {

namespace cm = codec_math;

// ---- none, fp16, bf16 ----

__global__ void __launch_bounds__(kThreads)
    encodeNoneKernel(const float* in, float* residual, float* payload, std::size_t n) {
  for (std::size_t i = globalThread(); i < n; i += gridThreads()) {
    payload[i] = in[i] + residual[i];
    residual[i] = 0.0f;
  }
}

template <bool kBf16>
__device__ __forceinline__ std::uint16_t toHalf(float x) {
  return kBf16 ? cm::floatToBf16(x) : cm::floatToHalf(x);
}
template <bool kBf16>
__device__ __forceinline__ float fromHalf(std::uint16_t h) {
  return kBf16 ? cm::bf16ToFloat(h) : cm::halfToFloat(h);
}

template <bool kBf16, bool kFeedback>
__global__ void __launch_bounds__(kThreads)
    encodeHalfKernel(const float* in, float* residual, std::uint16_t* payload, std::size_t n) {
  for (std::size_t i = globalThread(); i < n; i += gridThreads()) {
    const float v = kFeedback ? in[i] + residual[i] : in[i];
    const std::uint16_t h = toHalf<kBf16>(v);
    payload[i] = h;
    if (kFeedback) residual[i] = v - fromHalf<kBf16>(h);
  }
}

template <bool kBf16, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    decodeHalfKernel(const std::uint16_t* payload, float* out, std::size_t n) {
  for (std::size_t i = globalThread(); i < n; i += gridThreads()) {
    const float decoded = fromHalf<kBf16>(payload[i]);
    out[i] = kAccumulate ? out[i] + decoded : decoded;
  }
}

// ---- int8 / int4 ----

// Max over the thread block; every thread gets the result. Ends with a barrier, so it may be
// called again in the next iteration of a block loop.
__device__ std::uint32_t blockMax(std::uint32_t value) {
  __shared__ std::uint32_t warpMax[kThreads / kWarpSize];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const std::uint32_t other = __shfl_xor_sync(kFullMask, value, offset);
    value = other > value ? other : value;
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) warpMax[warp] = value;
  __syncthreads();
  std::uint32_t result = 0;
  for (int w = 0; w < kThreads / kWarpSize; ++w) result = warpMax[w] > result ? warpMax[w] : result;
  __syncthreads();
  return result;
}

template <bool kInt4, bool kFeedback>
__global__ void __launch_bounds__(kThreads)
    encodeBlocksKernel(const float* in, float* residual, float* scales, std::uint8_t* codes,
                       std::size_t n, std::size_t blockSize, std::size_t blocks) {
  const float maxCode = kInt4 ? cm::kInt4MaxCode : cm::kInt8MaxCode;
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t begin = b * blockSize;
    const std::size_t count = blockSize < n - begin ? blockSize : n - begin;
    const float* x = in + begin;
    float* r = kFeedback ? residual + begin : nullptr;
    std::uint32_t maxBits = 0;
    for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) {
      const std::uint32_t bits = cm::magnitudeBits(kFeedback ? x[i] + r[i] : x[i]);
      maxBits = bits > maxBits ? bits : maxBits;
    }
    const float scale = cm::bitsFloat(blockMax(maxBits)) / maxCode;
    if (threadIdx.x == 0) scales[b] = scale;
    const bool quantizable = cm::quantizable(scale);
    const float decodedZero = 0.0f * scale;  // the decoded value of an unquantizable block
    if (kInt4) {
      // Thread per byte: elements 2j and 2j + 1 (absent past an odd tail: code 0).
      std::uint8_t* packed = codes + begin / 2;
      for (std::size_t j = threadIdx.x; 2 * j < count; j += blockDim.x) {
        const bool second = 2 * j + 1 < count;
        const float v0 = kFeedback ? x[2 * j] + r[2 * j] : x[2 * j];
        const float v1 = second ? (kFeedback ? x[2 * j + 1] + r[2 * j + 1] : x[2 * j + 1]) : 0.0f;
        float c0 = 0.0f;
        float c1 = 0.0f;
        if (quantizable) {
          c0 = cm::quantize(v0, scale, maxCode);
          c1 = second ? cm::quantize(v1, scale, maxCode) : 0.0f;
        }
        packed[j] = cm::packInt4(c0, c1);
        if (kFeedback) {
          r[2 * j] = v0 - (quantizable ? c0 * scale : decodedZero);
          if (second) r[2 * j + 1] = v1 - (quantizable ? c1 * scale : decodedZero);
        }
      }
    } else {
      auto* out = reinterpret_cast<std::int8_t*>(codes) + begin;
      for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) {
        const float v = kFeedback ? x[i] + r[i] : x[i];
        const float code = quantizable ? cm::quantize(v, scale, maxCode) : 0.0f;
        out[i] = static_cast<std::int8_t>(static_cast<std::int32_t>(code));
        if (kFeedback) r[i] = v - (quantizable ? code * scale : decodedZero);
      }
    }
  }
}

template <bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    decodeInt8Kernel(const float* scales, const std::int8_t* codes, float* out, std::size_t n,
                     std::size_t blockSize) {
  for (std::size_t i = globalThread(); i < n; i += gridThreads()) {
    const float decoded = static_cast<float>(codes[i]) * scales[i / blockSize];
    out[i] = kAccumulate ? out[i] + decoded : decoded;
  }
}

template <bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    decodeInt4Kernel(const float* scales, const std::uint8_t* packed, float* out, std::size_t n,
                     std::size_t blockSize) {
  const std::size_t bytes = (n + 1) / 2;
  for (std::size_t j = globalThread(); j < bytes; j += gridThreads()) {
    // blockSize is even, so both elements of a byte share a block.
    const float scale = scales[2 * j / blockSize];
    const std::uint8_t byte = packed[j];
    const float d0 = cm::int4Low(byte) * scale;
    out[2 * j] = kAccumulate ? out[2 * j] + d0 : d0;
    if (2 * j + 1 < n) {
      const float d1 = cm::int4High(byte) * scale;
      out[2 * j + 1] = kAccumulate ? out[2 * j + 1] + d1 : d1;
    }
  }
}

// ---- top-k and random-k ----

struct SparseFields {
  std::uint32_t* count;
  float* values;
  std::uint32_t* indices;
};

__host__ __device__ SparseFields sparseFields(void* payload, std::size_t capacity) {
  auto* bytes = static_cast<unsigned char*>(payload);
  return {reinterpret_cast<std::uint32_t*>(bytes), reinterpret_cast<float*>(bytes + 4),
          reinterpret_cast<std::uint32_t*>(bytes + 4 + 4 * capacity)};
}

// Descending order of these keys is: larger magnitude first, then lower index.
__global__ void __launch_bounds__(kThreads)
    topKKeysKernel(const float* source, std::uint64_t* keys, std::size_t n) {
  for (std::size_t i = globalThread(); i < n; i += gridThreads()) {
    keys[i] = (static_cast<std::uint64_t>(cm::magnitudeBits(source[i])) << 32) |
              (0xffffffffu - static_cast<std::uint32_t>(i));
  }
}

__global__ void __launch_bounds__(kThreads)
    topKIndicesKernel(const std::uint64_t* sortedKeys, std::uint32_t* indices, std::size_t k) {
  for (std::size_t j = globalThread(); j < k; j += gridThreads()) {
    indices[j] = 0xffffffffu - static_cast<std::uint32_t>(sortedKeys[j]);
  }
}

// The sparse payload of `count` positions: values[j] = source[indices[j]], the indices and the
// count, zeroing the sent entries of the residual (with feedback the source is the residual).
// `indices` may be out.indices itself.
__device__ __forceinline__ void gatherSparse(float* source, bool feedback,
                                             const std::uint32_t* indices, SparseFields out,
                                             std::size_t count) {
  for (std::size_t j = globalThread(); j < count; j += gridThreads()) {
    const std::uint32_t i = indices[j];
    out.values[j] = source[i];
    out.indices[j] = i;
    if (feedback) source[i] = 0.0f;
  }
  if (globalThread() == 0) *out.count = static_cast<std::uint32_t>(count);
}

__global__ void __launch_bounds__(kThreads)
    gatherKernel(float* source, bool feedback, const std::uint32_t* indices, SparseFields out,
                 std::size_t count) {
  gatherSparse(source, feedback, indices, out, count);
}

__global__ void __launch_bounds__(kThreads)
    sampleKernel(const float* in, const float* residual, std::uint32_t* samples, std::size_t n,
                 std::size_t m, std::uint64_t seed) {
  for (std::size_t j = globalThread(); j < m; j += gridThreads()) {
    const std::size_t p = cm::samplePosition(seed, j, n);
    samples[j] = cm::magnitudeBits(residual != nullptr ? in[p] + residual[p] : in[p]);
  }
}

// Position i is kept when |source[i]| >= the threshold (a device value, the sorted sample's
// rank-th entry).
struct AtLeastThreshold {
  const float* source;
  const std::uint32_t* threshold;
  __device__ bool operator()(std::uint32_t i) const {
    return cm::magnitudeBits(source[i]) >= *threshold;
  }
};

// The first min(selected, k) selected positions into the payload laid out for that count.
__global__ void __launch_bounds__(kThreads)
    sampledGatherKernel(float* source, bool feedback, const std::uint32_t* selected,
                        const std::int64_t* selectedCount, void* payload, std::size_t k) {
  const std::size_t available = static_cast<std::size_t>(*selectedCount);
  const std::size_t count = available < k ? available : k;
  gatherSparse(source, feedback, selected, sparseFields(payload, count), count);
}

__global__ void __launch_bounds__(kThreads)
    randKKernel(float* source, bool feedback, SparseFields out, std::size_t n, std::size_t k,
                std::uint64_t seed) {
  for (std::size_t j = globalThread(); j < k; j += gridThreads()) {
    const std::uint32_t i = cm::randomKIndex(seed, j, n, k);
    out.values[j] = source[i];
    out.indices[j] = i;
    if (feedback) source[i] = 0.0f;
  }
  if (globalThread() == 0) *out.count = static_cast<std::uint32_t>(k);
}

template <bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    scatterKernel(const float* values, const std::uint32_t* indices, float* out,
                  std::size_t count) {
  for (std::size_t j = globalThread(); j < count; j += gridThreads()) {
    const std::uint32_t i = indices[j];
    out[i] = kAccumulate ? out[i] + values[j] : values[j];
  }
}

// Stream-ordered scratch carved from one cudaMallocAsync: each take() is 16-byte aligned.
class Arena {
 public:
  explicit Arena(cudaStream_t stream) : stream_(stream) {}
  ~Arena() {
    if (base_ != nullptr) cudaFreeAsync(base_, stream_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  static std::size_t rounded(std::size_t bytes) { return (bytes + 15) / 16 * 16; }
  cudaError_t allocate(std::size_t bytes) {
    return cudaMallocAsync(&base_, bytes == 0 ? 16 : bytes, stream_);
  }
  void* take(std::size_t bytes) {
    void* pointer = static_cast<unsigned char*>(base_) + used_;
    used_ += rounded(bytes);
    return pointer;
  }

 private:
  cudaStream_t stream_;
  void* base_ = nullptr;
  std::size_t used_ = 0;
};

#define GOSSAMER_RETURN_IF_ERROR(call)                          \
  do {                                                          \
    const cudaError_t gossamer_error_ = (call);                 \
    if (gossamer_error_ != cudaSuccess) return gossamer_error_; \
  } while (0)

// Temporary bytes CUB needs to sort `items` keys of type Key on all their bits.
template <typename Key>
cudaError_t sortTempBytes(bool descending, std::uint32_t items, cudaStream_t stream,
                          std::size_t* bytes) {
  const Key* in = nullptr;
  Key* out = nullptr;
  constexpr int kBits = 8 * sizeof(Key);
  return descending
             ? cub::DeviceRadixSort::SortKeysDescending(nullptr, *bytes, in, out, items, 0, kBits,
                                                        stream)
             : cub::DeviceRadixSort::SortKeys(nullptr, *bytes, in, out, items, 0, kBits, stream);
}

// residual += in (the residual then holds v); a no-op without feedback.
cudaError_t foldInput(const float* in, float* residual, std::size_t n, const Launch& launch) {
  if (residual == nullptr) return cudaSuccess;
  return axpby(residual, in, n, 1.0f, 1.0f, launch);
}

}  // namespace

cudaError_t encodeNone(const float* in, float* residual, float* payload, std::size_t n,
                       const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  if (residual == nullptr) {
    return cudaMemcpyAsync(payload, in, n * sizeof(float), cudaMemcpyDeviceToDevice, launch.stream);
  }
  encodeNoneKernel<<<blocksFor(n, launch), kThreads, 0, launch.stream>>>(in, residual, payload, n);
  return cudaGetLastError();
}

cudaError_t encodeHalf(bool bf16, const float* in, float* residual, std::uint16_t* payload,
                       std::size_t n, const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  const unsigned blocks = blocksFor(n, launch);
  const bool feedback = residual != nullptr;
  if (bf16) {
    (feedback ? encodeHalfKernel<true, true>
              : encodeHalfKernel<true, false>)<<<blocks, kThreads, 0, launch.stream>>>(in, residual,
                                                                                       payload, n);
  } else {
    (feedback ? encodeHalfKernel<false, true>
              : encodeHalfKernel<false, false>)<<<blocks, kThreads, 0, launch.stream>>>(
        in, residual, payload, n);
  }
  return cudaGetLastError();
}

cudaError_t decodeHalf(bool bf16, const std::uint16_t* payload, float* out, std::size_t n,
                       bool accumulate, const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  const unsigned blocks = blocksFor(n, launch);
  if (bf16) {
    (accumulate
         ? decodeHalfKernel<true, true>
         : decodeHalfKernel<true, false>)<<<blocks, kThreads, 0, launch.stream>>>(payload, out, n);
  } else {
    (accumulate
         ? decodeHalfKernel<false, true>
         : decodeHalfKernel<false, false>)<<<blocks, kThreads, 0, launch.stream>>>(payload, out, n);
  }
  return cudaGetLastError();
}

cudaError_t encodeBlocks(bool int4, const float* in, float* residual, void* payload, std::size_t n,
                         std::size_t blockSize, const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  const std::size_t blocks = (n + blockSize - 1) / blockSize;
  auto* scales = static_cast<float*>(payload);
  auto* codes = static_cast<std::uint8_t*>(payload) + 4 * blocks;
  // One thread block per quantization block, at most one resident wave of them.
  const unsigned grid = blocksFor(blocks * kThreads, launch);
  const bool feedback = residual != nullptr;
  if (int4) {
    (feedback ? encodeBlocksKernel<true, true>
              : encodeBlocksKernel<true, false>)<<<grid, kThreads, 0, launch.stream>>>(
        in, residual, scales, codes, n, blockSize, blocks);
  } else {
    (feedback ? encodeBlocksKernel<false, true>
              : encodeBlocksKernel<false, false>)<<<grid, kThreads, 0, launch.stream>>>(
        in, residual, scales, codes, n, blockSize, blocks);
  }
  return cudaGetLastError();
}

cudaError_t decodeBlocks(bool int4, const void* payload, float* out, std::size_t n,
                         std::size_t blockSize, bool accumulate, const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  const std::size_t blocks = (n + blockSize - 1) / blockSize;
  const auto* scales = static_cast<const float*>(payload);
  const auto* codes = static_cast<const std::uint8_t*>(payload) + 4 * blocks;
  if (int4) {
    const unsigned grid = blocksFor((n + 1) / 2, launch);
    (accumulate ? decodeInt4Kernel<true>
                : decodeInt4Kernel<false>)<<<grid, kThreads, 0, launch.stream>>>(scales, codes, out,
                                                                                 n, blockSize);
  } else {
    const unsigned grid = blocksFor(n, launch);
    (accumulate ? decodeInt8Kernel<true>
                : decodeInt8Kernel<false>)<<<grid, kThreads, 0, launch.stream>>>(
        scales, reinterpret_cast<const std::int8_t*>(codes), out, n, blockSize);
  }
  return cudaGetLastError();
}

cudaError_t encodeTopKExact(const float* in, float* residual, void* payload, std::size_t n,
                            std::size_t k, const Launch& launch) {
  const auto items = static_cast<std::uint32_t>(n);
  const auto kept = static_cast<std::uint32_t>(k);
  std::size_t sortBytes = 0;
  std::size_t indexSortBytes = 0;
  GOSSAMER_RETURN_IF_ERROR(sortTempBytes<std::uint64_t>(true, items, launch.stream, &sortBytes));
  GOSSAMER_RETURN_IF_ERROR(
      sortTempBytes<std::uint32_t>(false, kept, launch.stream, &indexSortBytes));
  const std::size_t tempBytes = sortBytes > indexSortBytes ? sortBytes : indexSortBytes;
  Arena arena(launch.stream);
  GOSSAMER_RETURN_IF_ERROR(arena.allocate(2 * Arena::rounded(8 * n) + Arena::rounded(4 * k) +
                                          Arena::rounded(tempBytes)));
  auto* keys = static_cast<std::uint64_t*>(arena.take(8 * n));
  auto* sorted = static_cast<std::uint64_t*>(arena.take(8 * n));
  auto* winners = static_cast<std::uint32_t*>(arena.take(4 * k));
  void* temp = arena.take(tempBytes);

  GOSSAMER_RETURN_IF_ERROR(foldInput(in, residual, n, launch));
  float* source = residual != nullptr ? residual : const_cast<float*>(in);
  const SparseFields out = sparseFields(payload, k);
  topKKeysKernel<<<blocksFor(n, launch), kThreads, 0, launch.stream>>>(source, keys, n);
  GOSSAMER_RETURN_IF_ERROR(cudaGetLastError());
  std::size_t bytes = tempBytes;
  GOSSAMER_RETURN_IF_ERROR(cub::DeviceRadixSort::SortKeysDescending(temp, bytes, keys, sorted,
                                                                    items, 0, 64, launch.stream));
  topKIndicesKernel<<<blocksFor(k, launch), kThreads, 0, launch.stream>>>(sorted, winners, k);
  GOSSAMER_RETURN_IF_ERROR(cudaGetLastError());
  bytes = tempBytes;
  GOSSAMER_RETURN_IF_ERROR(cub::DeviceRadixSort::SortKeys(temp, bytes, winners, out.indices, kept,
                                                          0, 32, launch.stream));
  // The gather reads the sorted indices from the payload and writes them back in place.
  gatherKernel<<<blocksFor(k, launch), kThreads, 0, launch.stream>>>(source, residual != nullptr,
                                                                     out.indices, out, k);
  return cudaGetLastError();
}

cudaError_t encodeTopKSampled(const float* in, float* residual, void* payload, std::size_t n,
                              std::size_t k, std::size_t m, std::size_t rank, std::uint64_t seed,
                              const Launch& launch) {
  const auto sampleItems = static_cast<std::uint32_t>(m);
  std::size_t sortBytes = 0;
  std::size_t selectBytes = 0;
  GOSSAMER_RETURN_IF_ERROR(
      sortTempBytes<std::uint32_t>(true, sampleItems, launch.stream, &sortBytes));
  const AtLeastThreshold predicate{nullptr, nullptr};
  GOSSAMER_RETURN_IF_ERROR(cub::DeviceSelect::If(
      nullptr, selectBytes, thrust::counting_iterator<std::uint32_t>(0),
      static_cast<std::uint32_t*>(nullptr), static_cast<std::int64_t*>(nullptr),
      static_cast<std::int64_t>(n), predicate, launch.stream));
  const std::size_t tempBytes = sortBytes > selectBytes ? sortBytes : selectBytes;
  Arena arena(launch.stream);
  GOSSAMER_RETURN_IF_ERROR(arena.allocate(2 * Arena::rounded(4 * m) + Arena::rounded(4 * n) +
                                          Arena::rounded(8) + Arena::rounded(tempBytes)));
  auto* samples = static_cast<std::uint32_t*>(arena.take(4 * m));
  auto* sortedSamples = static_cast<std::uint32_t*>(arena.take(4 * m));
  auto* selected = static_cast<std::uint32_t*>(arena.take(4 * n));
  auto* selectedCount = static_cast<std::int64_t*>(arena.take(8));
  void* temp = arena.take(tempBytes);

  // The sample reads v = in + residual before the residual is folded.
  sampleKernel<<<blocksFor(m, launch), kThreads, 0, launch.stream>>>(in, residual, samples, n, m,
                                                                     seed);
  GOSSAMER_RETURN_IF_ERROR(cudaGetLastError());
  std::size_t bytes = tempBytes;
  GOSSAMER_RETURN_IF_ERROR(cub::DeviceRadixSort::SortKeysDescending(
      temp, bytes, samples, sortedSamples, sampleItems, 0, 32, launch.stream));
  GOSSAMER_RETURN_IF_ERROR(foldInput(in, residual, n, launch));
  float* source = residual != nullptr ? residual : const_cast<float*>(in);
  bytes = tempBytes;
  GOSSAMER_RETURN_IF_ERROR(
      cub::DeviceSelect::If(temp, bytes, thrust::counting_iterator<std::uint32_t>(0), selected,
                            selectedCount, static_cast<std::int64_t>(n),
                            AtLeastThreshold{source, sortedSamples + (rank - 1)}, launch.stream));
  sampledGatherKernel<<<blocksFor(k, launch), kThreads, 0, launch.stream>>>(
      source, residual != nullptr, selected, selectedCount, payload, k);
  return cudaGetLastError();
}

cudaError_t encodeRandK(const float* in, float* residual, void* payload, std::size_t n,
                        std::size_t k, std::uint64_t seed, const Launch& launch) {
  GOSSAMER_RETURN_IF_ERROR(foldInput(in, residual, n, launch));
  float* source = residual != nullptr ? residual : const_cast<float*>(in);
  randKKernel<<<blocksFor(k, launch), kThreads, 0, launch.stream>>>(
      source, residual != nullptr, sparseFields(payload, k), n, k, seed);
  return cudaGetLastError();
}

cudaError_t decodeSparse(const void* payload, std::size_t count, float* out, std::size_t n,
                         bool accumulate, const Launch& launch) {
  const auto* bytes = static_cast<const unsigned char*>(payload);
  const auto* values = reinterpret_cast<const float*>(bytes + 4);
  const auto* indices = reinterpret_cast<const std::uint32_t*>(bytes + 4 + 4 * count);
  if (!accumulate) GOSSAMER_RETURN_IF_ERROR(fill(out, n, 0.0f, launch));
  if (count == 0) return cudaGetLastError();
  (accumulate ? scatterKernel<true>
              : scatterKernel<false>)<<<blocksFor(count, launch), kThreads, 0, launch.stream>>>(
      values, indices, out, count);
  return cudaGetLastError();
}

}  // namespace gossamer::kernels::cuda::detail
