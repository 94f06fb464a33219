// Conformance suite for kernels::Compute: one set of cases, instantiated per backend with
// TEST_CASE_TEMPLATE. Each case draws inputs from a seeded std::mt19937, computes a float64
// reference here, and compares with a bound relative to the magnitude of the terms, so a backend
// passes by being accurate, not by matching the CPU backend's rounding. Data reaches the backend
// only through allocate/upload/download, so the same code runs on device memory.
//
// Output buffers are filled with NaN before an op that overwrites them: a NaN left behind is an
// element the op forgot to write (a short grid, a missing tail), and never passes a bound.
//
// This is the one test file allowed to `#if` on the CUDA backend (GOSSAMER_HAVE_CUDA); every
// other file reaches the backends through kernels::Compute only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "kernels/codec.h"
#include "kernels/compute.h"
#include "kernels/cpu/cpu_compute.h"
#if GOSSAMER_HAVE_CUDA
#include "kernels/cuda/cuda_compute.h"
#endif

namespace gossamer::kernels {
namespace {

// ---- backends under test ----

// Backend tags: `make` returns the Compute to test, or null with the reason to skip.
struct CpuBackend {
  static constexpr const char* kName = "CPU";
  static constexpr Device kDevice = Device::kCpu;
  static std::unique_ptr<Compute> make(std::string* /*skipReason*/) { return cpu::makeCompute(); }
};

struct CudaBackend {
  static constexpr const char* kName = "CUDA";
  static constexpr Device kDevice = Device::kCuda;
  static std::unique_ptr<Compute> make(std::string* skipReason) {
#if GOSSAMER_HAVE_CUDA
    if (!cuda::isViable(skipReason)) return nullptr;
    return cuda::makeCompute();
#else
    *skipReason = "this build has no CUDA backend (GOSSAMER_WITH_CUDA=OFF or nvcc not found)";
    return nullptr;
#endif
  }
};

}  // namespace
}  // namespace gossamer::kernels

TYPE_TO_STRING_AS("CpuBackend", gossamer::kernels::CpuBackend);
TYPE_TO_STRING_AS("CudaBackend", gossamer::kernels::CudaBackend);

namespace gossamer::kernels {
namespace {

// The Compute of `Backend`, or null after telling the log why this case is skipped (a machine
// without a GPU passes the CUDA instance with a message, it does not fail it).
template <typename Backend>
std::unique_ptr<Compute> makeOrSkip() {
  std::string reason;
  std::unique_ptr<Compute> compute = Backend::make(&reason);
  if (compute == nullptr)
    MESSAGE("skipping " << std::string(Backend::kName) << " conformance: " << reason);
  return compute;
}

// Lengths that catch missing tails and off-by-one grids: one element, less than a vector, a
// round-ish size, and 2^16 + 1 (one past a power of two, so a partial last block of any width).
constexpr std::size_t kSizes[] = {1, 3, 1000, 65537};

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

using Host = std::vector<float>;
using Labels = std::vector<std::int32_t>;
using Reference = std::vector<double>;

Host randomVector(std::mt19937& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Host v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

float randomFloat(std::mt19937& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

template <typename T>
Buffer<T> toDevice(Compute& compute, const std::vector<T>& host) {
  Buffer<T> buffer = compute.allocate<T>(host.size());
  compute.upload<T>(buffer, host);
  return buffer;
}

template <typename T>
std::vector<T> toHost(Compute& compute, const Buffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  compute.download<T>(host, buffer);
  return host;
}

Buffer<float> nanBuffer(Compute& compute, std::size_t n) {
  return toDevice(compute, Host(n, kNan));
}

// Checks |got[i] - want[i]| <= bound[i] for every i and reports the worst element once, with
// its index and values (one failure per element would bury the log on 65537 elements). NaN in
// `got` always fails.
void checkNear(const Host& got, const Reference& want, const Reference& bound,
               const std::string& what) {
  REQUIRE(got.size() == want.size());
  REQUIRE(bound.size() == want.size());
  std::size_t failures = 0;
  std::size_t worst = 0;
  double worstRatio = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    const bool ok = error <= bound[i];  // false for NaN
    const double ratio =
        ok ? error / (bound[i] > 0.0 ? bound[i] : 1.0) : std::numeric_limits<double>::infinity();
    if (!ok) ++failures;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      worst = i;
    }
  }
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " of " << got.size()
                                    << " elements out of bounds; worst at " << worst << ": got "
                                    << got[worst] << ", want " << want[worst] << " +- "
                                    << bound[worst]);
}

// Bound rtol * (|want| + 1): relative for large values, absolute below 1.
Reference relativeBounds(const Reference& want, double rtol) {
  Reference bound(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) bound[i] = rtol * (std::abs(want[i]) + 1.0);
  return bound;
}

void checkRelative(const Host& got, const Reference& want, double rtol, const std::string& what) {
  checkNear(got, want, relativeBounds(want, rtol), what);
}

void checkEqual(const Host& got, const Host& want, const std::string& what) {
  Reference wantDouble(want.begin(), want.end());
  checkNear(got, wantDouble, Reference(want.size(), 0.0), what);
}

template <typename... Parts>
std::string label(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Element-wise ops are accurate to a few float roundings of the magnitudes involved.
constexpr double kElementwiseTolerance = 1e-5;

// ---- references ----

// C = alpha * op(A) * op(B) + beta * C in double, plus per-element bounds that grow with k and
// with the magnitude of the summed terms (float accumulation over k products).
void gemmReference(Transpose transA, Transpose transB, std::size_t m, std::size_t n, std::size_t k,
                   float alpha, const Host& a, const Host& b, float beta, const Host& c,
                   Reference* want, Reference* bound) {
  want->assign(m * n, 0.0);
  bound->assign(m * n, 0.0);
  const double tolerance = 2e-6 * static_cast<double>(k) + kElementwiseTolerance;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0.0;
      double magnitude = 0.0;
      for (std::size_t l = 0; l < k; ++l) {
        const double av = transA == Transpose::kYes ? a[l * m + i] : a[i * k + l];
        const double bv = transB == Transpose::kYes ? b[j * k + l] : b[l * n + j];
        sum += av * bv;
        magnitude += std::abs(av * bv);
      }
      const double cv = beta == 0.0f ? 0.0 : static_cast<double>(c[i * n + j]);
      (*want)[i * n + j] = alpha * sum + beta * cv;
      (*bound)[i * n + j] = tolerance * (std::abs(alpha) * magnitude + std::abs(beta * cv) + 1.0);
    }
  }
}

// Sum of per-row softmax cross-entropy losses and (softmax - onehot) * gradScale, in double.
double softmaxReference(const Host& logits, const Labels& labels, std::size_t classes,
                        float gradScale, Reference* grad, Reference* rowLoss) {
  const std::size_t rows = labels.size();
  grad->assign(rows * classes, 0.0);
  rowLoss->assign(rows, 0.0);
  double total = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* x = logits.data() + r * classes;
    const double max = *std::max_element(x, x + classes);
    double sum = 0.0;
    for (std::size_t j = 0; j < classes; ++j) sum += std::exp(x[j] - max);
    const auto target = static_cast<std::size_t>(labels[r]);
    (*rowLoss)[r] = std::log(sum) + max - x[target];
    total += (*rowLoss)[r];
    for (std::size_t j = 0; j < classes; ++j) {
      const double p = std::exp(x[j] - max) / sum;
      (*grad)[r * classes + j] = (p - (j == target ? 1.0 : 0.0)) * gradScale;
    }
  }
  return total;
}

std::int32_t argmaxReference(const float* row, std::size_t classes) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < classes; ++j) {
    if (row[j] > row[best]) best = j;
  }
  return static_cast<std::int32_t>(best);
}

// ---- identity and memory ----

TEST_CASE_TEMPLATE("kernels: device identity and upload/download round trip", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  CHECK(compute->device() == Backend::kDevice);
  CHECK_FALSE(compute->describe().empty());

  std::mt19937 rng(1);
  for (std::size_t n : kSizes) {
    const Host values = randomVector(rng, n, -1e6f, 1e6f);
    Buffer<float> buffer = toDevice(*compute, values);
    CHECK(buffer.size() == n);
    checkEqual(toHost(*compute, buffer), values, label("float round trip n=", n));

    Labels ints(n);
    for (std::size_t i = 0; i < n; ++i) ints[i] = static_cast<std::int32_t>(rng());
    Buffer<std::int32_t> intBuffer = toDevice(*compute, ints);
    CHECK(toHost(*compute, intBuffer) == ints);
  }
  compute->synchronize();
}

