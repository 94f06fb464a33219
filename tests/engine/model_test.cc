// Models against closed-form oracles: a float64 reference forward pass written here, its
// finite-difference gradient, and the known loss of a zero-initialised softmax regression.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "engine/base/enforce.h"
#include "engine/models/mlp.h"
#include "engine/models/softmax_regression.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/engine/model_reference.h"

namespace gossamer::engine {
namespace {

struct Problem {
  std::size_t rows = 4, inputs = 5, classes = 3;
  std::vector<std::size_t> hidden = {4, 3};
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Problem makeProblem() {
  Problem p;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < p.rows * p.inputs; ++i) p.x.push_back(normal(rng));
  for (std::size_t r = 0; r < p.rows; ++r) p.y.push_back(static_cast<std::int32_t>(r % p.classes));
  return p;
}

// Mean cross-entropy of the MLP in float64, straight from the definition.
double referenceLoss(const Problem& p, const std::vector<double>& params) {
  std::vector<std::size_t> widths = {p.inputs};
  widths.insert(widths.end(), p.hidden.begin(), p.hidden.end());
  widths.push_back(p.classes);
  double total = 0;
  for (std::size_t r = 0; r < p.rows; ++r) {
    std::vector<double> a(p.x.begin() + static_cast<long>(r * p.inputs),
                          p.x.begin() + static_cast<long>((r + 1) * p.inputs));
    std::size_t offset = 0;
    total += test::referenceCrossEntropy(test::referenceDense(a, widths, params, offset), p.y[r]);
  }
  return total / static_cast<double>(p.rows);
}

TEST_CASE("models: parameter layout is contiguous and fingerprinted") {
  ParamLayout layout;
  layout.add("a", {3, 4});
  const TensorSlot& b = layout.add("b", {4});
  CHECK(b.offset == 12);
  CHECK(layout.parameterCount() == 16);
  CHECK(layout.describe() == "a[3x4] b[4]");
  ParamLayout other;
  other.add("a", {4, 3});
  other.add("b", {4});
  CHECK(layout.fingerprint() != other.fingerprint());  // same size, different shapes
  ParamLayout same;
  same.add("a", {3, 4});
  same.add("b", {4});
  CHECK(layout.fingerprint() == same.fingerprint());
}

TEST_CASE("models: MLP gradient equals the finite-difference gradient of a float64 reference") {
  auto compute = kernels::cpu::makeCompute();
  const Problem p = makeProblem();
  models::Mlp mlp(*compute, {.inputs = p.inputs, .hidden = p.hidden, .classes = p.classes, .maxBatch = 8});
  CHECK(mlp.parameterCount() == 5 * 4 + 4 + 4 * 3 + 3 + 3 * 3 + 3);

  auto params = compute->allocate<float>(mlp.parameterCount());
  auto grads = compute->allocate<float>(mlp.parameterCount());
  mlp.initialize(params, 5);
  // Non-zero biases so that every parameter matters.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-0.3f, 0.3f);
  for (const TensorSlot& slot : mlp.layout().tensors()) {
    if (slot.shape.size() == 1) {
      for (std::size_t i = 0; i < slot.size(); ++i) params.data()[slot.offset + i] = uniform(rng);
    }
  }
  const DeviceBatch batch{p.x, p.y, p.rows};
  const double loss = mlp.forwardBackward(batch, params, grads);

  std::vector<double> reference(params.data(), params.data() + params.size());
  CHECK(loss == doctest::Approx(referenceLoss(p, reference)).epsilon(1e-5));
  const double h = 1e-6;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    std::vector<double> plus = reference, minus = reference;
    plus[i] += h;
    minus[i] -= h;
    const double numeric = (referenceLoss(p, plus) - referenceLoss(p, minus)) / (2 * h);
    INFO("parameter " << i);
    CHECK(grads.data()[i] == doctest::Approx(numeric).epsilon(1e-3).scale(1e-3));
  }

  const EvalResult eval = mlp.evaluate(batch, params);
  CHECK(eval.samples == p.rows);
  CHECK(eval.lossSum / static_cast<double>(p.rows) == doctest::Approx(loss).epsilon(1e-6));
}

TEST_CASE("models: zero-initialised softmax regression has loss log(classes)") {
  auto compute = kernels::cpu::makeCompute();
  const Problem p = makeProblem();
  models::SoftmaxRegression model(*compute, p.inputs, p.classes, 8);
  auto params = compute->allocate<float>(model.parameterCount());
  auto grads = compute->allocate<float>(model.parameterCount());
  model.initialize(params, 1);
  const double loss = model.forwardBackward({p.x, p.y, p.rows}, params, grads);
  CHECK(loss == doctest::Approx(std::log(3.0)));
  // The bias gradient of a uniform softmax is (1/C - [y == c]) averaged over rows.
  const TensorSlot& bias = model.layout().tensors()[1];
  for (std::size_t c = 0; c < p.classes; ++c) {
    double expected = 0;
    for (std::int32_t label : p.y) expected += (1.0 / 3.0 - (label == static_cast<int>(c) ? 1.0 : 0.0));
    CHECK(grads.data()[bias.offset + c] == doctest::Approx(expected / static_cast<double>(p.rows)));
  }
}

TEST_CASE("models: a batch larger than maxBatch or of the wrong width is refused") {
  auto compute = kernels::cpu::makeCompute();
  models::Mlp mlp(*compute, {.inputs = 5, .hidden = {4}, .classes = 3, .maxBatch = 2});
  auto params = compute->allocate<float>(mlp.parameterCount());
  auto grads = compute->allocate<float>(mlp.parameterCount());
  mlp.initialize(params, 1);
  const Problem p = makeProblem();  // 4 rows
  CHECK_THROWS_AS(mlp.forwardBackward({p.x, p.y, p.rows}, params, grads), Error);
  std::vector<float> narrow(2 * 4, 0.0f);
  std::vector<std::int32_t> labels = {0, 1};
  CHECK_THROWS_AS(mlp.evaluate({narrow, labels, 2}, params), Error);
}

TEST_CASE("models: initialisation is seeded and deterministic") {
  auto compute = kernels::cpu::makeCompute();
  models::Mlp mlp(*compute, {.inputs = 20, .hidden = {16}, .classes = 4, .maxBatch = 4});
  auto a = compute->allocate<float>(mlp.parameterCount());
  auto b = compute->allocate<float>(mlp.parameterCount());
  auto c = compute->allocate<float>(mlp.parameterCount());
  mlp.initialize(a, 42);
  mlp.initialize(b, 42);
  mlp.initialize(c, 43);
  CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  CHECK_FALSE(std::equal(a.data(), a.data() + a.size(), c.data()));
  // He-uniform bound of the first layer: sqrt(6 / fan_in).
  const float bound = std::sqrt(6.0f / 20.0f);
  for (std::size_t i = 0; i < 20 * 16; ++i) CHECK(std::abs(a.data()[i]) <= bound);
}

}  // namespace
}  // namespace gossamer::engine
