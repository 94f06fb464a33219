// A user-written model, plugged into gossamer next to the built-ins and trained by the engine's
// own loop: first by one peer alone, then by four peers in this process averaging it with
// gossip. Copy this file to start your own.
//
// The model: logits = relu(X W1) W2 + b2 — a one-hidden-layer network whose hidden layer has no
// bias. All it must do is describe its tensors in a ParamLayout (views into ONE flat buffer)
// and implement forwardBackward and evaluate with kernels::Compute, so it runs unchanged on the
// CPU and the CUDA backend and every decentralized algorithm can average it.
#include <cmath>
#include <cstdio>
#include <random>

#include "algorithms/builtin.h"
#include "engine/runtime/cluster.h"
#include "engine/runtime/peer.h"

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
  // Register the model next to the built-ins, then name it like any other.
  engine::Registry registry = algorithms::makeRegistry();
  registry.models.add("no-bias-hidden", "example: relu(X W1) W2 + b2",
                      [](kernels::Compute& compute, const engine::ModelConfig& config) {
                        return std::make_unique<NoBiasHiddenNet>(compute, config);
                      });
  const auto data = std::make_shared<const engine::DatasetPair>(
      registry.datasets.get("synthetic")({.trainSamples = 8000, .testSamples = 2000}));

  engine::runtime::PeerConfig config;
  engine::runtime::TrainingConfig& t = config.training;
  t.model = "no-bias-hidden";
  t.modelConfig.hidden = {64};
  t.optimizer = {.kind = engine::train::OptimizerKind::kMomentum, .lr = 0.05f};
  t.batch = 64;
  t.epochs = 3;
  t.seed = 7;

  // One peer alone: a cluster of one, with nobody to exchange with.
  t.algorithm = "none";
  config.network.transport = "inproc";
  engine::runtime::Peer alone(config, registry, data);
  const engine::runtime::PeerResult single = alone.run();
  std::printf("custom model, one peer: test accuracy %.2f%% after %llu steps\n",
              100 * single.testAccuracy, static_cast<unsigned long long>(single.steps));

  // Four peers in this process, averaging the same model by gossip.
  engine::runtime::ClusterConfig cluster;
  cluster.peer = config;
  cluster.peer.training.algorithm = "gosgd";
  cluster.peers = 4;
  cluster.progress = false;
  const engine::runtime::ClusterResult four =
      engine::runtime::runLocalCluster(cluster, registry, data);
  std::printf("custom model, four peers (gosgd): consensus accuracy %.2f%%\n",
              100 * four.consensus.accuracy);
  return single.testAccuracy > 0.5 && four.consensus.accuracy > 0.5 ? 0 : 1;
}
