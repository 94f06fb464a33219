// The CPU reference backend. Every loop is written so that GCC -O3 vectorises it, and every loop
// that streams a parameter-sized buffer touches each byte once, so the element-wise ops and
// optimizer steps run at memory bandwidth on one thread. The streaming loops are free functions
// marked GOSSAMER_CPU_CLONES (dispatch.h): compiled for AVX-512, AVX2 and baseline x86-64 and
// chosen at load time, so one binary uses the vector units of whatever machine runs it.
#include "kernels/cpu/cpu_compute.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <cblas.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "kernels/compute_checks.h"
#include "kernels/cpu/cpu_codec.h"
#include "kernels/cpu/cpu_conv.h"
#include "kernels/cpu/dispatch.h"

namespace gossamer::kernels::cpu {
namespace {

// Allocations are cache-line aligned so that vector loads never split a line at the start of a
// buffer and two buffers never share a line.
constexpr std::size_t kAlignment = 64;

// weightedSum with more than 4 inputs works on blocks of this many floats (4 KiB): a block of the
// result is accumulated in a stack buffer that stays in L1 and is then stored to `out`. That
// keeps every input read once from memory and makes the op alias-safe (out may be one of the
// inputs) without one runtime alias check per input, which GCC stops emitting beyond ~10.
constexpr std::size_t kWeightedSumBlock = 1024;

// out = sum_j w[j] * x[j] for a fixed number of inputs, as one expression per element summed left
// to right (the same order as the blocked path, so every k rounds alike). Alias-safe: out[i] is
// written after every x[j][i] is read, and GCC's runtime alias check accepts the zero-distance
// overlap of out == x[j], so the aliased call runs the vector loop too. Measured at 16M-64M
// floats, this beats both a blocked copy and non-temporal stores for k = 2.
template <std::size_t K>
[[gnu::always_inline]] inline void weightedSumFixed(float* out,
                                                    std::span<const WeightedInput> inputs,
                                                    std::size_t n) {
  std::array<const float*, K> x;
  std::array<float, K> w;
  for (std::size_t j = 0; j < K; ++j) {
    x[j] = inputs[j].input.data();
    w[j] = inputs[j].weight;
  }
  for (std::size_t i = 0; i < n; ++i) {
    float sum = w[0] * x[0][i];
    for (std::size_t j = 1; j < K; ++j) sum += w[j] * x[j][i];
    out[i] = sum;
  }
}

// The same for any number of inputs: each block accumulates the inputs one after another.
[[gnu::always_inline]] inline void weightedSumBlocked(float* out,
                                                      std::span<const WeightedInput> inputs,
                                                      std::size_t n) {
  alignas(kAlignment) float block[kWeightedSumBlock];
  for (std::size_t begin = 0; begin < n; begin += kWeightedSumBlock) {
    const std::size_t count = std::min(kWeightedSumBlock, n - begin);
    const float* x0 = inputs[0].input.data() + begin;
    const float w0 = inputs[0].weight;
    for (std::size_t i = 0; i < count; ++i) block[i] = w0 * x0[i];
    for (std::size_t j = 1; j < inputs.size(); ++j) {
      const float* xj = inputs[j].input.data() + begin;
      const float wj = inputs[j].weight;
      for (std::size_t i = 0; i < count; ++i) block[i] += wj * xj[i];
    }
    std::memcpy(out + begin, block, count * sizeof(float));
  }
}

GOSSAMER_CPU_CLONES void weightedSumLoop(float* out, std::span<const WeightedInput> inputs,
                                         std::size_t n) {
  switch (inputs.size()) {
    case 1:
      return weightedSumFixed<1>(out, inputs, n);
    case 2:
      return weightedSumFixed<2>(out, inputs, n);
    case 3:
      return weightedSumFixed<3>(out, inputs, n);
    case 4:
      return weightedSumFixed<4>(out, inputs, n);
    default:
      return weightedSumBlocked(out, inputs, n);
  }
}

GOSSAMER_CPU_CLONES void scaleLoop(float* p, float a, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] *= a;
}

GOSSAMER_CPU_CLONES void axpbyLoop(float* py, float a, const float* px, float b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) py[i] = a * px[i] + b * py[i];
}

