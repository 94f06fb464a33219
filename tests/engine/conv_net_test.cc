// The convolutional models (lenet, cnn) against a float64 reference forward pass written here
// from the definitions, its finite-difference gradient, seeded initialisation, the registry's
// geometry checks, and training: a few steps lower the loss, and several algorithms train a cnn
// in an in-process cluster.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/data/synthetic.h"
#include "engine/models/conv_net.h"
#include "engine/runtime/cluster.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/engine/model_reference.h"

namespace gossamer::engine {
namespace {

using models::ConvNetOptions;

// Mean cross-entropy of a ConvNet in float64, straight from the definitions: zero-padded
// convolution, ReLU, max pooling (window = stride), dense layers, softmax.
double referenceLoss(const ConvNetOptions& o, const std::vector<double>& params,
                     const std::vector<float>& x, const std::vector<std::int32_t>& y) {
  const std::size_t rows = y.size();
  const std::size_t features = o.channels * o.height * o.width;
  double total = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> a(x.begin() + static_cast<long>(r * features),
                          x.begin() + static_cast<long>((r + 1) * features));
    std::size_t channels = o.channels, height = o.height, width = o.width;
    std::size_t offset = 0;
    for (const models::ConvLayerOptions& layer : o.convs) {
      const std::size_t k = layer.kernel, pad = layer.padding, out = layer.channels;
      const std::size_t oh = height + 2 * pad - k + 1, ow = width + 2 * pad - k + 1;
      const std::size_t biasOffset = offset + out * channels * k * k;
      std::vector<double> z(out * oh * ow, 0.0);
      for (std::size_t oc = 0; oc < out; ++oc)
        for (std::size_t i = 0; i < oh; ++i)
          for (std::size_t j = 0; j < ow; ++j) {
            double sum = params[biasOffset + oc];
            for (std::size_t c = 0; c < channels; ++c)
              for (std::size_t u = 0; u < k; ++u)
                for (std::size_t v = 0; v < k; ++v) {
                  const long ih = static_cast<long>(i + u) - static_cast<long>(pad);
                  const long iw = static_cast<long>(j + v) - static_cast<long>(pad);
                  if (ih < 0 || iw < 0 || ih >= static_cast<long>(height) ||
                      iw >= static_cast<long>(width))
                    continue;
                  sum += a[(c * height + static_cast<std::size_t>(ih)) * width +
                           static_cast<std::size_t>(iw)] *
                         params[offset + ((oc * channels + c) * k + u) * k + v];
                }
            z[(oc * oh + i) * ow + j] = std::max(sum, 0.0);
          }
      offset = biasOffset + out;
      channels = out, height = oh, width = ow;
      a = z;
      if (layer.pool > 1) {
        const std::size_t p = layer.pool, ph = height / p, pw = width / p;
        std::vector<double> pooled(channels * ph * pw);
        for (std::size_t c = 0; c < channels; ++c)
          for (std::size_t i = 0; i < ph; ++i)
            for (std::size_t j = 0; j < pw; ++j) {
              double best = -INFINITY;
              for (std::size_t u = 0; u < p; ++u)
                for (std::size_t v = 0; v < p; ++v)
                  best = std::max(best, a[(c * height + i * p + u) * width + j * p + v]);
              pooled[(c * ph + i) * pw + j] = best;
            }
        height = ph, width = pw;
        a = pooled;
      }
    }
    std::vector<std::size_t> widths = {a.size()};
    widths.insert(widths.end(), o.hidden.begin(), o.hidden.end());
    widths.push_back(o.classes);
    const std::vector<double> logits = test::referenceDense(a, widths, params, offset);
    REQUIRE(offset == params.size());
    total += test::referenceCrossEntropy(logits, y[r]);
  }
  return total / static_cast<double>(rows);
}

// Random images and labels.
void randomBatch(std::size_t rows, std::size_t features, std::size_t classes, std::uint64_t seed,
                 std::vector<float>* x, std::vector<std::int32_t>* y) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  x->resize(rows * features);
  for (float& v : *x) v = uniform(rng);
  y->resize(rows);
  for (std::size_t r = 0; r < rows; ++r) (*y)[r] = static_cast<std::int32_t>((r * 7 + 3) % classes);
}

