// Element-wise, optimizer and reduction kernels of the CUDA backend and their launchers.
//
// Layout of this file (contracts in cuda_kernels.h):
// - one generic element-wise kernel (grid-stride, float4 body with a scalar head and tail)
//   instantiated with small functors, one per operation;
// - reductions in double with per-block partials and a one-block finalize, so results do not
//   depend on atomic ordering.
// The row-wise kernels (softmax cross-entropy, argmax, countCorrect, bias) are in cuda_rows.cu;
// the warp and block reductions both files use are in cuda_reduce.cuh.
//
// Numerics: CMake compiles this file with --fmad=false, so a * b + c rounds the product like the
// CPU reference (baseline x86-64 has no FMA) and the element-wise ops and optimizer steps give
// bit-identical results to it; explicit fma() calls (double reductions) are unaffected.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_reduce.cuh"

namespace gossamer::kernels::cuda::detail {
namespace {

// ---- launch geometry ----

// How a span of n floats splits for float4 access: `head` scalar elements until every pointer
// is 16-byte aligned, `n4` float4s, then the scalar tail [head + 4 * n4, n). When the pointers
// disagree on their offset modulo 16, head = n4 = 0 and everything is scalar.
struct Split {
  std::size_t head;
  std::size_t n4;
  std::size_t n;
};

Split splitFor(const void* const* pointers, std::size_t count, std::size_t n) {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(pointers[0]) % 16;
  for (std::size_t i = 1; i < count; ++i) {
    if (reinterpret_cast<std::uintptr_t>(pointers[i]) % 16 != offset) return {0, 0, n};
  }
  if (offset % sizeof(float) != 0) return {0, 0, n};
  const std::size_t head =
      std::min<std::size_t>(offset == 0 ? 0 : (16 - offset) / sizeof(float), n);
  return {head, (n - head) / 4, n};
}
Split splitFor(std::initializer_list<const void*> pointers, std::size_t n) {
  return splitFor(pointers.begin(), pointers.size(), n);
}

// Elements handled by the scalar loop of a Split.
std::size_t scalarCount(const Split& split) { return split.n - 4 * split.n4; }

// ---- device helpers (blocksFor, globalThread and gridThreads: cuda_launch.cuh; warpSum and
// blockSum: cuda_reduce.cuh) ----

// `pointer + element` must be 16-byte aligned (guaranteed by Split).
__device__ __forceinline__ float4 load4(const float* pointer, std::size_t element) {
  return *reinterpret_cast<const float4*>(pointer + element);
}
__device__ __forceinline__ void store4(float* pointer, std::size_t element, float4 value) {
  *reinterpret_cast<float4*>(pointer + element) = value;
}
// Component c of v; c is a compile-time constant after unrolling, so this folds to a register.
__device__ __forceinline__ float component(const float4& v, int c) {
  return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w));
}

// ---- generic element-wise kernel ----

// The arrays an Op reads (`in`) and writes (`out`); an output may be the same array as an input.
template <int kIn, int kOut>
struct Streams {
  const float* in[kIn > 0 ? kIn : 1];
  float* out[kOut];
};

template <int kIn, int kOut>
Split splitFor(const Streams<kIn, kOut>& streams, std::size_t n) {
  const void* pointers[kIn + kOut];
  for (int b = 0; b < kOut; ++b) pointers[b] = streams.out[b];
  for (int a = 0; a < kIn; ++a) pointers[kOut + a] = streams.in[a];
  return splitFor(pointers, kIn + kOut, n);
}

// Applies `op` to the four lanes of one float4 group starting at element `e` and stores them.
template <typename Op>
__device__ __forceinline__ void apply4(const Op& op, const Streams<Op::kIn, Op::kOut>& streams,
                                       const float4 (&in)[Op::kIn > 0 ? Op::kIn : 1],
                                       std::size_t e) {
  float results[Op::kOut][4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float x[Op::kIn > 0 ? Op::kIn : 1];
    float y[Op::kOut];
#pragma unroll
    for (int a = 0; a < Op::kIn; ++a) x[a] = component(in[a], c);
    op(x, y);
#pragma unroll
    for (int b = 0; b < Op::kOut; ++b) results[b][c] = y[b];
  }
#pragma unroll
  for (int b = 0; b < Op::kOut; ++b) {
    store4(streams.out[b], e,
           make_float4(results[b][0], results[b][1], results[b][2], results[b][3]));
  }
}