GOSSAMER_CPU_CLONES void elasticPullLoop(float* px, float* pc, float a, float b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float d = px[i] - pc[i];
    px[i] -= a * d;
    pc[i] += b * d;
  }
}

GOSSAMER_CPU_CLONES void sgdLoop(float* pw, const float* pg, float lr, float wd, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) pw[i] -= lr * (pg[i] + wd * pw[i]);
}

// Two loops rather than a branch per element, so each stays a straight vector loop.
GOSSAMER_CPU_CLONES void momentumLoop(float* pw, const float* pg, float* pv, float lr, float mu,
                                      float wd, bool nesterov, std::size_t n) {
  if (nesterov) {
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = pg[i] + wd * pw[i];
      const float v = mu * pv[i] + grad;
      pv[i] = v;
      pw[i] -= lr * (grad + mu * v);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = pg[i] + wd * pw[i];
      const float v = mu * pv[i] + grad;
      pv[i] = v;
      pw[i] -= lr * v;
    }
  }
}

GOSSAMER_CPU_CLONES void reluLoop(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

GOSSAMER_CPU_CLONES void reluBackwardLoop(float* pd, const float* py, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) pd[i] = py[i] > 0.0f ? pd[i] : 0.0f;
}

// Sum of x[i] * y[i] in double. Products of two floats are exact in double; eight independent
// accumulators keep the adds pipelined and let the compiler pack them into vector registers,
// while the fixed order keeps the result bit-reproducible.
GOSSAMER_CPU_CLONES double dotDouble(const float* x, const float* y, std::size_t n) {
  constexpr std::size_t kLanes = 8;
  std::array<double, kLanes> acc{};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      acc[l] += static_cast<double>(x[i + l]) * static_cast<double>(y[i + l]);
    }
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  double sum = 0.0;
  for (double a : acc) sum += a;
  return sum + tail;
}

// Rejects a label outside [0, classes), naming the first bad row, before any output is written.
void enforceLabels(std::span<const std::int32_t> labels, std::size_t classes) {
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const std::int32_t label = labels[r];
    if (label < 0 || static_cast<std::size_t>(label) >= classes) [[unlikely]] {
      checks::throwLabelOutOfRange(label, r, classes);
    }
  }
}

// Index of the first maximum of row[0, classes).
std::size_t argmaxRow(const float* row, std::size_t classes) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < classes; ++j) {
    if (row[j] > row[best]) best = j;
  }
  return best;
}

class CpuCompute final : public Compute {
 public:
  explicit CpuCompute(const Options& options) : blasThreads_(options.blasThreads) {}

  Device device() const override { return Device::kCpu; }
  void setMemoryMeter(MemoryMeter* meter) override { meter_ = meter; }
  MemoryMeter* memoryMeter() const override { return meter_; }

  std::string describe() const override {
    // openblas_get_config() is "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell ..."; the
    // version and the core kernel set chosen at run time are what matter when reading results.
    std::string config = openblas_get_config();
    std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
    return fmt::format("cpu ({} {}, {} thread{})", version, openblas_get_corename(), blasThreads_,
                       blasThreads_ == 1 ? "" : "s");
  }

  // ---- memory ----

  void* allocateBytes(std::size_t bytes) override {
    // aligned_alloc needs a multiple of the alignment; a zero-byte buffer still gets a unique,
    // freeable pointer so that empty Buffers behave like any other.
    const std::size_t rounded =
        std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    GOSSAMER_ENFORCE_GE(rounded, bytes, "allocateBytes: size overflows");
    void* pointer = std::aligned_alloc(kAlignment, rounded);
    if (pointer == nullptr)
      GOSSAMER_THROW("allocateBytes: out of host memory allocating {} bytes", bytes);
    return pointer;
  }