TEST_CASE_TEMPLATE("kernels: host staging memory and asynchronous copies to it", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(2);
  for (std::size_t n : kSizes) {
    const Host values = randomVector(rng, n);
    Buffer<float> source = toDevice(*compute, values);
    auto* staging = static_cast<float*>(compute->allocateHost(n * sizeof(float)));
    REQUIRE(staging != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(staging) % 16 == 0);
    std::promise<void> landed;
    compute->copyToHostAsync(staging, source.data(), n * sizeof(float),
                             [&landed] { landed.set_value(); });
    // The source is captured when the copy is enqueued: overwriting it at once is allowed.
    compute->fill(source, -7.0f);
    REQUIRE(landed.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    checkEqual(Host(staging, staging + n), values, label("async staging n=", n));
    compute->freeHost(staging);
  }
  compute->synchronize();
}

// ---- element-wise BLAS-1 ----

TEST_CASE_TEMPLATE("kernels: copy, fill and scale", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(2);
  for (std::size_t n : kSizes) {
    const Host x = randomVector(rng, n, -10.0f, 10.0f);
    Buffer<float> src = toDevice(*compute, x);
    Buffer<float> dst = nanBuffer(*compute, n);
    compute->copy(dst, src);
    checkEqual(toHost(*compute, dst), x, label("copy n=", n));

    Buffer<float> filled = nanBuffer(*compute, n);
    compute->fill(filled, 2.5f);
    checkEqual(toHost(*compute, filled), Host(n, 2.5f), label("fill n=", n));

    const float a = -1.7f;
    compute->scale(src, a);
    Reference want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<double>(a) * x[i];
    checkRelative(toHost(*compute, src), want, kElementwiseTolerance, label("scale n=", n));
  }
}

TEST_CASE_TEMPLATE("kernels: axpby", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(3);
  for (std::size_t n : kSizes) {
    const Host x = randomVector(rng, n);
    const Host y = randomVector(rng, n);
    const float a = randomFloat(rng, -2.0f, 2.0f);
    const float b = randomFloat(rng, -2.0f, 2.0f);
    Buffer<float> xd = toDevice(*compute, x);
    Buffer<float> yd = toDevice(*compute, y);
    compute->axpby(yd, a, xd, b);
    Reference want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<double>(a) * x[i] + b * y[i];
    checkRelative(toHost(*compute, yd), want, kElementwiseTolerance, label("axpby n=", n));
    checkEqual(toHost(*compute, xd), x, label("axpby leaves x alone n=", n));

    // x may be y itself: y = (a + b) * y.
    compute->axpby(xd, a, xd, b);
    for (std::size_t i = 0; i < n; ++i) want[i] = (static_cast<double>(a) + b) * x[i];
    checkRelative(toHost(*compute, xd), want, kElementwiseTolerance, label("axpby x==y n=", n));
  }
}

// Host data, device buffers and weights of a k-input weighted sum.
struct WeightedSumCase {
  std::vector<Host> inputs;
  std::vector<Buffer<float>> buffers;
  std::vector<float> weights;

  WeightedSumCase(Compute& compute, std::mt19937& rng, std::size_t k, std::size_t n) {
    for (std::size_t j = 0; j < k; ++j) {
      inputs.push_back(randomVector(rng, n));
      buffers.push_back(toDevice(compute, inputs.back()));
      weights.push_back(randomFloat(rng, -1.0f, 1.0f));
    }
  }

  std::vector<WeightedInput> terms() const {
    std::vector<WeightedInput> result;
    for (std::size_t j = 0; j < buffers.size(); ++j) result.push_back({weights[j], buffers[j]});
    return result;
  }

  // Reference sum and bounds relative to sum_j |w_j x_j| (cancellation does not loosen them).
  void reference(Reference* want, Reference* bound) const {
    const std::size_t n = inputs.front().size();
    want->assign(n, 0.0);
    bound->assign(n, 0.0);
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      for (std::size_t i = 0; i < n; ++i) {
        const double term = static_cast<double>(weights[j]) * inputs[j][i];
        (*want)[i] += term;
        (*bound)[i] += std::abs(term);
      }
    }
    for (double& b : *bound) b = kElementwiseTolerance * (b + 1.0);
  }
};