// Each element is read (all inputs) before it is written, by the same thread, so outputs may
// alias inputs element for element. kUnroll float4 groups are loaded before any is stored to
// keep enough bytes in flight per SM for HBM bandwidth.
template <typename Op, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    elementwiseKernel(Op op, Streams<Op::kIn, Op::kOut> streams, Split split) {
  constexpr int kInSlots = Op::kIn > 0 ? Op::kIn : 1;
  const std::size_t stride = gridThreads();
  const std::size_t start = globalThread();
  std::size_t i = start;
  for (; i + (kUnroll - 1) * stride < split.n4; i += kUnroll * stride) {
    float4 in[kUnroll][kInSlots];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int a = 0; a < Op::kIn; ++a) {
        in[u][a] = load4(streams.in[a], split.head + 4 * (i + u * stride));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) apply4(op, streams, in[u], split.head + 4 * (i + u * stride));
  }
  for (; i < split.n4; i += stride) {
    float4 in[kInSlots];
#pragma unroll
    for (int a = 0; a < Op::kIn; ++a) in[a] = load4(streams.in[a], split.head + 4 * i);
    apply4(op, streams, in, split.head + 4 * i);
  }
  // Scalar head [0, head) and tail [tailStart, n), numbered 0 .. scalarCount - 1.
  const std::size_t tailStart = split.head + 4 * split.n4;
  const std::size_t scalars = split.head + (split.n - tailStart);
  for (std::size_t j = start; j < scalars; j += stride) {
    const std::size_t e = j < split.head ? j : tailStart + (j - split.head);
    float x[kInSlots];
    float y[Op::kOut];
#pragma unroll
    for (int a = 0; a < Op::kIn; ++a) x[a] = streams.in[a][e];
    op(x, y);
#pragma unroll
    for (int b = 0; b < Op::kOut; ++b) streams.out[b][e] = y[b];
  }
}

// float4 groups in flight per thread: more for ops with few streams.
constexpr int unrollFor(int inputs) { return inputs <= 2 ? 4 : (inputs <= 4 ? 2 : 1); }

template <typename Op>
cudaError_t launchElementwise(const Op& op, const Streams<Op::kIn, Op::kOut>& streams,
                              std::size_t n, const Launch& launch) {
  if (n == 0) return cudaGetLastError();
  constexpr int kUnroll = unrollFor(Op::kIn);
  const Split split = splitFor(streams, n);
  const unsigned blocks = blocksFor(std::max(split.n4, scalarCount(split)), launch);
  elementwiseKernel<Op, kUnroll><<<blocks, kThreads, 0, launch.stream>>>(op, streams, split);
  return cudaGetLastError();
}

// ---- element-wise ops: in[] are the values read, out[] the values written ----

struct FillOp {
  static constexpr int kIn = 0;
  static constexpr int kOut = 1;
  float value;
  __device__ __forceinline__ void operator()(const float*, float* out) const { out[0] = value; }
};

struct ScaleOp {
  static constexpr int kIn = 1;
  static constexpr int kOut = 1;
  float a;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    out[0] = a * in[0];
  }
};

// in = {x, y}, out = {y}
struct AxpbyOp {
  static constexpr int kIn = 2;
  static constexpr int kOut = 1;
  float a;
  float b;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    out[0] = a * in[0] + b * in[1];
  }
};

template <int K>
struct WeightedSumOp {
  static constexpr int kIn = K;
  static constexpr int kOut = 1;
  float weights[K];
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    float sum = weights[0] * in[0];
#pragma unroll
    for (int j = 1; j < K; ++j) sum += weights[j] * in[j];
    out[0] = sum;
  }
};

// in = out = {x, c}
struct ElasticPullOp {
  static constexpr int kIn = 2;
  static constexpr int kOut = 2;
  float a;
  float b;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    const float d = in[0] - in[1];
    out[0] = in[0] - a * d;
    out[1] = in[1] + b * d;
  }
};

// in = {w, g}, out = {w}
struct SgdOp {
  static constexpr int kIn = 2;
  static constexpr int kOut = 1;
  float lr;
  float weightDecay;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    const float g = in[1] + weightDecay * in[0];
    out[0] = in[0] - lr * g;
  }
};

// in = {w, g, v}, out = {w, v}
template <bool kNesterov>
struct MomentumOp {
  static constexpr int kIn = 3;
  static constexpr int kOut = 2;
  float lr;
  float momentum;
  float weightDecay;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    const float g = in[1] + weightDecay * in[0];
    const float v = momentum * in[2] + g;
    out[0] = in[0] - lr * (kNesterov ? g + momentum * v : v);
    out[1] = v;
  }
};