  void freeBytes(void* pointer) override { std::free(pointer); }

  void copyToDevice(void* deviceDst, const void* hostSrc, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(deviceDst, hostSrc, bytes);
  }

  void copyToHost(void* hostDst, const void* deviceSrc, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(hostDst, deviceSrc, bytes);
  }

  void synchronize() override {}

  // ---- element-wise BLAS-1 ----

  void copy(std::span<float> dst, std::span<const float> src) override {
    checks::copy(dst, src);
    // Plain memcpy on purpose: gossamer-bench uses this op as its memcpy baseline.
    if (!dst.empty() && dst.data() != src.data())
      std::memcpy(dst.data(), src.data(), src.size_bytes());
  }

  void fill(std::span<float> x, float value) override { std::fill(x.begin(), x.end(), value); }

  void scale(std::span<float> x, float a) override { scaleLoop(x.data(), a, x.size()); }

  void axpby(std::span<float> y, float a, std::span<const float> x, float b) override {
    checks::axpby(y, x);
    axpbyLoop(y.data(), a, x.data(), b, y.size());
  }

  void weightedSum(std::span<float> out, std::span<const WeightedInput> inputs) override {
    checks::weightedSum(out, inputs);
    weightedSumLoop(out.data(), inputs, out.size());
  }

  void elasticPull(std::span<float> x, std::span<float> center, float a, float b) override {
    checks::elasticPull(x, center);
    elasticPullLoop(x.data(), center.data(), a, b, x.size());
  }

  double dot(std::span<const float> x, std::span<const float> y) override {
    checks::dot(x, y);
    return dotDouble(x.data(), y.data(), x.size());
  }

  double norm2(std::span<const float> x) override {
    return std::sqrt(dotDouble(x.data(), x.data(), x.size()));
  }

  // ---- local optimizer steps ----

  void sgdStep(std::span<float> w, std::span<const float> g, const SgdHyper& h) override {
    checks::sgdStep(w, g);
    sgdLoop(w.data(), g.data(), h.lr, h.weightDecay, w.size());
  }

  void momentumStep(std::span<float> w, std::span<const float> g, std::span<float> velocity,
                    const MomentumHyper& h) override {
    checks::momentumStep(w, g, velocity);
    momentumLoop(w.data(), g.data(), velocity.data(), h.lr, h.momentum, h.weightDecay, h.nesterov,
                 w.size());
  }

  void adamStep(std::span<float> w, std::span<const float> g, std::span<float> m,
                std::span<float> v, std::int64_t step, const AdamHyper& h) override {
    checks::adamStep(w, g, m, v, step);
    // Bias corrections in double: 1 - beta^t loses all precision in float once beta^t ~ 1 - 1e-7.
    const double t = static_cast<double>(step);
    const float invCorrection1 =
        static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
    const float invCorrection2 =
        static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta2), t)));
    float* pw = w.data();
    const float* pg = g.data();
    float* pm = m.data();
    float* pv = v.data();
    const float lr = h.lr;
    const float b1 = h.beta1;
    const float b2 = h.beta2;
    const float eps = h.epsilon;
    const float wd = h.weightDecay;
    const std::size_t n = w.size();
    std::size_t i = 0;
