// A user-written model, plugged into gossamer next to the built-ins and trained by the engine's
// own loop. Copy this file to start your own.
//
// The model: logits = relu(X W1) W2 + b2 — a one-hidden-layer network whose hidden layer has no
// bias. All it must do is describe its tensors in a ParamLayout (views into ONE flat buffer)
// and implement forwardBackward and evaluate with kernels::Compute, so it runs unchanged on the
// CPU and the CUDA backend and every decentralized algorithm can average it.
#include <cmath>
#include <cstdio>
#include <random>

#include "engine/builtin.h"
#include "engine/data/synthetic.h"
#include "engine/train/trainer.h"

using namespace gossamer;
using kernels::Transpose;

class NoBiasHiddenNet final : public engine::Model {
 public:
  NoBiasHiddenNet(kernels::Compute& compute, const engine::ModelConfig& config)
      : compute_(compute), config_(config), width_(config.hidden.empty() ? 64 : config.hidden[0]) {
    w1_ = layout_.add("hidden.weight", {config.inputs, width_});
    w2_ = layout_.add("out.weight", {width_, config.classes});
    b2_ = layout_.add("out.bias", {config.classes});
    hidden_ = compute.allocate<float>(config.maxBatch * width_);
    logits_ = compute.allocate<float>(config.maxBatch * config.classes);
    dHidden_ = compute.allocate<float>(config.maxBatch * width_);
  }

  std::string name() const override { return "no-bias-hidden"; }
  const engine::ParamLayout& layout() const override { return layout_; }
  std::size_t inputFeatures() const override { return config_.inputs; }
  std::size_t classes() const override { return config_.classes; }
  std::size_t maxBatch() const override { return config_.maxBatch; }

  void initialize(std::span<float> params, std::uint64_t seed) override {
    std::vector<float> host(params.size(), 0.0f);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(config_.inputs)));
    for (std::size_t i = 0; i < w1_.size() + w2_.size(); ++i) host[i] = normal(rng);
    compute_.upload(params, std::span<const float>(host));
  }

  double forwardBackward(const engine::DeviceBatch& batch, std::span<const float> params,
                         std::span<float> grads) override {
    const std::size_t n = batch.rows;
    forward(batch, params);
    auto logits = logits_.span().first(n * config_.classes);
    auto hidden = hidden_.span().first(n * width_);
    auto dHidden = dHidden_.span().first(n * width_);
    // dlogits overwrite the logits in place.
    const double loss = compute_.softmaxCrossEntropy(logits, batch.labels, config_.classes, logits,
                                                     1.0f / static_cast<float>(n));
    compute_.gemm(Transpose::kYes, Transpose::kNo, width_, config_.classes, n, 1.0f, hidden, logits,
                  0.0f, slot(grads, w2_));
    compute_.biasGrad(slot(grads, b2_), logits, n);
    compute_.gemm(Transpose::kNo, Transpose::kYes, n, width_, config_.classes, 1.0f, logits,
                  slot(params, w2_), 0.0f, dHidden);
    compute_.reluBackward(dHidden, hidden);
    compute_.gemm(Transpose::kYes, Transpose::kNo, config_.inputs, width_, n, 1.0f, batch.inputs,
                  dHidden, 0.0f, slot(grads, w1_));
    return loss / static_cast<double>(n);
  }

  engine::EvalResult evaluate(const engine::DeviceBatch& batch,
                              std::span<const float> params) override {
    forward(batch, params);
    auto logits = logits_.span().first(batch.rows * config_.classes);
    return {compute_.softmaxCrossEntropy(logits, batch.labels, config_.classes, {}, 0.0f),
            compute_.countCorrect(logits, batch.labels, config_.classes), batch.rows};
  }

 private:
  template <typename T>
  static std::span<T> slot(std::span<T> flat, const engine::TensorSlot& s) {
    return flat.subspan(s.offset, s.size());
  }

  void forward(const engine::DeviceBatch& batch, std::span<const float> params) {
    const std::size_t n = batch.rows;
    auto hidden = hidden_.span().first(n * width_);
    auto logits = logits_.span().first(n * config_.classes);
    compute_.gemm(Transpose::kNo, Transpose::kNo, n, width_, config_.inputs, 1.0f, batch.inputs,
                  slot(params, w1_), 0.0f, hidden);
    compute_.relu(hidden);
    compute_.gemm(Transpose::kNo, Transpose::kNo, n, config_.classes, width_, 1.0f, hidden,
                  slot(params, w2_), 0.0f, logits);
    compute_.biasAdd(logits, slot(params, b2_), n);
  }

  kernels::Compute& compute_;
  engine::ModelConfig config_;
  std::size_t width_;
  engine::ParamLayout layout_;
  engine::TensorSlot w1_, w2_, b2_;
  kernels::Buffer<float> hidden_, logits_, dHidden_;
};

int main() {
  // Register the model next to the built-ins, then build it by name like any other.
  engine::Registry registry = engine::makeBuiltinRegistry();
  registry.models.add("no-bias-hidden", "example: relu(X W1) W2 + b2",
                      [](kernels::Compute& compute, const engine::ModelConfig& config) {
                        return std::make_unique<NoBiasHiddenNet>(compute, config);
                      });

  const engine::DatasetPair data = registry.datasets.get("synthetic")({.trainSamples = 8000, .testSamples = 2000});
  auto compute = engine::makeCompute(kernels::Device::kCpu);
  auto model = registry.models.get("no-bias-hidden")(
      *compute, {.inputs = data.train.features, .classes = data.train.classes, .hidden = {64}, .maxBatch = 256});

  std::vector<std::size_t> all(data.train.count());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  engine::train::Learner learner(*compute, *model, {.kind = engine::train::OptimizerKind::kMomentum, .lr = 0.05f},
                                 data.train, all, /*batchSize=*/64, /*seed=*/7);
  engine::train::Evaluator evaluator(*compute, *model, data.test);
  const auto result = engine::train::train(learner, evaluator, {.epochs = 3});
  std::printf("custom model: test accuracy %.2f%% after %lld steps\n", 100 * result.testAccuracy,
              static_cast<long long>(result.steps));
  return result.testAccuracy > 0.5 ? 0 : 1;
}