// in = {w, g, m, v}, out = {w, m, v}
struct AdamOp {
  static constexpr int kIn = 4;
  static constexpr int kOut = 3;
  float lr;
  float beta1;
  float beta2;
  float oneMinusBeta1;
  float oneMinusBeta2;
  float epsilon;
  float weightDecay;
  float inverseCorrection1;  // 1 / (1 - beta1^t)
  float inverseCorrection2;  // 1 / (1 - beta2^t)
  // Same operations in the same order as the CPU reference.
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    const float g = in[1] + weightDecay * in[0];
    const float m = beta1 * in[2] + oneMinusBeta1 * g;
    const float v = beta2 * in[3] + oneMinusBeta2 * g * g;
    const float numerator = lr * (m * inverseCorrection1);
    const float denominator = sqrtf(v * inverseCorrection2) + epsilon;
    out[0] = in[0] - numerator / denominator;
    out[1] = m;
    out[2] = v;
  }
};

// x > 0 ? x : 0, like the CPU reference (NaN and -0 become +0).
struct ReluOp {
  static constexpr int kIn = 1;
  static constexpr int kOut = 1;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    out[0] = in[0] > 0.0f ? in[0] : 0.0f;
  }
};

// in = {dy, y}, out = {dy}
struct ReluBackwardOp {
  static constexpr int kIn = 2;
  static constexpr int kOut = 1;
  __device__ __forceinline__ void operator()(const float* in, float* out) const {
    out[0] = in[1] > 0.0f ? in[0] : 0.0f;
  }
};

// Instantiates the weighted sum for exactly `inputs.count` terms (K = 1..16, fully unrolled).
template <int K>
cudaError_t weightedSumOf(float* out, const WeightedInputs& inputs, std::size_t n,
                          const Launch& launch) {
  if constexpr (K > kMaxWeightedInputs) {
    return cudaErrorInvalidValue;
  } else {
    if (inputs.count != K) return weightedSumOf<K + 1>(out, inputs, n, launch);
    WeightedSumOp<K> op{};
    Streams<K, 1> streams{};
    for (int j = 0; j < K; ++j) {
      op.weights[j] = inputs.weights[j];
      streams.in[j] = inputs.inputs[j];
    }
    streams.out[0] = out;
    return launchElementwise(op, streams, n, launch);
  }
}

// ---- reductions ----

__device__ __forceinline__ double dot4(const float4& a, const float4& b) {
  double sum = static_cast<double>(a.x) * static_cast<double>(b.x);
  sum = fma(static_cast<double>(a.y), static_cast<double>(b.y), sum);
  sum = fma(static_cast<double>(a.z), static_cast<double>(b.z), sum);
  sum = fma(static_cast<double>(a.w), static_cast<double>(b.w), sum);
  return sum;
}

// partials[blockIdx.x] = sum over this block's share of x[i] * y[i] (y = x when !kDot).
template <bool kDot, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    sumProductsKernel(const float* x, const float* y, Split split, double* partials) {
  const std::size_t stride = gridThreads();
  const std::size_t start = globalThread();
  double acc = 0.0;
  std::size_t i = start;
  for (; i + (kUnroll - 1) * stride < split.n4; i += kUnroll * stride) {
    float4 a[kUnroll];
    float4 b[kDot ? kUnroll : 1];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      a[u] = load4(x, split.head + 4 * (i + u * stride));
      if constexpr (kDot) b[u] = load4(y, split.head + 4 * (i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (kDot) {
        acc += dot4(a[u], b[u]);
      } else {
        acc += dot4(a[u], a[u]);
      }
    }
  }
  for (; i < split.n4; i += stride) {
    const float4 a = load4(x, split.head + 4 * i);
    acc += dot4(a, kDot ? load4(y, split.head + 4 * i) : a);
  }
  const std::size_t tailStart = split.head + 4 * split.n4;
  const std::size_t scalars = split.head + (split.n - tailStart);
  for (std::size_t j = start; j < scalars; j += stride) {
    const std::size_t e = j < split.head ? j : tailStart + (j - split.head);
    const double a = x[e];
    acc = fma(a, kDot ? static_cast<double>(y[e]) : a, acc);
  }
  const double total = blockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// *result = sum of partials[0 .. count), in a fixed order. One block of kThreads.
__global__ void __launch_bounds__(kThreads)
    finalizeSumKernel(const double* partials, int count, double* result) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double total = blockSum(acc);
  if (threadIdx.x == 0) *result = total;
}

template <bool kDot>
cudaError_t sumProducts(const float* x, const float* y, std::size_t n, Scratch* scratch,
                        const Launch& launch) {
  double* result = &scratch->results.value;
  if (n == 0) {
    if (const cudaError_t e = cudaMemsetAsync(result, 0, sizeof(double), launch.stream);
        e != cudaSuccess)
      return e;
    return cudaGetLastError();
  }
  constexpr int kUnroll = kDot ? 2 : 4;
  const Split split = kDot ? splitFor({x, y}, n) : splitFor({x}, n);
  const unsigned blocks =
      blocksFor(std::max(split.n4, scalarCount(split)), launch, kMaxReductionBlocks);
  sumProductsKernel<kDot, kUnroll>
      <<<blocks, kThreads, 0, launch.stream>>>(x, y, split, scratch->partials);
  finalizeSum(scratch->partials, static_cast<int>(blocks), result, launch.stream);
  return cudaGetLastError();
}

}  // namespace