#if defined(__SSE2__)
    // Spelled out in SSE because GCC does not vectorise std::sqrt while it may set errno
    // (-fmath-errno, the default). Same operations in the same order as the scalar tail below,
    // and sqrtps is correctly rounded like sqrtss, so every element gets the same result.
    const __m128 lr4 = _mm_set1_ps(lr), b14 = _mm_set1_ps(b1), b24 = _mm_set1_ps(b2);
    const __m128 oneMinusB14 = _mm_set1_ps(1.0f - b1), oneMinusB24 = _mm_set1_ps(1.0f - b2);
    const __m128 eps4 = _mm_set1_ps(eps), wd4 = _mm_set1_ps(wd);
    const __m128 ic14 = _mm_set1_ps(invCorrection1), ic24 = _mm_set1_ps(invCorrection2);
    for (; i + 4 <= n; i += 4) {
      const __m128 w4 = _mm_loadu_ps(pw + i);
      const __m128 grad = _mm_add_ps(_mm_loadu_ps(pg + i), _mm_mul_ps(wd4, w4));
      const __m128 mi =
          _mm_add_ps(_mm_mul_ps(b14, _mm_loadu_ps(pm + i)), _mm_mul_ps(oneMinusB14, grad));
      const __m128 vi = _mm_add_ps(_mm_mul_ps(b24, _mm_loadu_ps(pv + i)),
                                   _mm_mul_ps(_mm_mul_ps(oneMinusB24, grad), grad));
      _mm_storeu_ps(pm + i, mi);
      _mm_storeu_ps(pv + i, vi);
      const __m128 numerator = _mm_mul_ps(lr4, _mm_mul_ps(mi, ic14));
      const __m128 denominator = _mm_add_ps(_mm_sqrt_ps(_mm_mul_ps(vi, ic24)), eps4);
      _mm_storeu_ps(pw + i, _mm_sub_ps(w4, _mm_div_ps(numerator, denominator)));
    }
