// Device kernels of the CUDA backend behind a plain C++ launcher interface, defined in this
// folder's .cu files (the only ones nvcc compiles); cuda_compute.cc and cuda_compute_nn.cc (g++)
// do the shape checks, error reporting and scalar read-back, and call these launchers. This header must stay free of compute.h, spdlog
// and fmt, so nvcc never parses them.
//
// Common contract of every launcher:
// - Pointers are device pointers of the current device; `n`/`rows`/`cols` count elements.
//   Sizes were already checked by the caller; a size of 0 enqueues nothing (reductions still
//   write their result).
// - Work is enqueued on `launch.stream` and nothing blocks. The return value is
//   cudaGetLastError() after the launches: an invalid configuration, or a sticky error of an
//   earlier asynchronous failure on the device.
// - Element-wise kernels take a float4 path when every pointer has the same offset modulo 16
//   bytes (offset views into one buffer qualify) and a scalar path otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/conv_math.h"

namespace gossamer::kernels::cuda::detail {

// Where and how wide to launch: the stream of the owning Compute and its device's SM count,
// which sizes grid-stride grids to a whole number of resident waves.
struct Launch {
  cudaStream_t stream = nullptr;
  int multiprocessors = 1;
};

// Same bound as kernels::Compute::kMaxWeightedInputs (cuda_compute.cc static_asserts it).
inline constexpr int kMaxWeightedInputs = 16;
// Upper bound on the blocks of a reduction kernel, i.e. on its per-block partial sums.
inline constexpr int kMaxReductionBlocks = 1024;
// Scratch::results.badRow when every label of a softmaxCrossEntropy call was in range.
inline constexpr unsigned long long kNoBadRow = ~0ull;

// Up to 16 (input, weight) terms passed to the kernel by value, so k inputs cost one pass.
struct WeightedInputs {
  const float* inputs[kMaxWeightedInputs] = {};
  float weights[kMaxWeightedInputs] = {};
  int count = 0;
};

// Scalar outputs of the reductions, read back in one small copy.
struct ScratchResults {
  double value;               // dot, sum of squares or loss sum
  unsigned long long count;   // countCorrect
  unsigned long long badRow;  // smallest row with a label outside [0, classes), or kNoBadRow
};

// Device scratch owned by one Compute (one per stream: launches on different streams must not
// share it). `partials` holds per-block sums so reductions are deterministic run to run.
struct Scratch {
  ScratchResults results;
  double partials[kMaxReductionBlocks];
};

// cudaSuccess when the kernels of this library have an image for the current device;
// cudaErrorNoKernelImageForDevice (or similar) when it was built for other architectures.
cudaError_t checkKernelImage();

// ---- element-wise (x, y, out, ... all of length n) ----
cudaError_t fill(float* x, std::size_t n, float value, const Launch& launch);
cudaError_t scale(float* x, std::size_t n, float a, const Launch& launch);
// y = a * x + b * y
cudaError_t axpby(float* y, const float* x, std::size_t n, float a, float b, const Launch& launch);
// out = sum_i weights[i] * inputs[i], 1 <= count <= 16, in one pass; out may alias an input.
cudaError_t weightedSum(float* out, const WeightedInputs& inputs, std::size_t n,
                        const Launch& launch);
// d = x - c; x -= a * d; c += b * d
cudaError_t elasticPull(float* x, float* center, std::size_t n, float a, float b,
                        const Launch& launch);

// ---- optimizer steps (PyTorch semantics, weight decay added to the gradient) ----
cudaError_t sgdStep(float* w, const float* g, std::size_t n, float lr, float weightDecay,
                    const Launch& launch);
cudaError_t momentumStep(float* w, const float* g, float* velocity, std::size_t n, float lr,
                         float momentum, bool nesterov, float weightDecay, const Launch& launch);
// inverseCorrection1 = 1 / (1 - beta1^t), inverseCorrection2 = 1 / (1 - beta2^t), computed by the
// caller in double: w -= lr * (m * ic1) / (sqrt(v * ic2) + eps), as in the CPU reference.
cudaError_t adamStep(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                     float beta1, float beta2, float epsilon, float weightDecay,
                     float inverseCorrection1, float inverseCorrection2, const Launch& launch);

// ---- reductions in double into scratch->results.value (deterministic for a given n) ----
cudaError_t dot(const float* x, const float* y, std::size_t n, Scratch* scratch,
                const Launch& launch);
cudaError_t sumOfSquares(const float* x, std::size_t n, Scratch* scratch, const Launch& launch);

// ---- NN ops on row-major rows x cols matrices ----
// y[r, j] += bias[j]
cudaError_t biasAdd(float* y, const float* bias, std::size_t rows, std::size_t cols,
                    const Launch& launch);
// dbias[j] = sum_r dy[r, j] (overwrites; dbias is zeroed when rows == 0)
cudaError_t biasGrad(float* dbias, const float* dy, std::size_t rows, std::size_t cols,
                     const Launch& launch);
cudaError_t relu(float* x, std::size_t n, const Launch& launch);
// dy[i] = y[i] > 0 ? dy[i] : 0
cudaError_t reluBackward(float* dy, const float* y, std::size_t n, const Launch& launch);
// Loss sum into scratch->results.value, and into scratch->results.badRow the smallest row whose
// label is outside [0, classes) (kNoBadRow if none). When a label is bad nothing else is
// written (the value is then meaningless). When dlogits != nullptr writes
// (softmax - onehot) * gradScale; dlogits may alias logits (identical, not partially overlapping).
cudaError_t softmaxCrossEntropy(const float* logits, const std::int32_t* labels, std::size_t rows,
                                std::size_t classes, float* dlogits, float gradScale,
                                Scratch* scratch, const Launch& launch);
// out[r] = first index of the row maximum. classes in [1, INT32_MAX].
cudaError_t argmax(const float* x, std::size_t rows, std::size_t classes, std::int32_t* out,
                   const Launch& launch);
// Rows whose argmax equals the label, into scratch->results.count.
cudaError_t countCorrect(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, Scratch* scratch, const Launch& launch);

// ---- convolution and pooling (cuda_conv.cu; NCHW, geometry and the per-element math shared
// with the CPU reference in kernels/conv_math.h). Shapes were checked by the caller. ----

// columns (patch x batch*plane) = im2col(input), zero in the padding.
cudaError_t im2col(const Conv2dShape& shape, const float* input, float* columns,
                   const Launch& launch);
// dInput = col2im(dColumns): each input element gathers the entries that copied it.
cudaError_t col2im(const Conv2dShape& shape, const float* dColumns, float* dInput,
                   const Launch& launch);
// out[n][c][p] = in[c][n * plane + p] (+ bias[c] when bias is not null).
cudaError_t channelMajorToNchw(const float* in, const float* bias, float* out, std::size_t batch,
                               std::size_t channels, std::size_t plane, const Launch& launch);
// out[c][n * plane + p] = in[n][c][p].
cudaError_t nchwToChannelMajor(const float* in, float* out, std::size_t batch,
                               std::size_t channels, std::size_t plane, const Launch& launch);
// sums[c] = sum of row c of a channels x count matrix, in double (deterministic), rounded once.
cudaError_t rowSums(const float* rows, float* sums, std::size_t channels, std::size_t count,
                    const Launch& launch);
cudaError_t maxPool2d(const Pool2dShape& shape, const float* input, float* output,
                      std::int32_t* argmax, const Launch& launch);
cudaError_t maxPool2dBackward(const Pool2dShape& shape, const float* dOutput,
                              const std::int32_t* argmax, float* dInput, const Launch& launch);

// ---- codecs (cuda_codec.cu; layouts and numerics in kernels/codec.h, element-wise math shared
// with the CPU reference through kernels/codec_math.h). `residual` null means no error
// feedback; otherwise it is n long and becomes v - decode(payload), v = in + residual.
// `payload` is the encoded buffer (4-byte aligned); `blockSize` is the int8/int4 block. ----

// none: payload = n float32 (with feedback v, and the residual becomes 0).
cudaError_t encodeNone(const float* in, float* residual, float* payload, std::size_t n,
                       const Launch& launch);
// fp16 (bf16 == false) or bf16: payload = n uint16.
cudaError_t encodeHalf(bool bf16, const float* in, float* residual, std::uint16_t* payload,
                       std::size_t n, const Launch& launch);
cudaError_t decodeHalf(bool bf16, const std::uint16_t* payload, float* out, std::size_t n,
                       bool accumulate, const Launch& launch);
// int8 (int4 == false) or int4 (blockSize even): scales, then codes.
cudaError_t encodeBlocks(bool int4, const float* in, float* residual, void* payload, std::size_t n,
                         std::size_t blockSize, const Launch& launch);
cudaError_t decodeBlocks(bool int4, const void* payload, float* out, std::size_t n,
                         std::size_t blockSize, bool accumulate, const Launch& launch);
// Exact top-k (1 <= k <= n < 2^32): the full sparse payload (count k), found with device radix
// sorts over (magnitude, index) keys; stream-ordered temporary memory (cudaMallocAsync), no
// host synchronisation.
cudaError_t encodeTopKExact(const float* in, float* residual, void* payload, std::size_t n,
                            std::size_t k, const Launch& launch);
// Sampled top-k (1 <= k <= n < 2^32, 1 <= m <= n sampled positions, threshold rank r in
// [1, m]): the payload with its count c <= k in the first 4 bytes, the values and indices laid
// out for that c. Enqueued only; the caller reads c back.
cudaError_t encodeTopKSampled(const float* in, float* residual, void* payload, std::size_t n,
                              std::size_t k, std::size_t m, std::size_t rank, std::uint64_t seed,
                              const Launch& launch);
// Random-k (1 <= k <= n < 2^32): the full sparse payload (count k).
cudaError_t encodeRandK(const float* in, float* residual, void* payload, std::size_t n,
                        std::size_t k, std::uint64_t seed, const Launch& launch);
// Sparse payload of `count` values into out (n long): scattered over zeros, or added.
cudaError_t decodeSparse(const void* payload, std::size_t count, float* out, std::size_t n,
                         bool accumulate, const Launch& launch);

}  // namespace gossamer::kernels::cuda::detail