// The model's loss and gradient against the float64 reference: the loss itself, and for up to
// `perTensor` parameters of every tensor (chosen by a seeded draw) the central finite difference
// of the reference loss.
void checkGradient(const ConvNetOptions& options, std::size_t rows, std::size_t perTensor) {
  auto compute = kernels::cpu::makeCompute();
  models::ConvNet model(*compute, options);
  auto params = compute->allocate<float>(model.parameterCount());
  auto grads = compute->allocate<float>(model.parameterCount());
  model.initialize(params, 5);
  // Non-zero biases so that every parameter matters.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
  for (const TensorSlot& slot : model.layout().tensors()) {
    if (slot.shape.size() == 1) {
      for (std::size_t i = 0; i < slot.size(); ++i) params.data()[slot.offset + i] = uniform(rng);
    }
  }
  std::vector<float> x;
  std::vector<std::int32_t> y;
  randomBatch(rows, model.inputFeatures(), options.classes, 9, &x, &y);
  const DeviceBatch batch{x, y, rows};
  const double loss = model.forwardBackward(batch, params, grads);

  std::vector<double> reference(params.data(), params.data() + params.size());
  CHECK(loss == doctest::Approx(referenceLoss(options, reference, x, y)).epsilon(1e-5));
  const double h = 1e-6;
  for (const TensorSlot& slot : model.layout().tensors()) {
    std::vector<std::size_t> picks(slot.size());
    for (std::size_t i = 0; i < picks.size(); ++i) picks[i] = slot.offset + i;
    std::shuffle(picks.begin(), picks.end(), rng);
    picks.resize(std::min(picks.size(), perTensor));
    for (std::size_t i : picks) {
      std::vector<double> plus = reference, minus = reference;
      plus[i] += h;
      minus[i] -= h;
      const double numeric =
          (referenceLoss(options, plus, x, y) - referenceLoss(options, minus, x, y)) / (2 * h);
      INFO(slot.name << " element " << (i - slot.offset));
      CHECK(grads.data()[i] == doctest::Approx(numeric).epsilon(1e-3).scale(1e-3));
    }
  }

  const EvalResult eval = model.evaluate(batch, params);
  CHECK(eval.samples == rows);
  CHECK(eval.lossSum / static_cast<double>(rows) == doctest::Approx(loss).epsilon(1e-6));
}

TEST_CASE("models: lenet gradient equals the finite-difference gradient of a float64 reference") {
  // 12x12 is the smallest image LeNet's second 5x5 convolution and pooling fit.
  const ConvNetOptions options = models::lenetOptions(1, 12, 12, 5, 4);
  checkGradient(options, 3, 40);
}

TEST_CASE("models: cnn gradient equals the finite-difference gradient of a float64 reference") {
  const ConvNetOptions options = models::cnnOptions(1, 8, 8, 4, 4);
  checkGradient(options, 2, 30);
}

TEST_CASE("models: a conv net with strides of its own and no pooling") {
  // Two input channels, an odd image, a 1x1 layer without pooling and no hidden dense layer.
  ConvNetOptions options{.name = "custom",
                         .channels = 2,
                         .height = 7,
                         .width = 7,
                         .convs = {{.channels = 3, .kernel = 3, .padding = 0, .pool = 1},
                                   {.channels = 4, .kernel = 1, .padding = 0, .pool = 2}},
                         .hidden = {},
                         .classes = 3,
                         .maxBatch = 4};
  checkGradient(options, 3, 1000);
}

TEST_CASE("models: cnn and lenet shapes on 28x28 images") {
  auto compute = kernels::cpu::makeCompute();
  models::ConvNet cnn(*compute, models::cnnOptions(1, 28, 28, 10, 8));
  CHECK(cnn.layout().describe() ==
        "conv1.weight[32x1x3x3] conv1.bias[32] conv2.weight[64x32x3x3] conv2.bias[64] "
        "fc1.weight[3136x128] fc1.bias[128] fc2.weight[128x10] fc2.bias[10]");
  CHECK(cnn.inputFeatures() == 784);
  models::ConvNet lenet(*compute, models::lenetOptions(1, 28, 28, 10, 8));
  CHECK(lenet.layout().describe() ==
        "conv1.weight[6x1x5x5] conv1.bias[6] conv2.weight[16x6x5x5] conv2.bias[16] "
        "fc1.weight[400x120] fc1.bias[120] fc2.weight[120x84] fc2.bias[84] fc3.weight[84x10] "
        "fc3.bias[10]");
  CHECK(lenet.parameterCount() == 61706);  // LeNet-5's classic count with 10 classes
  // A training step's GEMMs: forward, dW and dX per layer, but no dX for the first conv.
  CHECK(cnn.trainingGemms(8).size() == 4 * 3 - 1);
  const double conv2 = 2.0 * 64 * (8 * 14 * 14) * (32 * 9);
  const double conv1 = 2.0 * 32 * (8 * 28 * 28) * 9;
  const double fc1 = 2.0 * 8 * 3136 * 128, fc2 = 2.0 * 8 * 128 * 10;
  CHECK(cnn.trainingFlops(8) == doctest::Approx(2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2));
}