TEST_CASE_TEMPLATE("kernels: weightedSum for k = 1..kMaxWeightedInputs", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(4);
  for (std::size_t k = 1; k <= Compute::kMaxWeightedInputs; ++k) {
    for (std::size_t n : kSizes) {
      const WeightedSumCase sum(*compute, rng, k, n);
      Buffer<float> out = nanBuffer(*compute, n);
      const std::vector<WeightedInput> terms = sum.terms();
      compute->weightedSum(out, terms);
      Reference want, bound;
      sum.reference(&want, &bound);
      checkNear(toHost(*compute, out), want, bound, label("weightedSum k=", k, " n=", n));
      for (std::size_t j = 0; j < k; ++j) {
        checkEqual(toHost(*compute, sum.buffers[j]), sum.inputs[j],
                   label("weightedSum leaves input ", j, " alone"));
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: weightedSum with out aliasing an input", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(5);
  for (std::size_t k = 1; k <= Compute::kMaxWeightedInputs; ++k) {
    for (std::size_t n : {std::size_t{1000}, std::size_t{65537}}) {
      // out is the first, a middle, and the last input in turn.
      for (std::size_t alias : {std::size_t{0}, k / 2, k - 1}) {
        WeightedSumCase sum(*compute, rng, k, n);
        Reference want, bound;
        sum.reference(&want, &bound);
        const std::vector<WeightedInput> terms = sum.terms();
        compute->weightedSum(sum.buffers[alias], terms);
        checkNear(toHost(*compute, sum.buffers[alias]), want, bound,
                  label("weightedSum k=", k, " n=", n, " out=input ", alias));
      }
    }
  }

  // The same buffer may also appear as several inputs: w0 x + w1 x + w2 y, written to x.
  const std::size_t n = 65537;
  const Host x = randomVector(rng, n);
  const Host y = randomVector(rng, n);
  Buffer<float> xd = toDevice(*compute, x);
  Buffer<float> yd = toDevice(*compute, y);
  compute->weightedSum(xd, {{0.25f, xd}, {0.5f, xd}, {-2.0f, yd}});
  Reference want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = 0.75 * x[i] - 2.0 * y[i];
  checkRelative(toHost(*compute, xd), want, kElementwiseTolerance,
                "weightedSum with a repeated input");
}

TEST_CASE_TEMPLATE("kernels: elasticPull", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(6);
  for (std::size_t n : kSizes) {
    const Host x = randomVector(rng, n, -5.0f, 5.0f);
    const Host c = randomVector(rng, n, -5.0f, 5.0f);

    SUBCASE("a != b matches the update rule") {
      const float a = 0.3f;
      const float b = 0.05f;
      Buffer<float> xd = toDevice(*compute, x);
      Buffer<float> cd = toDevice(*compute, c);
      compute->elasticPull(xd, cd, a, b);
      Reference wantX(n), wantC(n);
      for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - c[i];
        wantX[i] = x[i] - a * d;
        wantC[i] = c[i] + b * d;
      }
      checkRelative(toHost(*compute, xd), wantX, kElementwiseTolerance, label("x n=", n));
      checkRelative(toHost(*compute, cd), wantC, kElementwiseTolerance, label("center n=", n));
    }

    SUBCASE("a == b conserves x + c") {
      // Closed form: what the worker gives up the center gains, so x + c is unchanged and both
      // move to x + a (c - x) and c + a (x - c).
      const float a = 0.4f;
      Buffer<float> xd = toDevice(*compute, x);
      Buffer<float> cd = toDevice(*compute, c);
      compute->elasticPull(xd, cd, a, a);
      const Host gotX = toHost(*compute, xd);
      const Host gotC = toHost(*compute, cd);
      Host gotSum(n);
      Reference wantSum(n), wantX(n);
      for (std::size_t i = 0; i < n; ++i) {
        gotSum[i] = gotX[i] + gotC[i];
        wantSum[i] = static_cast<double>(x[i]) + c[i];
        wantX[i] = x[i] + a * (static_cast<double>(c[i]) - x[i]);
      }
      checkRelative(gotSum, wantSum, kElementwiseTolerance, label("x + c n=", n));
      checkRelative(gotX, wantX, kElementwiseTolerance, label("x n=", n));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: dot and norm2 accumulate accurately", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(7);
  for (std::size_t n : kSizes) {
    const Host x = randomVector(rng, n);
    const Host y = randomVector(rng, n);
    Buffer<float> xd = toDevice(*compute, x);
    Buffer<float> yd = toDevice(*compute, y);
    double want = 0.0, magnitude = 0.0, squares = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      want += static_cast<double>(x[i]) * y[i];
      magnitude += std::abs(static_cast<double>(x[i]) * y[i]);
      squares += static_cast<double>(x[i]) * x[i];
    }
    // Bounds relative to sum |x_i y_i|: a float tree reduction stays well inside, a float
    // running sum over 65537 terms does not.
    CHECK_MESSAGE(std::abs(compute->dot(xd, yd) - want) <= 1e-6 * magnitude + 1e-12, "dot n=" << n);
    CHECK_MESSAGE(
        std::abs(compute->norm2(xd) - std::sqrt(squares)) <= 1e-6 * std::sqrt(squares) + 1e-12,
        "norm2 n=" << n);
  }

  // A million equal terms: a float running sum drifts by about 1e-4 of the total here, a double
  // accumulator is exact to 1e-10. This is what "accumulated in double" buys.
  const std::size_t n = (std::size_t{1} << 20) + 3;
  Buffer<float> tenths = toDevice(*compute, Host(n, 0.1f));
  Buffer<float> ones = toDevice(*compute, Host(n, 1.0f));
  const double want = static_cast<double>(n) * static_cast<double>(0.1f);
  CHECK_MESSAGE(std::abs(compute->dot(tenths, ones) - want) <= 1e-7 * want,
                "dot of 2^20 + 3 tenths: got " << compute->dot(tenths, ones) << ", want " << want);
  CHECK_MESSAGE(std::abs(compute->norm2(ones) - std::sqrt(static_cast<double>(n))) <=
                    1e-9 * std::sqrt(static_cast<double>(n)),
                "norm2 of 2^20 + 3 ones");
}

// ---- optimizer steps ----

TEST_CASE_TEMPLATE("kernels: sgdStep", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(8);
  for (float weightDecay : {0.0f, 0.01f}) {
    for (std::size_t n : kSizes) {
      const SgdHyper h{.lr = 0.1f, .weightDecay = weightDecay};
      const Host w = randomVector(rng, n);
      const Host g = randomVector(rng, n);
      Buffer<float> wd = toDevice(*compute, w);
      Buffer<float> gd = toDevice(*compute, g);
      compute->sgdStep(wd, gd, h);
      Reference want(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] =
            w[i] - static_cast<double>(h.lr) * (g[i] + static_cast<double>(weightDecay) * w[i]);
      }
      checkRelative(toHost(*compute, wd), want, kElementwiseTolerance,
                    label("sgd wd=", weightDecay, " n=", n));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: momentumStep, plain and Nesterov, over 3 steps", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(9);
  for (bool nesterov : {false, true}) {
    for (float weightDecay : {0.0f, 0.01f}) {
      for (std::size_t n : kSizes) {
        const MomentumHyper h{
            .lr = 0.05f, .momentum = 0.9f, .nesterov = nesterov, .weightDecay = weightDecay};
        Host w = randomVector(rng, n);
        const Host v = randomVector(rng, n, -0.1f, 0.1f);
        Buffer<float> wd = toDevice(*compute, w);
        Buffer<float> vd = toDevice(*compute, v);
        Reference wantW(w.begin(), w.end()), wantV(v.begin(), v.end());
        for (int step = 0; step < 3; ++step) {
          const Host g = randomVector(rng, n);
          Buffer<float> gd = toDevice(*compute, g);
          compute->momentumStep(wd, gd, vd, h);
          // PyTorch's SGD: g' = g + wd w; v = mu v + g'; w -= lr (nesterov ? g' + mu v : v).
          for (std::size_t i = 0; i < n; ++i) {
            const double grad = g[i] + static_cast<double>(weightDecay) * wantW[i];
            wantV[i] = static_cast<double>(h.momentum) * wantV[i] + grad;
            const double update =
                nesterov ? grad + static_cast<double>(h.momentum) * wantV[i] : wantV[i];
            wantW[i] -= static_cast<double>(h.lr) * update;
          }
        }
        const std::string what =
            label("momentum nesterov=", nesterov, " wd=", weightDecay, " n=", n);
        checkRelative(toHost(*compute, wd), wantW, kElementwiseTolerance, what + " w");
        checkRelative(toHost(*compute, vd), wantV, kElementwiseTolerance, what + " velocity");
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: adamStep over 3 steps", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(10);
  // The second setting has an epsilon comparable to sqrt(vhat), so its placement matters.
  const AdamHyper settings[] = {
      {.lr = 0.01f},
      {.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 0.1f, .weightDecay = 0.01f}};
  for (const AdamHyper& h : settings) {
    const float weightDecay = h.weightDecay;
    for (std::size_t n : kSizes) {
      const Host w = randomVector(rng, n);
      Buffer<float> wd = toDevice(*compute, w);
      Buffer<float> md = toDevice(*compute, Host(n, 0.0f));
      Buffer<float> vd = toDevice(*compute, Host(n, 0.0f));
      Reference wantW(w.begin(), w.end()), wantM(n, 0.0), wantV(n, 0.0);
      const double b1 = h.beta1, b2 = h.beta2;
      for (std::int64_t step = 1; step <= 3; ++step) {
        const Host g = randomVector(rng, n);
        Buffer<float> gd = toDevice(*compute, g);
        compute->adamStep(wd, gd, md, vd, step, h);
        const double correction1 = 1.0 - std::pow(b1, static_cast<double>(step));
        const double correction2 = 1.0 - std::pow(b2, static_cast<double>(step));
        for (std::size_t i = 0; i < n; ++i) {
          const double grad = g[i] + static_cast<double>(weightDecay) * wantW[i];
          wantM[i] = b1 * wantM[i] + (1.0 - b1) * grad;
          wantV[i] = b2 * wantV[i] + (1.0 - b2) * grad * grad;
          const double mHat = wantM[i] / correction1;
          const double vHat = wantV[i] / correction2;
          wantW[i] -= static_cast<double>(h.lr) * mHat / (std::sqrt(vHat) + h.epsilon);
        }
      }
      const std::string what = label("adam eps=", h.epsilon, " wd=", weightDecay, " n=", n);
      checkRelative(toHost(*compute, wd), wantW, kElementwiseTolerance, what + " w");
      checkRelative(toHost(*compute, md), wantM, kElementwiseTolerance, what + " m");
      // v is about 1e-3 g^2: a bound relative to |v| itself, not |v| + 1.
      Reference boundV(n);
      for (std::size_t i = 0; i < n; ++i) boundV[i] = kElementwiseTolerance * wantV[i] + 1e-12;
      checkNear(toHost(*compute, vd), wantV, boundV, what + " v");
    }
  }
}

// ---- dense algebra and NN ops ----

TEST_CASE_TEMPLATE("kernels: gemm with both transposes", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(11);
  struct Shape {
    std::size_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},   {3, 5, 7},    {2, 1, 9},     {1, 100, 1},
                          {33, 1, 17}, {17, 33, 65}, {64, 10, 784}, {100, 64, 32}};
  for (const Shape& s : shapes) {
    for (Transpose transA : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose transB : {Transpose::kNo, Transpose::kYes}) {
        // beta = 0 must overwrite C, NaN included; beta != 0 must read it.
        for (float beta : {0.0f, 0.5f}) {
          const float alpha = randomFloat(rng, -2.0f, 2.0f);
          const Host a = randomVector(rng, s.m * s.k);
          const Host b = randomVector(rng, s.k * s.n);
          const Host c = beta == 0.0f ? Host(s.m * s.n, kNan) : randomVector(rng, s.m * s.n);
          Buffer<float> ad = toDevice(*compute, a);
          Buffer<float> bd = toDevice(*compute, b);
          Buffer<float> cd = toDevice(*compute, c);
          compute->gemm(transA, transB, s.m, s.n, s.k, alpha, ad, bd, beta, cd);
          Reference want, bound;
          gemmReference(transA, transB, s.m, s.n, s.k, alpha, a, b, beta, c, &want, &bound);
          checkNear(
              toHost(*compute, cd), want, bound,
              label("gemm m=", s.m, " n=", s.n, " k=", s.k, " transA=", transA == Transpose::kYes,
                    " transB=", transB == Transpose::kYes, " beta=", beta));
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: biasAdd and biasGrad", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(12);
  for (std::size_t rows : {std::size_t{1}, std::size_t{3}, std::size_t{100}}) {
    for (std::size_t cols : {std::size_t{1}, std::size_t{3}, std::size_t{10}, std::size_t{1000}}) {
      const Host y = randomVector(rng, rows * cols);
      const Host bias = randomVector(rng, cols);
      Buffer<float> yd = toDevice(*compute, y);
      Buffer<float> biasd = toDevice(*compute, bias);
      compute->biasAdd(yd, biasd, rows);
      Reference want(rows * cols);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < cols; ++j) {
          want[r * cols + j] = static_cast<double>(y[r * cols + j]) + bias[j];
        }
      }
      const std::string shape = label(" rows=", rows, " cols=", cols);
      checkRelative(toHost(*compute, yd), want, kElementwiseTolerance, "biasAdd" + shape);

      const Host dy = randomVector(rng, rows * cols);
      Buffer<float> dyd = toDevice(*compute, dy);
      Buffer<float> dbias = nanBuffer(*compute, cols);
      compute->biasGrad(dbias, dyd, rows);
      Reference wantGrad(cols, 0.0), bound(cols, 0.0);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < cols; ++j) {
          wantGrad[j] += dy[r * cols + j];
          bound[j] += std::abs(dy[r * cols + j]);
        }
      }
      for (double& b : bound) b = kElementwiseTolerance * (b + 1.0);
      checkNear(toHost(*compute, dbias), wantGrad, bound, "biasGrad" + shape);
    }
  }
}

TEST_CASE_TEMPLATE("kernels: relu and reluBackward", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(13);
  for (std::size_t n : kSizes) {
    Host x = randomVector(rng, n);
    for (std::size_t i = 0; i < n; i += 7) x[i] = 0.0f;  // exact zeros are not "> 0"
    Buffer<float> xd = toDevice(*compute, x);
    compute->relu(xd);
    Host want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = x[i] > 0.0f ? x[i] : 0.0f;
    const Host y = toHost(*compute, xd);
    checkEqual(y, want, label("relu n=", n));

    const Host dy = randomVector(rng, n);
    Buffer<float> dyd = toDevice(*compute, dy);
    compute->reluBackward(dyd, xd);
    Host wantGrad(n);
    for (std::size_t i = 0; i < n; ++i) wantGrad[i] = want[i] > 0.0f ? dy[i] : 0.0f;
    checkEqual(toHost(*compute, dyd), wantGrad, label("reluBackward n=", n));
  }
}

// Random logits (rows x classes) with per-row offsets and labels uniform over the classes.
void softmaxInputs(std::mt19937& rng, std::size_t rows, std::size_t classes, float offset,
                   Host* logits, Labels* labels) {
  *logits = randomVector(rng, rows * classes, -5.0f, 5.0f);
  labels->resize(rows);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(classes) - 1);
  for (std::size_t r = 0; r < rows; ++r) {
    const float shift = randomFloat(rng, -offset, offset);
    for (std::size_t j = 0; j < classes; ++j) (*logits)[r * classes + j] += shift;
    (*labels)[r] = pick(rng);
  }
}

// Bounds for dlogits: values lie in [-|scale|, |scale|].
Reference gradBounds(const Reference& want, float gradScale) {
  Reference bound(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    bound[i] = kElementwiseTolerance * (std::abs(want[i]) + std::abs(gradScale));
  }
  return bound;
}

TEST_CASE_TEMPLATE("kernels: softmaxCrossEntropy loss and gradient", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(14);
  struct Shape {
    std::size_t rows, classes;
  };
  const Shape shapes[] = {{1, 1}, {1, 10}, {3, 10}, {100, 10}, {64, 1000}, {1000, 3}};
  for (const Shape& s : shapes) {
    Host logits;
    Labels labels;
    softmaxInputs(rng, s.rows, s.classes, 20.0f, &logits, &labels);
    const float gradScale = 1.0f / static_cast<float>(s.rows);
    Reference wantGrad, rowLoss;
    const double wantLoss =
        softmaxReference(logits, labels, s.classes, gradScale, &wantGrad, &rowLoss);
    double lossBound = 0.0;
    for (double l : rowLoss) lossBound += kElementwiseTolerance * (std::abs(l) + 1.0);
    const std::string shape = label(" rows=", s.rows, " classes=", s.classes);

    Buffer<float> logitsd = toDevice(*compute, logits);
    Buffer<std::int32_t> labelsd = toDevice(*compute, labels);

    SUBCASE("separate dlogits") {
      Buffer<float> dlogits = nanBuffer(*compute, logits.size());
      const double loss =
          compute->softmaxCrossEntropy(logitsd, labelsd, s.classes, dlogits, gradScale);
      CHECK_MESSAGE(std::abs(loss - wantLoss) <= lossBound,
                    "loss" << shape << ": got " << loss << ", want " << wantLoss);
      checkNear(toHost(*compute, dlogits), wantGrad, gradBounds(wantGrad, gradScale),
                "dlogits" + shape);
      checkEqual(toHost(*compute, logitsd), logits, "logits unchanged" + shape);
    }

    SUBCASE("dlogits aliasing logits") {
      const double loss =
          compute->softmaxCrossEntropy(logitsd, labelsd, s.classes, logitsd, gradScale);
      CHECK_MESSAGE(std::abs(loss - wantLoss) <= lossBound,
                    "loss" << shape << ": got " << loss << ", want " << wantLoss);
      checkNear(toHost(*compute, logitsd), wantGrad, gradBounds(wantGrad, gradScale),
                "dlogits in place" + shape);
    }

    SUBCASE("empty dlogits computes the loss only") {
      const double loss = compute->softmaxCrossEntropy(logitsd, labelsd, s.classes, {}, gradScale);
      CHECK_MESSAGE(std::abs(loss - wantLoss) <= lossBound,
                    "loss" << shape << ": got " << loss << ", want " << wantLoss);
      checkEqual(toHost(*compute, logitsd), logits, "logits unchanged" + shape);
    }
  }
}

TEST_CASE_TEMPLATE("kernels: softmaxCrossEntropy is stable for large logits", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(15);
  const std::size_t rows = 50;
  const std::size_t classes = 10;
  // Offsets up to +-1000: exp overflows float unless the row maximum is subtracted first.
  Host logits;
  Labels labels;
  softmaxInputs(rng, rows, classes, 1000.0f, &logits, &labels);
  Reference wantGrad, rowLoss;
  const double wantLoss = softmaxReference(logits, labels, classes, 1.0f, &wantGrad, &rowLoss);
  Buffer<float> logitsd = toDevice(*compute, logits);
  Buffer<std::int32_t> labelsd = toDevice(*compute, labels);
  Buffer<float> dlogits = nanBuffer(*compute, logits.size());
  const double loss = compute->softmaxCrossEntropy(logitsd, labelsd, classes, dlogits, 1.0f);
  REQUIRE(std::isfinite(loss));
  // Rounding the logits near 1000 costs up to 1000 * 2^-24 per row; beyond that it is exact.
  CHECK_MESSAGE(std::abs(loss - wantLoss) <= 1e-4 * static_cast<double>(rows),
                "got " << loss << ", want " << wantLoss);
  checkNear(toHost(*compute, dlogits), wantGrad, gradBounds(wantGrad, 1.0f), "dlogits");
}

TEST_CASE_TEMPLATE("kernels: softmaxCrossEntropy rejects a label outside 0..classes-1", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(16);
  const std::size_t rows = 5;
  const std::size_t classes = 10;
  Host logits;
  Labels labels;
  softmaxInputs(rng, rows, classes, 1.0f, &logits, &labels);
  Buffer<float> logitsd = toDevice(*compute, logits);
  Buffer<float> dlogits = nanBuffer(*compute, logits.size());
  for (std::int32_t bad : {-1, static_cast<std::int32_t>(classes), 1234567}) {
    Labels badLabels = labels;
    badLabels[3] = bad;
    Buffer<std::int32_t> labelsd = toDevice(*compute, badLabels);
    CHECK_THROWS_AS(compute->softmaxCrossEntropy(logitsd, labelsd, classes, dlogits, 1.0f),
                    gossamer::Error);
    CHECK_THROWS_AS(compute->softmaxCrossEntropy(logitsd, labelsd, classes, {}, 1.0f),
                    gossamer::Error);
  }
  // The message names the offending label, so a bad dataset is found from the log alone.
  Labels badLabels = labels;
  badLabels[3] = 1234567;
  Buffer<std::int32_t> labelsd = toDevice(*compute, badLabels);
  try {
    compute->softmaxCrossEntropy(logitsd, labelsd, classes, dlogits, 1.0f);
    FAIL("no exception for label 1234567");
  } catch (const gossamer::Error& error) {
    CHECK_MESSAGE(std::string(error.what()).find("1234567") != std::string::npos, error.what());
  }
}

TEST_CASE_TEMPLATE("kernels: argmax and countCorrect", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(17);

  SUBCASE("ties go to the first maximum") {
    const std::size_t classes = 4;
    const Host x = {1,  5,  3,  5,   // tie at 1 and 3
                    7,  7,  7,  7,   // all equal
                    -2, -1, -1, -3,  // tie among negatives
                    0,  0,  0,  9};
    Buffer<float> xd = toDevice(*compute, x);
    Buffer<std::int32_t> out = toDevice(*compute, Labels(4, -7));
    compute->argmax(xd, classes, out);
    CHECK(toHost(*compute, out) == Labels{1, 0, 1, 3});
    CHECK(compute->countCorrect(xd, toDevice(*compute, Labels{1, 0, 2, 3}), classes) == 3);
    CHECK(compute->countCorrect(xd, toDevice(*compute, Labels{3, 3, 2, 0}), classes) == 0);
  }

  SUBCASE("random rows") {
    for (std::size_t classes :
         {std::size_t{1}, std::size_t{3}, std::size_t{10}, std::size_t{1000}}) {
      for (std::size_t rows : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
        const Host x = randomVector(rng, rows * classes);
        Labels want(rows), labels(rows);
        std::size_t wantCorrect = 0;
        for (std::size_t r = 0; r < rows; ++r) {
          want[r] = argmaxReference(x.data() + r * classes, classes);
          // Every third row labelled right, the others wrong whenever there is a wrong class.
          const bool right = r % 3 == 0 || classes == 1;
          labels[r] = right ? want[r] : (want[r] + 1) % static_cast<std::int32_t>(classes);
          if (right) ++wantCorrect;
        }
        Buffer<float> xd = toDevice(*compute, x);
        Buffer<std::int32_t> out = toDevice(*compute, Labels(rows, -7));
        compute->argmax(xd, classes, out);
        CHECK_MESSAGE(toHost(*compute, out) == want,
                      "argmax rows=" << rows << " classes=" << classes);
        CHECK_MESSAGE(compute->countCorrect(xd, toDevice(*compute, labels), classes) == wantCorrect,
                      "countCorrect rows=" << rows << " classes=" << classes);
      }
    }
  }
}

// ---- compression (codec.h) ----

using Bytes = std::vector<std::byte>;

// Every codec, with the block sizes and fractions that reach their corner cases: int8 with an
// odd block (blocks not on a 4-byte boundary), sparse codecs with k well above 1.
const char* const kCodecs[] = {
    "none",   "fp16",      "bf16",     "int8:256",          "int8:7",     "int4:256",
    "int4:6", "topk:0.01", "topk:0.3", "topk:0.05:sampled", "randk:0.01", "randk:0.3"};

// One encode on `compute`: the payload (the bytes encode used) and, with feedback, the residual.
struct Encoded {
  Bytes payload;
  Host residual;
};

Encoded encodeOn(Compute& compute, const Codec& codec, const Host& input, const Host* residual,
                 std::uint64_t seed) {
  Buffer<float> in = toDevice(compute, input);
  Buffer<float> res =
      residual != nullptr ? toDevice(compute, *residual) : compute.allocate<float>(0);
  // Filled with 0xa5 so a byte encode forgot to write shows up in the agreement test.
  Buffer<std::byte> out =
      toDevice(compute, Bytes(encodedBytes(codec, input.size()), std::byte{0xa5}));
  const std::size_t used = compute.encode(codec, in, res, out, seed);
  REQUIRE(used <= out.size());
  Encoded result;
  result.payload = toHost(compute, out);
  result.payload.resize(used);
  if (residual != nullptr) result.residual = toHost(compute, res);
  return result;
}

Host decodeOn(Compute& compute, const Codec& codec, const Bytes& payload, Host initial,
              DecodeMode mode) {
  Buffer<std::byte> in = toDevice(compute, payload);
  Buffer<float> out = toDevice(compute, initial);
  compute.decode(codec, in, out, mode);
  return toHost(compute, out);
}

Host decodeFresh(Compute& compute, const Codec& codec, const Bytes& payload, std::size_t n) {
  return decodeOn(compute, codec, payload, Host(n, kNan), DecodeMode::kOverwrite);
}

// The sparse payload's fields.
struct Sparse {
  std::vector<float> values;
  std::vector<std::uint32_t> indices;
};

Sparse sparseFields(const Bytes& payload) {
  REQUIRE(payload.size() >= 4);
  std::uint32_t count = 0;
  std::memcpy(&count, payload.data(), 4);
  REQUIRE(payload.size() == 4 + 8 * std::size_t{count});
  Sparse sparse{std::vector<float>(count), std::vector<std::uint32_t>(count)};
  std::memcpy(sparse.values.data(), payload.data() + 4, 4 * std::size_t{count});
  std::memcpy(sparse.indices.data(), payload.data() + 4 + 4 * std::size_t{count},
              4 * std::size_t{count});
  return sparse;
}

// x rounded to nearest even at p significant bits, with subnormals below 2^emin and +-inf from
// `overflow` up: the float64 reference of fp16 (11, -14, 65520) and bf16 (8, -126, ...).
double roundReference(double x, int p, int emin, double overflow) {
  if (std::isnan(x) || x == 0.0) return x;
  const double a = std::abs(x);
  if (a >= overflow) return std::copysign(std::numeric_limits<double>::infinity(), x);
  const int e = std::max(std::ilogb(a), emin);
  const double quantum = std::ldexp(1.0, e - (p - 1));
  return std::copysign(std::nearbyint(a / quantum) * quantum, x);
}
const double kHalfOverflow = 65520.0;                                     // (2 - 2^-11) 2^15
const double kBf16Overflow = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);  // (2 - 2^-8) 2^127

// Inputs spanning many binades (sign, exponent in [lo, hi], random mantissa).
Host spreadVector(std::mt19937& rng, std::size_t n, int lo, int hi) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(lo, hi);
  Host v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return v;
}

TEST_CASE_TEMPLATE("kernels: fp16 and bf16 round to nearest even (float64 reference)", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(40);
  const float inf = std::numeric_limits<float>::infinity();
  for (const bool bf16 : {false, true}) {
    const Codec codec = parseCodec(bf16 ? "bf16" : "fp16");
    const int p = bf16 ? 8 : 11;
    const int emin = bf16 ? -126 : -14;
    const double overflow = bf16 ? kBf16Overflow : kHalfOverflow;
    for (std::size_t n : kSizes) {
      // The normal range of the format, where the relative bound holds.
      Host x = spreadVector(rng, n, bf16 ? -100 : -14, bf16 ? 100 : 14);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      REQUIRE(encoded.payload.size() == 2 * n);
      const Host got = decodeFresh(*compute, codec, encoded.payload, n);
      Reference want(n);
      Reference bound(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] = roundReference(x[i], p, emin, overflow);
        bound[i] = std::ldexp(std::abs(static_cast<double>(x[i])), bf16 ? -8 : -11);
      }
      checkNear(got, want, Reference(n, 0.0), label(formatCodec(codec), " rounding n=", n));
      Reference exact(x.begin(), x.end());
      checkNear(got, exact, bound, label(formatCodec(codec), " relative bound n=", n));
    }
    // Corner cases: ties to even, subnormals, overflow, the largest finite values, inf, NaN.
    const Host corners = bf16 ? Host{1.0f + 0x1p-8f,
                                     1.0f + 3 * 0x1p-8f,
                                     -(1.0f + 0x1p-8f),
                                     0x1p-130f,
                                     std::numeric_limits<float>::max(),
                                     0x1.fep127f,
                                     -inf,
                                     inf,
                                     0.0f,
                                     -0.0f}
                              : Host{1.0f + 0x1p-11f,
                                     1.0f + 3 * 0x1p-11f,
                                     0x1p-24f,
                                     0x1p-25f,
                                     3 * 0x1p-26f,
                                     0x1p-14f,
                                     65504.0f,
                                     65519.0f,
                                     65520.0f,
                                     -1e6f,
                                     1e-30f,
                                     inf,
                                     0.0f,
                                     -0.0f};
    const Encoded encoded = encodeOn(*compute, codec, corners, nullptr, 0);
    const Host got = decodeFresh(*compute, codec, encoded.payload, corners.size());
    for (std::size_t i = 0; i < corners.size(); ++i) {
      const double want = roundReference(corners[i], p, emin, overflow);
      CHECK_MESSAGE(static_cast<double>(got[i]) == want,
                    formatCodec(codec) << " of " << corners[i] << ": got " << got[i]);
      CHECK(std::signbit(got[i]) == std::signbit(corners[i]));
    }
    const Host nan{kNan, -kNan};
    const Host gotNan =
        decodeFresh(*compute, codec, encodeOn(*compute, codec, nan, nullptr, 0).payload, 2);
    CHECK(std::isnan(gotNan[0]));
    CHECK(std::isnan(gotNan[1]));
  }
}

TEST_CASE_TEMPLATE("kernels: int8 and int4 are within half a step of their block's scale", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(41);
  for (const char* text : {"int8:256", "int8:64", "int8:7", "int4:256", "int4:64", "int4:6"}) {
    const Codec codec = parseCodec(text);
    const bool int4 = codec.kind == CodecKind::kInt4;
    const float maxCode = int4 ? 7.0f : 127.0f;
    for (std::size_t n : kSizes) {
      // Each block at its own magnitude (10^-3 .. 10^3), and one block of zeros.
      Host x = randomVector(rng, n);
      const std::size_t blocks = scaleCount(codec, n);
      for (std::size_t b = 0; b < blocks; ++b) {
        const float magnitude = std::pow(10.0f, randomFloat(rng, -3.0f, 3.0f));
        const std::size_t end = std::min(n, (b + 1) * codec.blockSize);
        for (std::size_t i = b * codec.blockSize; i < end; ++i) {
          x[i] = b == 1 ? 0.0f : x[i] * magnitude;
        }
      }
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      REQUIRE(encoded.payload.size() == encodedBytes(codec, n));
      const Host got = decodeFresh(*compute, codec, encoded.payload, n);
      Reference want(x.begin(), x.end());
      Reference bound(n);
      std::size_t badScales = 0;
      for (std::size_t b = 0; b < blocks; ++b) {
        const std::size_t begin = b * codec.blockSize;
        const std::size_t end = std::min(n, begin + codec.blockSize);
        float absmax = 0.0f;
        for (std::size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::abs(x[i]));
        const float scale = absmax / maxCode;
        float sent = 0.0f;
        std::memcpy(&sent, encoded.payload.data() + 4 * b, 4);
        if (sent != scale) ++badScales;
        // Half a step, plus the two float32 roundings (x / scale and code * scale).
        for (std::size_t i = begin; i < end; ++i) bound[i] = scale / 2.0 * (1.0 + 0x1p-15);
      }
      CHECK_MESSAGE(badScales == 0, text << " n=" << n << ": scales other than absmax/" << maxCode);
      checkNear(got, want, bound, label(text, " n=", n));
      if (int4 && n % 2 != 0) {
        CHECK((encoded.payload.back() & std::byte{0xf0}) == std::byte{0});  // padding nibble
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: int8 and int4 keep a non-finite block to itself", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  for (const char* text : {"int8:4", "int4:4"}) {
    const Codec codec = parseCodec(text);
    Host x{1.0f, -2.0f, 3.0f, 0.5f, kNan, 1.0f, 2.0f, 3.0f, std::numeric_limits<float>::infinity(),
           1.0f, -1.0f, 0.0f};
    Host residual(x.size(), 0.0f);
    const Encoded encoded = encodeOn(*compute, codec, x, &residual, 0);
    const Host got = decodeFresh(*compute, codec, encoded.payload, x.size());
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(got[i] - x[i]) <= 3.0f / 7.0f);
    for (std::size_t i = 4; i < 12; ++i) CHECK_MESSAGE(std::isnan(got[i]), text << " " << i);
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::isfinite(encoded.residual[i]));
    CHECK_THROWS_WITH_AS(checkEncoded(codec, encoded.payload, x.size()),
                         doctest::Contains("not finite"), gossamer::Error);
  }
}

// Input with distinct magnitudes (a shuffled ramp) and random signs.
Host distinctMagnitudes(std::mt19937& rng, std::size_t n) {
  Host x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1) * 0.001f;
  std::shuffle(x.begin(), x.end(), rng);
  for (float& v : x) v = rng() % 2 ? v : -v;
  return x;
}

