// The kernels::Compute conformance suite (compute_conformance.h), part two: dense algebra and
// the NN ops (gemm with both transposes, biasAdd/biasGrad, relu, softmaxCrossEntropy, argmax and
// countCorrect) against float64 references on every backend.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "kernels/compute.h"
#include "tests/kernels/compute_conformance.h"

namespace gossamer::kernels::conformance {
namespace {

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

// ---- dense algebra and NN ops ----

TEST_CASE_TEMPLATE("kernels: gemm with both transposes", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: biasAdd and biasGrad", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: relu and reluBackward", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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
                   CudaBackend, GuardedBackend) {
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
                   CudaBackend, GuardedBackend) {
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
                   CpuBackend, CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: argmax and countCorrect", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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

}  // namespace
}  // namespace gossamer::kernels::conformance