TEST_CASE("models: conv net initialisation is seeded and deterministic") {
  auto compute = kernels::cpu::makeCompute();
  models::ConvNet model(*compute, models::cnnOptions(1, 8, 8, 4, 4));
  auto a = compute->allocate<float>(model.parameterCount());
  auto b = compute->allocate<float>(model.parameterCount());
  auto c = compute->allocate<float>(model.parameterCount());
  model.initialize(a, 42);
  model.initialize(b, 42);
  model.initialize(c, 43);
  CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  CHECK_FALSE(std::equal(a.data(), a.data() + a.size(), c.data()));
  // He-uniform bound of conv1 (fan-in 1 x 3 x 3), zero biases.
  const TensorSlot& w1 = model.layout().tensors()[0];
  const TensorSlot& b1 = model.layout().tensors()[1];
  const float bound = std::sqrt(6.0f / 9.0f);
  float largest = 0;
  for (std::size_t i = 0; i < w1.size(); ++i) largest = std::max(largest, std::abs(a.data()[i]));
  CHECK(largest <= bound);
  CHECK(largest > 0.5f * bound);
  for (std::size_t i = 0; i < b1.size(); ++i) CHECK(a.data()[b1.offset + i] == 0.0f);
}

TEST_CASE("models: a few SGD steps lower the cnn's loss on a fixed batch") {
  auto compute = kernels::cpu::makeCompute();
  models::ConvNet model(*compute, models::cnnOptions(1, 12, 12, 4, 16));
  auto params = compute->allocate<float>(model.parameterCount());
  auto grads = compute->allocate<float>(model.parameterCount());
  model.initialize(params, 7);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  randomBatch(16, model.inputFeatures(), 4, 17, &x, &y);
  // A learnable task: the rows r with r % 4 == label are brighter.
  for (std::size_t r = 0; r < 16; ++r) {
    for (std::size_t i = 0; i < 12; ++i) {
      if (i % 4 != static_cast<std::size_t>(y[r])) continue;
      for (std::size_t j = 0; j < 12; ++j) x[r * 144 + i * 12 + j] += 1.0f;
    }
  }
  const DeviceBatch batch{x, y, 16};
  const double first = model.forwardBackward(batch, params, grads);
  double previous = first, last = first;
  std::size_t decreases = 0;
  for (int step = 0; step < 20; ++step) {
    compute->sgdStep(params, grads, {.lr = 0.05f});
    last = model.forwardBackward(batch, params, grads);
    if (last < previous) ++decreases;
    previous = last;
  }
  CHECK(decreases >= 12);
  CHECK(last < 0.25 * first);
}

TEST_CASE("models: the registry's cnn and lenet need square images of a size they fit") {
  const Registry registry = algorithms::makeRegistry();
  auto compute = kernels::cpu::makeCompute();
  auto cnn = registry.models.get("cnn")(*compute, ModelConfig{784, 10, {256, 256}, 64});
  CHECK(cnn->name() == "cnn");
  CHECK(cnn->inputFeatures() == 784);
  CHECK(registry.models.get("lenet")(*compute, ModelConfig{784, 10, {}, 64})->name() == "lenet");
  CHECK_THROWS_WITH_AS(registry.models.get("cnn")(*compute, ModelConfig{60, 10, {}, 8}),
                       doctest::Contains("not a square number"), Error);
  // 8x8 images: LeNet's second 5x5 convolution meets a 4x4 input.
  CHECK_THROWS_WITH_AS(registry.models.get("lenet")(*compute, ModelConfig{64, 10, {}, 8}),
                       doctest::Contains("too small for this model"), Error);
}

// A tiny task for clusters: 4x4 "images" of 4 Gaussian classes.
std::shared_ptr<const DatasetPair> tinyImages() {
  static const auto data = [] {
    data::SyntheticOptions options{.count = 2000,
                                   .features = 16,
                                   .classes = 4,
                                   .separation = 3.0,
                                   .noise = 1.0,
                                   .distributionSeed = 21,
                                   .sampleSeed = 22};
    DatasetPair pair;
    pair.train = data::makeSynthetic(options);
    options.count = 500;
    options.sampleSeed = 23;
    pair.test = data::makeSynthetic(options);
    return std::make_shared<const DatasetPair>(std::move(pair));
  }();
  return data;
}

TEST_CASE("models: algorithms train a cnn in an in-process cluster") {
  const Registry registry = algorithms::makeRegistry();
  for (const char* algorithm : {"allreduce-sgd", "gosgd", "dpsgd", "easgd"}) {
    runtime::ClusterConfig c;
    c.peers = 3;
    c.progress = false;
    c.peer.network.transport = "inproc";
    runtime::TrainingConfig& t = c.peer.training;
    t.model = "cnn";
    t.algorithm = algorithm;
    t.optimizer = {.kind = train::OptimizerKind::kMomentum, .lr = 0.02f};
    t.batch = 16;
    t.maxSteps = 120;
    t.commTimeout = std::chrono::seconds(20);
    t.finishTimeout = std::chrono::seconds(40);
    const runtime::ClusterResult result = runtime::runLocalCluster(c, registry, tinyImages());
    INFO(algorithm);
    // A linear classifier reaches about 0.95 on this task; chance is 0.25.
    CHECK(result.consensus.accuracy > 0.85);
    for (const auto& p : result.peers) CHECK(p.steps == 120);
  }
}

}  // namespace
}  // namespace gossamer::engine
