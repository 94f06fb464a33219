// The kernels::Compute conformance suite (compute_conformance.h), part one: device identity and
// memory (upload/download, host staging, asynchronous copies), the element-wise BLAS-1 ops
// (copy, fill, scale, axpby, weightedSum, elasticPull, dot, norm2) and the optimizer steps (sgd,
// momentum, adam), each against a float64 reference on every backend.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/compute.h"
#include "tests/kernels/compute_conformance.h"

namespace gossamer::kernels::conformance {
namespace {

// ---- identity and memory ----

TEST_CASE_TEMPLATE("kernels: device identity and upload/download round trip", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
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
                   CpuBackend, CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: copy, fill and scale", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: axpby", Backend, CpuBackend, CudaBackend, GuardedBackend) {
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
                   CudaBackend, GuardedBackend) {
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
                   CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: elasticPull", Backend, CpuBackend, CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: dot and norm2 accumulate accurately", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: sgdStep", Backend, CpuBackend, CudaBackend, GuardedBackend) {
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
                   CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: adamStep over 3 steps", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

}  // namespace
}  // namespace gossamer::kernels::conformance