void finalizeSum(const double* partials, int count, double* result, cudaStream_t stream) {
  finalizeSumKernel<<<1, kThreads, 0, stream>>>(partials, count, result);
}

// ---- launchers ----

cudaError_t checkKernelImage() {
  cudaFuncAttributes attributes{};
  const cudaError_t error = cudaFuncGetAttributes(&attributes, finalizeSumKernel);
  if (error != cudaSuccess) cudaGetLastError();  // not sticky; do not leave it for later calls
  return error;
}

cudaError_t fill(float* x, std::size_t n, float value, const Launch& launch) {
  Streams<0, 1> streams{};
  streams.out[0] = x;
  return launchElementwise(FillOp{value}, streams, n, launch);
}

cudaError_t scale(float* x, std::size_t n, float a, const Launch& launch) {
  return launchElementwise(ScaleOp{a}, Streams<1, 1>{{x}, {x}}, n, launch);
}

cudaError_t axpby(float* y, const float* x, std::size_t n, float a, float b, const Launch& launch) {
  return launchElementwise(AxpbyOp{a, b}, Streams<2, 1>{{x, y}, {y}}, n, launch);
}

cudaError_t weightedSum(float* out, const WeightedInputs& inputs, std::size_t n,
                        const Launch& launch) {
  return weightedSumOf<1>(out, inputs, n, launch);
}

cudaError_t elasticPull(float* x, float* center, std::size_t n, float a, float b,
                        const Launch& launch) {
  return launchElementwise(ElasticPullOp{a, b}, Streams<2, 2>{{x, center}, {x, center}}, n, launch);
}

cudaError_t sgdStep(float* w, const float* g, std::size_t n, float lr, float weightDecay,
                    const Launch& launch) {
  return launchElementwise(SgdOp{lr, weightDecay}, Streams<2, 1>{{w, g}, {w}}, n, launch);
}

cudaError_t momentumStep(float* w, const float* g, float* velocity, std::size_t n, float lr,
                         float momentum, bool nesterov, float weightDecay, const Launch& launch) {
  const Streams<3, 2> streams{{w, g, velocity}, {w, velocity}};
  if (nesterov) {
    return launchElementwise(MomentumOp<true>{lr, momentum, weightDecay}, streams, n, launch);
  }
  return launchElementwise(MomentumOp<false>{lr, momentum, weightDecay}, streams, n, launch);
}

cudaError_t adamStep(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                     float beta1, float beta2, float epsilon, float weightDecay,
                     float inverseCorrection1, float inverseCorrection2, const Launch& launch) {
  const AdamOp op{lr,
                  beta1,
                  beta2,
                  1.0f - beta1,
                  1.0f - beta2,
                  epsilon,
                  weightDecay,
                  inverseCorrection1,
                  inverseCorrection2};
  return launchElementwise(op, Streams<4, 3>{{w, g, m, v}, {w, m, v}}, n, launch);
}

cudaError_t dot(const float* x, const float* y, std::size_t n, Scratch* scratch,
                const Launch& launch) {
  return sumProducts<true>(x, y, n, scratch, launch);
}

cudaError_t sumOfSquares(const float* x, std::size_t n, Scratch* scratch, const Launch& launch) {
  return sumProducts<false>(x, nullptr, n, scratch, launch);
}

cudaError_t relu(float* x, std::size_t n, const Launch& launch) {
  return launchElementwise(ReluOp{}, Streams<1, 1>{{x}, {x}}, n, launch);
}

cudaError_t reluBackward(float* dy, const float* y, std::size_t n, const Launch& launch) {
  return launchElementwise(ReluBackwardOp{}, Streams<2, 1>{{dy, y}, {dy}}, n, launch);
}

}  // namespace gossamer::kernels::cuda::detail