TEST_CASE_TEMPLATE("kernels: exact top-k keeps exactly the k largest magnitudes", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(42);
  for (const char* text : {"topk:0.01", "topk:0.3", "topk:1"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = distinctMagnitudes(rng, n);
      const std::size_t k = sparseCount(codec, n);
      std::vector<std::uint32_t> order(n);
      for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
      std::sort(order.begin(), order.end(),
                [&](std::uint32_t a, std::uint32_t b) { return std::abs(x[a]) > std::abs(x[b]); });
      std::vector<std::uint32_t> want(order.begin(), order.begin() + static_cast<long>(k));
      std::sort(want.begin(), want.end());

      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      const Sparse sparse = sparseFields(encoded.payload);
      CHECK_MESSAGE(sparse.indices == want, text << " n=" << n);
      for (std::size_t j = 0; j < sparse.indices.size(); ++j) {
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
      }
      Host dense(n, 0.0f);
      for (std::uint32_t i : want) dense[i] = x[i];
      checkEqual(decodeFresh(*compute, codec, encoded.payload, n), dense, label(text, " n=", n));
    }
  }
  // Equal magnitudes: the lower index wins.
  const Codec codec = parseCodec("topk:0.25");
  const Host same{1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, 0.5f};
  const Sparse sparse = sparseFields(encodeOn(*compute, codec, same, nullptr, 0).payload);
  CHECK(sparse.indices == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE_TEMPLATE("kernels: sampled top-k keeps the first elements above a sampled threshold",
                   Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(43);
  for (const char* text : {"topk:0.05:sampled", "topk:0.3:sampled"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = distinctMagnitudes(rng, n);
      const std::size_t k = sparseCount(codec, n);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 5);
      const Sparse sparse = sparseFields(encoded.payload);
      const std::size_t c = sparse.indices.size();
      REQUIRE(c >= 1);
      REQUIRE(c <= k);
      float smallestKept = std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < c; ++j) {
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
        if (j > 0) CHECK(sparse.indices[j] > sparse.indices[j - 1]);
        smallestKept = std::min(smallestKept, std::abs(sparse.values[j]));
      }
      // Every element skipped before the last kept one (all of them when c < k) is smaller.
      const std::size_t scanned = c < k ? n : sparse.indices.back() + 1;
      std::size_t j = 0;
      std::size_t larger = 0;
      for (std::size_t i = 0; i < scanned; ++i) {
        if (j < c && sparse.indices[j] == i) {
          ++j;
        } else if (std::abs(x[i]) >= smallestKept) {
          ++larger;
        }
      }
      CHECK_MESSAGE(larger == 0, text << " n=" << n);
      // The sample's estimate lands near k for a large n.
      if (n == 65537) CHECK_MESSAGE(c * 2 >= k, text << ": c=" << c << " k=" << k);
      // Deterministic under the seed.
      CHECK(encodeOn(*compute, codec, x, nullptr, 5).payload == encoded.payload);
    }
  }
}