#endif
    for (; i < n; ++i) {
      const float grad = pg[i] + wd * pw[i];
      const float mi = b1 * pm[i] + (1.0f - b1) * grad;
      const float vi = b2 * pv[i] + (1.0f - b2) * grad * grad;
      pm[i] = mi;
      pv[i] = vi;
      pw[i] -= lr * (mi * invCorrection1) / (std::sqrt(vi * invCorrection2) + eps);
    }
  }

  // ---- compression (loops in cpu_codec.cc) ----

  std::size_t encode(const Codec& codec, std::span<const float> input, std::span<float> residual,
                     std::span<std::byte> out, std::uint64_t seed) override {
    checks::encode(codec, input, residual, out);
    return cpu::encode(codec, input, residual, out, seed, codecScratch_);
  }

  void decode(const Codec& codec, std::span<const std::byte> payload, std::span<float> out,
              DecodeMode mode) override {
    const std::size_t count = checks::decode(codec, payload, out);
    cpu::decode(codec, payload, count, out, mode);
  }

  // ---- dense algebra and NN ops ----

  void gemm(Transpose transA, Transpose transB, std::size_t m, std::size_t n, std::size_t k,
            float alpha, std::span<const float> a, std::span<const float> b, float beta,
            std::span<float> c) override {
    if (checks::gemm(*this, m, n, k, a, b, beta, c) == checks::GemmRest::kDone) return;
    // Every dimension fits in CBLAS's int: checks::gemm rejected larger ones.
    const bool ta = transA == Transpose::kYes;
    const bool tb = transB == Transpose::kYes;
    // Leading dimensions are the stored row lengths: A is m x k or (transposed) k x m.
    const int lda = static_cast<int>(ta ? m : k);
    const int ldb = static_cast<int>(tb ? k : n);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data(), lda,
                b.data(), ldb, beta, c.data(), static_cast<int>(n));
  }

  void biasAdd(std::span<float> y, std::span<const float> bias, std::size_t rows) override {
    checks::biasAdd(y, bias, rows);
    const std::size_t cols = bias.size();
    const float* pb = bias.data();
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = y.data() + r * cols;
      for (std::size_t j = 0; j < cols; ++j) row[j] += pb[j];
    }
  }

  void biasGrad(std::span<float> dbias, std::span<const float> dy, std::size_t rows) override {
    checks::biasGrad(dbias, dy, rows);
    const std::size_t cols = dbias.size();
    // Row after row, so the inner loop is a contiguous vector add over the columns.
    float* pd = dbias.data();
    std::fill(pd, pd + cols, 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = dy.data() + r * cols;
      for (std::size_t j = 0; j < cols; ++j) pd[j] += row[j];
    }
  }

  void relu(std::span<float> x) override { reluLoop(x.data(), x.size()); }

  void reluBackward(std::span<float> dy, std::span<const float> y) override {
    checks::reluBackward(dy, y);
    reluBackwardLoop(dy.data(), y.data(), dy.size());
  }

  double softmaxCrossEntropy(std::span<const float> logits, std::span<const std::int32_t> labels,
                             std::size_t classes, std::span<float> dlogits,
                             float gradScale) override {
    const std::size_t rows = checks::softmaxCrossEntropy(logits, labels, classes, dlogits);
    enforceLabels(labels, classes);
    const bool withGrad = !dlogits.empty();
    double loss = 0.0;
    for (std::size_t r = 0; r < rows; ++r) {
      const float* x = logits.data() + r * classes;
      const auto label = static_cast<std::size_t>(labels[r]);
      // log-sum-exp shifted by the row maximum: no exp overflows and the largest term is 1.
      const float max = *std::max_element(x, x + classes);
      const float target = x[label];
      double sum = 0.0;
      if (withGrad) {
        // dlogits may be logits itself: each x[j] is read once, before its slot is overwritten
        // with exp(x[j] - max); `max` and `target` were taken before any write.
        float* d = dlogits.data() + r * classes;
        for (std::size_t j = 0; j < classes; ++j) {
          const float e = std::exp(x[j] - max);
          d[j] = e;
          sum += e;
        }
        const float factor = static_cast<float>(static_cast<double>(gradScale) / sum);
        for (std::size_t j = 0; j < classes; ++j) d[j] *= factor;
        d[label] -= gradScale;
      } else {
        for (std::size_t j = 0; j < classes; ++j) sum += std::exp(x[j] - max);
      }
      loss += std::log(sum) + static_cast<double>(max) - static_cast<double>(target);
    }
    return loss;
  }

  void argmax(std::span<const float> x, std::size_t classes, std::span<std::int32_t> out) override {
    const std::size_t rows = checks::argmax(x, classes, out);
    for (std::size_t r = 0; r < rows; ++r) {
      out[r] = static_cast<std::int32_t>(argmaxRow(x.data() + r * classes, classes));
    }
  }

  std::size_t countCorrect(std::span<const float> logits, std::span<const std::int32_t> labels,
                           std::size_t classes) override {
    const std::size_t rows = checks::countCorrect(logits, labels, classes);
    std::size_t correct = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      // A label outside [0, classes) never matches, it is not an error here (evaluation only).
      const auto best = static_cast<std::int64_t>(argmaxRow(logits.data() + r * classes, classes));
      if (best == labels[r]) ++correct;
    }
    return correct;
  }

  // ---- convolutional layers: im2col + one sgemm over the whole batch (loops in cpu_conv.cc) ----

  void conv2d(const Conv2dShape& shape, std::span<const float> input, std::span<const float> weight,
              std::span<const float> bias, std::span<float> output,
              std::span<float> workspace) override {
    if (!checks::conv2d(shape, input, weight, bias, output, workspace)) return;
    const std::size_t patch = shape.patch(), cols = shape.columns();
    std::span<float> columns = workspace.first(patch * cols);
    std::span<float> product = workspace.subspan(patch * cols, shape.outChannels * cols);
    im2colLoop(shape, input.data(), columns.data(), paddedScratch(shape));
    // [outChannels x patch] * [patch x columns] = [outChannels x (batch, plane)]
    gemm(Transpose::kNo, Transpose::kNo, shape.outChannels, cols, patch, 1.0f, weight, columns,
         0.0f, product);
    channelMajorToNchw(product.data(), bias.empty() ? nullptr : bias.data(), output.data(),
                       shape.batch, shape.outChannels, shape.outPlane());
  }

  void conv2dBackwardData(const Conv2dShape& shape, std::span<const float> dOutput,
                          std::span<const float> weight, std::span<float> dInput,
                          std::span<float> workspace) override {
    if (!checks::conv2dBackwardData(shape, dOutput, weight, dInput, workspace)) return;
    const std::size_t patch = shape.patch(), cols = shape.columns();
    std::span<float> dColumns = workspace.first(patch * cols);
    std::span<float> dProduct = workspace.subspan(patch * cols, shape.outChannels * cols);
    nchwToChannelMajor(dOutput.data(), dProduct.data(), shape.batch, shape.outChannels,
                       shape.outPlane());
    // [patch x outChannels] * [outChannels x columns]
    gemm(Transpose::kYes, Transpose::kNo, patch, cols, shape.outChannels, 1.0f, weight, dProduct,
         0.0f, dColumns);
    col2imLoop(shape, dColumns.data(), dInput.data(), paddedScratch(shape));
  }

  void conv2dBackwardWeights(const Conv2dShape& shape, std::span<const float> input,
                             std::span<const float> dOutput, std::span<float> dWeight,
                             std::span<float> dBias, std::span<float> workspace) override {
    checks::conv2dBackwardWeights(shape, input, dOutput, dWeight, dBias, workspace);
    const std::size_t patch = shape.patch(), cols = shape.columns();
    std::span<float> columns = workspace.first(patch * cols);
    std::span<float> dProduct = workspace.subspan(patch * cols, shape.outChannels * cols);
    im2colLoop(shape, input.data(), columns.data(), paddedScratch(shape));
    nchwToChannelMajor(dOutput.data(), dProduct.data(), shape.batch, shape.outChannels,
                       shape.outPlane());
    // [outChannels x columns] * [columns x patch]; k = 0 (empty batch) zeroes dWeight.
    gemm(Transpose::kNo, Transpose::kYes, shape.outChannels, patch, cols, 1.0f, dProduct, columns,
         0.0f, dWeight);
    if (!dBias.empty()) rowSumsDouble(dProduct.data(), dBias.data(), shape.outChannels, cols);
  }

  void maxPool2d(const Pool2dShape& shape, std::span<const float> input, std::span<float> output,
                 std::span<std::int32_t> argmax) override {
    if (!checks::maxPool2d(shape, input, output, argmax)) return;
    maxPoolLoop(shape, input.data(), output.data(), argmax.data());
  }

  void maxPool2dBackward(const Pool2dShape& shape, std::span<const float> dOutput,
                         std::span<const std::int32_t> argmax, std::span<float> dInput) override {
    if (!checks::maxPool2dBackward(shape, dOutput, argmax, dInput)) return;
    maxPoolBackwardLoop(shape, dOutput.data(), argmax.data(), dInput.data());
  }

 private:
  // One zero-padded input plane for the convolution loops (grown on demand, kept).
  float* paddedScratch(const Conv2dShape& shape) {
    if (paddedScratch_.size() < paddedPlane(shape)) paddedScratch_.resize(paddedPlane(shape));
    return paddedScratch_.data();
  }

  int blasThreads_;
  MemoryMeter* meter_ = nullptr;
  CodecScratch codecScratch_;
  std::vector<float> paddedScratch_;
};

}  // namespace

std::unique_ptr<Compute> makeCompute(const Options& options) {
  GOSSAMER_ENFORCE_GE(options.blasThreads, 1, "cpu::makeCompute: blasThreads must be >= 1");
  // OpenBLAS keeps one process-wide thread count; the last Compute made sets it.
  openblas_set_num_threads(options.blasThreads);
  auto compute = std::make_unique<CpuCompute>(options);
  log::get("kernels")->debug("compute backend: {}", compute->describe());
  return compute;
}

}  // namespace gossamer::kernels::cpu
