// The kernels::Compute conformance suite (compute_conformance.h), part five: misuse across the
// ops (mismatched sizes throw gossamer::Error) and empty spans, which every op takes as a no-op,
// on every backend.
#include <memory>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "kernels/compute.h"
#include "tests/kernels/compute_conformance.h"

namespace gossamer::kernels::conformance {
namespace {

// ---- misuse ----

TEST_CASE_TEMPLATE("kernels: mismatched sizes throw gossamer::Error", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
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

TEST_CASE_TEMPLATE("kernels: empty spans are no-ops", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
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
}  // namespace gossamer::kernels::conformance