TEST_CASE_TEMPLATE("kernels: random-k sends k distinct seeded positions", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(44);
  for (const char* text : {"randk:0.01", "randk:0.3", "randk:1"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = randomVector(rng, n);
      const std::size_t k = sparseCount(codec, n);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 11);
      const Sparse sparse = sparseFields(encoded.payload);
      REQUIRE(sparse.indices.size() == k);
      for (std::size_t j = 0; j < k; ++j) {
        REQUIRE(sparse.indices[j] < n);
        if (j > 0) CHECK(sparse.indices[j] > sparse.indices[j - 1]);
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
      }
      CHECK(encodeOn(*compute, codec, x, nullptr, 11).payload == encoded.payload);
      if (n >= 1000 && k < n) {
        CHECK_MESSAGE(sparseFields(encodeOn(*compute, codec, x, nullptr, 12).payload).indices !=
                          sparse.indices,
                      text << " n=" << n << ": seeds 11 and 12 drew the same set");
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: error feedback conserves mass", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(45);
  constexpr int kRounds = 5;
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    // The quantizers get arbitrary floats; the codecs that send values as they are get dyadic
    // inputs (multiples of 2^-10 below 4), whose sums over the rounds are exact in float32, so
    // their mass is conserved exactly.
    const bool exactValues = codec.kind == CodecKind::kNone || isSparse(codec.kind);
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
      Host residual(n, 0.0f);
      Reference inputs(n, 0.0);
      Reference sent(n, 0.0);
      Reference bound(n, 0.0);
      std::size_t inexact = 0;
      for (int round = 0; round < kRounds; ++round) {
        Host x = randomVector(rng, n, -4.0f, 4.0f);
        if (exactValues) {
          for (float& v : x) v = std::round(v * 1024.0f) / 1024.0f;
        }
        const Encoded encoded = encodeOn(*compute, codec, x, &residual, 100 + round);
        const Host decoded = decodeFresh(*compute, codec, encoded.payload, n);
        for (std::size_t i = 0; i < n; ++i) {
          // decode + residual' is exactly fl(input + residual), each round.
          const float v = x[i] + residual[i];
          if (static_cast<double>(decoded[i]) + encoded.residual[i] != static_cast<double>(v)) {
            ++inexact;
          }
          inputs[i] += x[i];
          sent[i] += decoded[i];
          // One float32 rounding of input + residual per element per round.
          bound[i] += exactValues
                          ? 0.0
                          : 0x1p-24 * (std::abs(x[i]) + std::abs(residual[i])) * (1.0 + 0x1p-23);
        }
        residual = encoded.residual;
      }
      CHECK_MESSAGE(inexact == 0, text << " n=" << n << ": " << inexact
                                       << " elements where decode + residual != input + residual");
      Reference got(n);
      for (std::size_t i = 0; i < n; ++i) got[i] = sent[i] + residual[i];
      std::size_t failures = 0;
      for (std::size_t i = 0; i < n; ++i) failures += std::abs(got[i] - inputs[i]) > bound[i];
      CHECK_MESSAGE(failures == 0,
                    text << " n=" << n << ": mass not conserved at " << failures << " elements");
    }
  }
}

TEST_CASE_TEMPLATE("kernels: decode kAccumulate adds the decoded payload", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(46);
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = randomVector(rng, n);
      const Host previous = randomVector(rng, n);
      const Bytes payload = encodeOn(*compute, codec, x, nullptr, 3).payload;
      const Host decoded = decodeFresh(*compute, codec, payload, n);
      Host want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = previous[i] + decoded[i];
      checkEqual(decodeOn(*compute, codec, payload, previous, DecodeMode::kAccumulate), want,
                 label(text, " accumulate n=", n));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: every codec agrees with the CPU reference bit for bit", Backend,
                   CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const std::unique_ptr<Compute> reference = cpu::makeCompute();
  std::mt19937 rng(47);
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = spreadVector(rng, n, -20, 10);
      const Host residual = randomVector(rng, n, -1e-3f, 1e-3f);
      for (const bool feedback : {false, true}) {
        const Encoded want = encodeOn(*reference, codec, x, feedback ? &residual : nullptr, 9);
        const Encoded got = encodeOn(*compute, codec, x, feedback ? &residual : nullptr, 9);
        CHECK_MESSAGE(got.payload == want.payload,
                      text << " n=" << n << " feedback=" << feedback << ": payloads differ");
        if (feedback) checkEqual(got.residual, want.residual, label(text, " residual n=", n));
        checkEqual(decodeFresh(*compute, codec, want.payload, n),
                   decodeFresh(*reference, codec, want.payload, n), label(text, " decode n=", n));
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: codecs on empty input", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    const Host none;
    const Encoded encoded = encodeOn(*compute, codec, none, &none, 1);
    CHECK(encoded.payload.size() == (isSparse(codec.kind) ? 4u : 0u));
    CHECK_NOTHROW(checkEncoded(codec, encoded.payload, 0));
    CHECK(decodeOn(*compute, codec, encoded.payload, {}, DecodeMode::kAccumulate).empty());
  }
}

TEST_CASE_TEMPLATE("kernels: codec misuse throws gossamer::Error", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Codec int8 = parseCodec("int8:4");
  const Codec topk = parseCodec("topk:0.25");
  Buffer<float> x = toDevice(*compute, Host(8, 1.0f));
  Buffer<float> residual = toDevice(*compute, Host(8, 0.0f));
  Buffer<float> shorter = toDevice(*compute, Host(7, 0.0f));
  Buffer<std::byte> out8 = compute->allocate<std::byte>(encodedBytes(int8, 8) + 4);
  const std::span<std::byte> exact8 = out8.span().first(encodedBytes(int8, 8));
  CHECK_NOTHROW(compute->encode(int8, x, residual, exact8, 0));
  CHECK_THROWS_AS(compute->encode(int8, x, shorter, exact8, 0), gossamer::Error);
  CHECK_THROWS_AS(compute->encode(int8, x, residual, out8, 0), gossamer::Error);
  CHECK_THROWS_AS(compute->encode(int8, x, residual, out8.span().subspan(1, exact8.size()), 0),
                  gossamer::Error);
  CHECK_THROWS_AS(compute->encode(parseCodec("int8:4"), x, x, exact8, 0), gossamer::Error);
  Codec bad = topk;
  bad.fraction = 0.0;
  CHECK_THROWS_AS(compute->encode(bad, x, residual, exact8, 0), gossamer::Error);

  CHECK_NOTHROW(compute->decode(int8, exact8, x, DecodeMode::kOverwrite));
  CHECK_THROWS_AS(compute->decode(int8, exact8, shorter, DecodeMode::kOverwrite), gossamer::Error);
  CHECK_THROWS_AS(compute->decode(int8, out8, x, DecodeMode::kOverwrite), gossamer::Error);
  Buffer<std::byte> sparse = compute->allocate<std::byte>(encodedBytes(topk, 8) + 8);
  CHECK_NOTHROW(compute->encode(topk, x, {}, sparse.span().first(encodedBytes(topk, 8)), 0));
  // 8 elements at 0.25 are 2 values: 20 bytes; 28 bytes would be 3, 19 is no count at all.
  CHECK_NOTHROW(compute->decode(topk, sparse.span().first(20), x, DecodeMode::kAccumulate));
  CHECK_THROWS_AS(compute->decode(topk, sparse.span().first(28), x, DecodeMode::kAccumulate),
                  gossamer::Error);
  CHECK_THROWS_AS(compute->decode(topk, sparse.span().first(19), x, DecodeMode::kAccumulate),
                  gossamer::Error);
}

// ---- misuse ----

// ---- convolution and pooling (float64 references straight from the definitions) ----

// Index of input element (n, c, h, w) of an NCHW tensor.
std::size_t nchw(std::size_t n, std::size_t c, std::size_t h, std::size_t w, std::size_t channels,
                 std::size_t height, std::size_t width) {
  return ((n * channels + c) * height + h) * width + w;
}

// Calls f(n, oc, oh, ow, c, kh, kw, inputIndex) for every product of the convolution that
// reads an input element (the padding contributes nothing).
template <typename F>
void forEachConvTerm(const Conv2dShape& s, F&& f) {
  for (std::size_t n = 0; n < s.batch; ++n)
    for (std::size_t oc = 0; oc < s.outChannels; ++oc)
      for (std::size_t oh = 0; oh < s.outHeight(); ++oh)
        for (std::size_t ow = 0; ow < s.outWidth(); ++ow)
          for (std::size_t c = 0; c < s.inChannels; ++c)
            for (std::size_t kh = 0; kh < s.kernelHeight; ++kh)
              for (std::size_t kw = 0; kw < s.kernelWidth; ++kw) {
                const auto ih = static_cast<std::int64_t>(oh * s.strideHeight + kh) -
                                static_cast<std::int64_t>(s.padHeight);
                const auto iw = static_cast<std::int64_t>(ow * s.strideWidth + kw) -
                                static_cast<std::int64_t>(s.padWidth);
                if (ih < 0 || iw < 0 || ih >= static_cast<std::int64_t>(s.height) ||
                    iw >= static_cast<std::int64_t>(s.width))
                  continue;
                f(n, oc, oh, ow, c, kh, kw,
                  nchw(n, c, static_cast<std::size_t>(ih), static_cast<std::size_t>(iw),
                       s.inChannels, s.height, s.width));
              }
}

// Float accumulation over `terms` products: the bound grows with the number of terms and with
// their summed magnitude, as for gemm.
double sumTolerance(std::size_t terms) {
  return 2e-6 * static_cast<double>(terms) + kElementwiseTolerance;
}

// Geometries that exercise padding (including outputs that see only padding), strides in each
// direction, a kernel as large as the input, 1x1 kernels, and a LeNet-like layer.
const Conv2dShape kConvShapes[] = {
    {.batch = 1, .inChannels = 1, .height = 1, .width = 1, .outChannels = 1, .kernelHeight = 1,
     .kernelWidth = 1},
    {.batch = 2, .inChannels = 3, .height = 5, .width = 7, .outChannels = 4, .kernelHeight = 3,
     .kernelWidth = 3, .padHeight = 1, .padWidth = 1},
    {.batch = 3, .inChannels = 2, .height = 8, .width = 6, .outChannels = 5, .kernelHeight = 3,
     .kernelWidth = 2, .strideHeight = 2, .strideWidth = 1, .padHeight = 0, .padWidth = 1},
    {.batch = 1, .inChannels = 4, .height = 9, .width = 9, .outChannels = 3, .kernelHeight = 5,
     .kernelWidth = 5, .strideHeight = 2, .strideWidth = 2, .padHeight = 2, .padWidth = 2},
    {.batch = 2, .inChannels = 3, .height = 4, .width = 4, .outChannels = 2, .kernelHeight = 4,
     .kernelWidth = 4},
    {.batch = 1, .inChannels = 2, .height = 7, .width = 5, .outChannels = 2, .kernelHeight = 1,
     .kernelWidth = 1, .strideHeight = 3, .strideWidth = 2},
    {.batch = 1, .inChannels = 1, .height = 5, .width = 4, .outChannels = 2, .kernelHeight = 3,
     .kernelWidth = 3, .strideHeight = 2, .strideWidth = 3, .padHeight = 3, .padWidth = 3},
    {.batch = 2, .inChannels = 1, .height = 28, .width = 28, .outChannels = 6, .kernelHeight = 5,
     .kernelWidth = 5, .padHeight = 2, .padWidth = 2},
    {.batch = 3, .inChannels = 8, .height = 14, .width = 14, .outChannels = 16, .kernelHeight = 3,
     .kernelWidth = 3, .padHeight = 1, .padWidth = 1},
};

std::string convLabel(const char* op, const Conv2dShape& s) {
  return label(op, " ", s.batch, "x", s.inChannels, "x", s.height, "x", s.width, " -> ",
               s.outChannels, " k", s.kernelHeight, "x", s.kernelWidth, " s", s.strideHeight, "x",
               s.strideWidth, " p", s.padHeight, "x", s.padWidth);
}

TEST_CASE_TEMPLATE("kernels: conv2d forward, with and without bias", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(21);
  for (const Conv2dShape& s : kConvShapes) {
    for (bool withBias : {true, false}) {
      const Host input = randomVector(rng, s.inputSize());
      const Host weight = randomVector(rng, s.weightSize());
      const Host bias = withBias ? randomVector(rng, s.outChannels) : Host();
      Buffer<float> inputd = toDevice(*compute, input);
      Buffer<float> weightd = toDevice(*compute, weight);
      Buffer<float> biasd = toDevice(*compute, bias);
      Buffer<float> outputd = nanBuffer(*compute, s.outputSize());
      Buffer<float> workspace = nanBuffer(*compute, s.workspaceSize());
      compute->conv2d(s, inputd, weightd, biasd, outputd, workspace);

      Reference want(s.outputSize(), 0.0), magnitude(s.outputSize(), 0.0);
      forEachConvTerm(s, [&](std::size_t n, std::size_t oc, std::size_t oh, std::size_t ow,
                             std::size_t c, std::size_t kh, std::size_t kw, std::size_t in) {
        const std::size_t o = nchw(n, oc, oh, ow, s.outChannels, s.outHeight(), s.outWidth());
        const double term = static_cast<double>(input[in]) *
                            weight[((oc * s.inChannels + c) * s.kernelHeight + kh) *
                                       s.kernelWidth +
                                   kw];
        want[o] += term;
        magnitude[o] += std::abs(term);
      });
      Reference bound(s.outputSize());
      const std::size_t plane = s.outPlane();
      for (std::size_t o = 0; o < want.size(); ++o) {
        const double b = withBias ? bias[(o / plane) % s.outChannels] : 0.0;
        want[o] += b;
        bound[o] = sumTolerance(s.patch()) * (magnitude[o] + std::abs(b) + 1.0);
      }
      checkNear(toHost(*compute, outputd), want, bound,
                convLabel(withBias ? "conv2d+bias" : "conv2d", s));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: conv2d backward data and weights", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(22);
  for (const Conv2dShape& s : kConvShapes) {
    const Host input = randomVector(rng, s.inputSize());
    const Host weight = randomVector(rng, s.weightSize());
    const Host dOutput = randomVector(rng, s.outputSize());
    Buffer<float> inputd = toDevice(*compute, input);
    Buffer<float> weightd = toDevice(*compute, weight);
    Buffer<float> dOutputd = toDevice(*compute, dOutput);
    Buffer<float> workspace = nanBuffer(*compute, s.workspaceSize());
    Buffer<float> dInputd = nanBuffer(*compute, s.inputSize());
    Buffer<float> dWeightd = nanBuffer(*compute, s.weightSize());
    Buffer<float> dBiasd = nanBuffer(*compute, s.outChannels);
    compute->conv2dBackwardData(s, dOutputd, weightd, dInputd, workspace);
    compute->conv2dBackwardWeights(s, inputd, dOutputd, dWeightd, dBiasd, workspace);

    // Every product of the forward pass, differentiated: d(in * w) = dOut * w and dOut * in.
    Reference dInput(s.inputSize(), 0.0), dInputMagnitude(s.inputSize(), 0.0);
    Reference dWeight(s.weightSize(), 0.0), dWeightMagnitude(s.weightSize(), 0.0);
    forEachConvTerm(s, [&](std::size_t n, std::size_t oc, std::size_t oh, std::size_t ow,
                           std::size_t c, std::size_t kh, std::size_t kw, std::size_t in) {
      const double g = dOutput[nchw(n, oc, oh, ow, s.outChannels, s.outHeight(), s.outWidth())];
      const std::size_t wi = ((oc * s.inChannels + c) * s.kernelHeight + kh) * s.kernelWidth + kw;
      dInput[in] += g * weight[wi];
      dInputMagnitude[in] += std::abs(g * weight[wi]);
      dWeight[wi] += g * input[in];
      dWeightMagnitude[wi] += std::abs(g * input[in]);
    });
    Reference dBias(s.outChannels, 0.0), dBiasMagnitude(s.outChannels, 0.0);
    for (std::size_t o = 0; o < s.outputSize(); ++o) {
      const std::size_t oc = (o / s.outPlane()) % s.outChannels;
      dBias[oc] += dOutput[o];
      dBiasMagnitude[oc] += std::abs(dOutput[o]);
    }
    auto bounds = [](const Reference& magnitude, std::size_t terms) {
      Reference bound(magnitude.size());
      for (std::size_t i = 0; i < bound.size(); ++i) {
        bound[i] = sumTolerance(terms) * (magnitude[i] + 1.0);
      }
      return bound;
    };
    const std::size_t dataTerms = s.outChannels * s.kernelHeight * s.kernelWidth;
    checkNear(toHost(*compute, dInputd), dInput, bounds(dInputMagnitude, dataTerms),
              convLabel("conv2dBackwardData", s));
    checkNear(toHost(*compute, dWeightd), dWeight, bounds(dWeightMagnitude, s.columns()),
              convLabel("conv2dBackwardWeights dWeight", s));
    // dBias is summed in double: one rounding.
    checkNear(toHost(*compute, dBiasd), dBias, bounds(dBiasMagnitude, 0),
              convLabel("conv2dBackwardWeights dBias", s));

    // Without dBias the weights are the same.
    Buffer<float> dWeight2 = nanBuffer(*compute, s.weightSize());
    compute->conv2dBackwardWeights(s, inputd, dOutputd, dWeight2, {}, workspace);
    checkNear(toHost(*compute, dWeight2), dWeight, bounds(dWeightMagnitude, s.columns()),
              convLabel("conv2dBackwardWeights without dBias", s));
  }
}

TEST_CASE_TEMPLATE("kernels: conv2d on an empty batch", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Conv2dShape s{.batch = 0, .inChannels = 2, .height = 4, .width = 4, .outChannels = 3,
                      .kernelHeight = 3, .kernelWidth = 3, .padHeight = 1, .padWidth = 1};
  Buffer<float> empty = compute->allocate<float>(0);
  Buffer<float> weight = toDevice(*compute, Host(s.weightSize(), 1.0f));
  compute->conv2d(s, empty, weight, {}, empty, empty);
  compute->conv2dBackwardData(s, empty, weight, empty, empty);
  // No samples: zero gradients, written.
  Buffer<float> dWeight = nanBuffer(*compute, s.weightSize());
  Buffer<float> dBias = nanBuffer(*compute, s.outChannels);
  compute->conv2dBackwardWeights(s, empty, empty, dWeight, dBias, empty);
  checkEqual(toHost(*compute, dWeight), Host(s.weightSize(), 0.0f), "dWeight of no samples");
  checkEqual(toHost(*compute, dBias), Host(s.outChannels, 0.0f), "dBias of no samples");
}

const Pool2dShape kPoolShapes[] = {
    {.batch = 1, .channels = 1, .height = 2, .width = 2, .window = 2, .stride = 2},
    {.batch = 2, .channels = 3, .height = 8, .width = 8, .window = 2, .stride = 2},
    {.batch = 1, .channels = 2, .height = 7, .width = 5, .window = 2, .stride = 2},
    {.batch = 2, .channels = 2, .height = 7, .width = 9, .window = 3, .stride = 2},
    {.batch = 1, .channels = 1, .height = 6, .width = 6, .window = 3, .stride = 1},
    {.batch = 2, .channels = 2, .height = 8, .width = 7, .window = 3, .stride = 3},
    {.batch = 3, .channels = 4, .height = 28, .width = 28, .window = 2, .stride = 2},
};

std::string poolLabel(const char* op, const Pool2dShape& s) {
  return label(op, " ", s.batch, "x", s.channels, "x", s.height, "x", s.width, " window ",
               s.window, " stride ", s.stride);
}

// Reference max pooling: the first maximum of each window in row-major order.
void poolReference(const Pool2dShape& s, const Host& input, Host* output, Labels* argmax) {
  output->assign(s.outputSize(), 0.0f);
  argmax->assign(s.outputSize(), -1);
  for (std::size_t q = 0; q < s.batch * s.channels; ++q) {
    for (std::size_t oh = 0; oh < s.outHeight(); ++oh) {
      for (std::size_t ow = 0; ow < s.outWidth(); ++ow) {
        std::size_t best = oh * s.stride * s.width + ow * s.stride;
        for (std::size_t dh = 0; dh < s.window; ++dh) {
          for (std::size_t dw = 0; dw < s.window; ++dw) {
            const std::size_t at = (oh * s.stride + dh) * s.width + ow * s.stride + dw;
            if (input[q * s.inPlane() + at] > input[q * s.inPlane() + best]) best = at;
          }
        }
        const std::size_t o = q * s.outPlane() + oh * s.outWidth() + ow;
        (*output)[o] = input[q * s.inPlane() + best];
        (*argmax)[o] = static_cast<std::int32_t>(best);
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: maxPool2d and its backward", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(23);
  for (const Pool2dShape& s : kPoolShapes) {
    for (bool ties : {false, true}) {
      Host input = randomVector(rng, s.inputSize());
      // Ties: values from {-1, 0, 1}, so most windows hold several maxima; the first one wins.
      if (ties) {
        for (float& x : input) x = std::round(x);
      }
      Buffer<float> inputd = toDevice(*compute, input);
      Buffer<float> outputd = nanBuffer(*compute, s.outputSize());
      Buffer<std::int32_t> argmaxd = toDevice(*compute, Labels(s.outputSize(), -7));
      compute->maxPool2d(s, inputd, outputd, argmaxd);
      Host wantOutput;
      Labels wantArgmax;
      poolReference(s, input, &wantOutput, &wantArgmax);
      const std::string what = poolLabel(ties ? "maxPool2d (ties)" : "maxPool2d", s);
      checkEqual(toHost(*compute, outputd), wantOutput, what);
      CHECK_MESSAGE(toHost(*compute, argmaxd) == wantArgmax, what << ": argmax");

      const Host dOutput = randomVector(rng, s.outputSize());
      Buffer<float> dOutputd = toDevice(*compute, dOutput);
      Buffer<float> dInputd = nanBuffer(*compute, s.inputSize());
      compute->maxPool2dBackward(s, dOutputd, argmaxd, dInputd);
      Reference want(s.inputSize(), 0.0), magnitude(s.inputSize(), 0.0);
      for (std::size_t o = 0; o < s.outputSize(); ++o) {
        const std::size_t q = o / s.outPlane();
        const std::size_t at = q * s.inPlane() + static_cast<std::size_t>(wantArgmax[o]);
        want[at] += dOutput[o];
        magnitude[at] += std::abs(dOutput[o]);
      }
      Reference bound(want.size());
      for (std::size_t i = 0; i < bound.size(); ++i) {
        bound[i] = sumTolerance(s.window * s.window) * (magnitude[i] + 1.0);
      }
      checkNear(toHost(*compute, dInputd), want, bound,
                poolLabel(ties ? "maxPool2dBackward (ties)" : "maxPool2dBackward", s));
    }
  }
}

// The message of the gossamer::Error that `f` throws ("" when it throws none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const gossamer::Error& error) {
    return error.what();
  }
  return "";
}

TEST_CASE_TEMPLATE("kernels: convolution and pooling shape errors name the op and the shape",
                   Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Conv2dShape s{.batch = 2, .inChannels = 3, .height = 8, .width = 8, .outChannels = 4,
                      .kernelHeight = 3, .kernelWidth = 3, .padHeight = 1, .padWidth = 1};
  const std::string shape = "2x3x8x8 -> 4 channels, kernel 3x3, stride 1x1, pad 1x1";
  Buffer<float> input = toDevice(*compute, Host(s.inputSize(), 1.0f));
  Buffer<float> shortInput = toDevice(*compute, Host(s.inputSize() - 1, 1.0f));
  Buffer<float> weight = toDevice(*compute, Host(s.weightSize(), 1.0f));
  Buffer<float> bias = toDevice(*compute, Host(s.outChannels, 0.0f));
  Buffer<float> badBias = toDevice(*compute, Host(s.outChannels + 1, 0.0f));
  Buffer<float> output = toDevice(*compute, Host(s.outputSize(), 0.0f));
  Buffer<float> workspace = toDevice(*compute, Host(s.workspaceSize(), 0.0f));
  Buffer<float> smallWorkspace = toDevice(*compute, Host(s.workspaceSize() - 1, 0.0f));

  CHECK_NOTHROW(compute->conv2d(s, input, weight, bias, output, workspace));
  std::string message = errorOf([&] { compute->conv2d(s, shortInput, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": input") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, weight, badBias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": bias") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, weight, bias, output, smallWorkspace); });
  CHECK_MESSAGE(message.find("workspace") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, bias, bias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": weight") != std::string::npos, message);
  // The output may not alias an input.
  Buffer<float> same = toDevice(*compute, Host(s.inputSize(), 1.0f));
  const Conv2dShape keep{.batch = 2, .inChannels = 3, .height = 8, .width = 8, .outChannels = 3,
                         .kernelHeight = 3, .kernelWidth = 3, .padHeight = 1, .padWidth = 1};
  Buffer<float> keepWeight = toDevice(*compute, Host(keep.weightSize(), 1.0f));
  Buffer<float> keepWorkspace = toDevice(*compute, Host(keep.workspaceSize(), 0.0f));
  message = errorOf([&] { compute->conv2d(keep, same, keepWeight, {}, same, keepWorkspace); });
  CHECK_MESSAGE(message.find("output must not overlap input") != std::string::npos, message);
  // A kernel larger than the padded input, and a zero stride.
  Conv2dShape tooLarge = s;
  tooLarge.kernelHeight = 11;
  message = errorOf([&] { compute->conv2d(tooLarge, input, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("kernel 11x3") != std::string::npos, message);
  CHECK_MESSAGE(message.find("larger than the padded input") != std::string::npos, message);
  Conv2dShape zeroStride = s;
  zeroStride.strideWidth = 0;
  message = errorOf([&] { compute->conv2d(zeroStride, input, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("strides must be positive") != std::string::npos, message);

  message = errorOf([&] { compute->conv2dBackwardData(s, output, weight, shortInput, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardData " + shape + ": dInput") != std::string::npos,
                message);
  message = errorOf([&] { compute->conv2dBackwardWeights(s, input, output, weight, badBias, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardWeights " + shape + ": dBias") != std::string::npos,
                message);
  message = errorOf([&] { compute->conv2dBackwardWeights(s, input, input, weight, bias, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardWeights " + shape + ": dOutput") != std::string::npos,
                message);

  const Pool2dShape p{.batch = 2, .channels = 3, .height = 8, .width = 8};
  Buffer<float> pooled = toDevice(*compute, Host(p.outputSize(), 0.0f));
  Buffer<std::int32_t> where = toDevice(*compute, Labels(p.outputSize(), 0));
  Buffer<std::int32_t> shortWhere = toDevice(*compute, Labels(p.outputSize() - 1, 0));
  CHECK_NOTHROW(compute->maxPool2d(p, input, pooled, where));
  message = errorOf([&] { compute->maxPool2d(p, input, pooled, shortWhere); });
  CHECK_MESSAGE(message.find("maxPool2d 2x3x8x8, window 2, stride 2: argmax") != std::string::npos,
                message);
  message = errorOf([&] { compute->maxPool2dBackward(p, pooled, where, shortInput); });
  CHECK_MESSAGE(
      message.find("maxPool2dBackward 2x3x8x8, window 2, stride 2: dInput") != std::string::npos,
      message);
  Pool2dShape wide = p;
  wide.window = 9;
  message = errorOf([&] { compute->maxPool2d(wide, input, pooled, where); });
  CHECK_MESSAGE(message.find("window is larger than the input") != std::string::npos, message);
}

TEST_CASE_TEMPLATE("kernels: mismatched sizes throw gossamer::Error", Backend, CpuBackend,
                   CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  Buffer<float> a = toDevice(*compute, Host(8, 1.0f));
  Buffer<float> b = toDevice(*compute, Host(8, 1.0f));
  Buffer<float> c = toDevice(*compute, Host(8, 1.0f));
  Buffer<float> shorter = toDevice(*compute, Host(7, 1.0f));
  Buffer<std::int32_t> labels = toDevice(*compute, Labels(2, 0));

  CHECK_THROWS_AS(compute->copy(a, shorter), gossamer::Error);
  CHECK_THROWS_AS(compute->axpby(a, 1.0f, shorter, 1.0f), gossamer::Error);
  // (Extra parentheses: the braces' commas would otherwise split the macro argument.)
  CHECK_THROWS_AS((compute->weightedSum(a, {{1.0f, b}, {1.0f, shorter}})), gossamer::Error);
  CHECK_THROWS_AS((compute->weightedSum(shorter, {{1.0f, b}})), gossamer::Error);
  CHECK_THROWS_AS(compute->weightedSum(a, std::span<const WeightedInput>{}), gossamer::Error);
  const std::vector<WeightedInput> tooMany(Compute::kMaxWeightedInputs + 1, {1.0f, b});
  CHECK_THROWS_AS(compute->weightedSum(a, tooMany), gossamer::Error);
  CHECK_THROWS_AS(compute->elasticPull(a, shorter, 0.1f, 0.1f), gossamer::Error);
  CHECK_THROWS_AS(compute->dot(a, shorter), gossamer::Error);
  CHECK_THROWS_AS(compute->sgdStep(a, shorter, {}), gossamer::Error);
  CHECK_THROWS_AS(compute->momentumStep(a, shorter, b, {}), gossamer::Error);
  CHECK_THROWS_AS(compute->momentumStep(a, b, shorter, {}), gossamer::Error);
  CHECK_THROWS_AS(compute->adamStep(a, shorter, b, c, 1, {}), gossamer::Error);
  CHECK_THROWS_AS(compute->adamStep(a, b, shorter, c, 1, {}), gossamer::Error);
  CHECK_THROWS_AS(compute->adamStep(a, b, c, shorter, 1, {}), gossamer::Error);
  // gemm 2x4 * 4x2 -> 2x2 needs 8, 8 and 4 elements.
  Buffer<float> c4 = toDevice(*compute, Host(4, 0.0f));
  CHECK_NOTHROW(compute->gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f, a, b, 0.0f, c4));
  CHECK_THROWS_AS(
      compute->gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f, shorter, b, 0.0f, c4),
      gossamer::Error);
  CHECK_THROWS_AS(
      compute->gemm(Transpose::kYes, Transpose::kNo, 2, 2, 4, 1.0f, a, shorter, 0.0f, c4),
      gossamer::Error);
  CHECK_THROWS_AS(compute->gemm(Transpose::kNo, Transpose::kYes, 2, 2, 4, 1.0f, a, b, 0.0f, a),
                  gossamer::Error);
  CHECK_THROWS_AS(compute->biasAdd(a, shorter, 1), gossamer::Error);
  CHECK_THROWS_AS(compute->biasAdd(a, c4, 3), gossamer::Error);
  CHECK_THROWS_AS(compute->biasGrad(c4, a, 3), gossamer::Error);
  CHECK_THROWS_AS(compute->reluBackward(a, shorter), gossamer::Error);
  // 8 logits are 2 rows of 4 classes, not 3 rows.
  Buffer<std::int32_t> threeLabels = toDevice(*compute, Labels(3, 0));
  CHECK_THROWS_AS(compute->softmaxCrossEntropy(a, threeLabels, 4, b, 1.0f), gossamer::Error);
  CHECK_THROWS_AS(compute->softmaxCrossEntropy(a, labels, 4, shorter, 1.0f), gossamer::Error);
  CHECK_THROWS_AS(compute->softmaxCrossEntropy(a, labels, 3, b, 1.0f), gossamer::Error);
  Buffer<std::int32_t> out3 = toDevice(*compute, Labels(3, 0));
  CHECK_THROWS_AS(compute->argmax(a, 4, out3), gossamer::Error);
  CHECK_THROWS_AS(compute->countCorrect(a, threeLabels, 4), gossamer::Error);
}

TEST_CASE_TEMPLATE("kernels: empty spans are no-ops", Backend, CpuBackend, CudaBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  Buffer<float> x = compute->allocate<float>(0);
  Buffer<float> y = compute->allocate<float>(0);
  Buffer<float> z = compute->allocate<float>(0);
  Buffer<float> u = compute->allocate<float>(0);
  Buffer<std::int32_t> labels = compute->allocate<std::int32_t>(0);
  compute->copy(x, y);
  compute->fill(x, 1.0f);
  compute->scale(x, 2.0f);
  compute->axpby(x, 1.0f, y, 1.0f);
  compute->weightedSum(x, {{1.0f, y}, {2.0f, z}});
  compute->elasticPull(x, y, 0.5f, 0.5f);
  CHECK(compute->dot(x, y) == 0.0);
  CHECK(compute->norm2(x) == 0.0);
  compute->sgdStep(x, y, {});
  compute->momentumStep(x, y, z, {});
  compute->adamStep(x, y, z, u, 1, {});
  compute->relu(x);
  compute->reluBackward(x, y);
  compute->biasGrad(x, y, 5);
  CHECK(compute->softmaxCrossEntropy(x, labels, 10, y, 1.0f) == 0.0);
  compute->argmax(x, 10, labels);
  CHECK(compute->countCorrect(x, labels, 10) == 0);
  compute->synchronize();
}

}  // namespace
}  // namespace gossamer::kernels
