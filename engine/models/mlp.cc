#include "engine/models/mlp.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::models {

using kernels::Transpose;

Mlp::Mlp(kernels::Compute& compute, const MlpOptions& options)
    : compute_(compute), options_(options) {
  GOSSAMER_ENFORCE(options.inputs > 0 && options.classes >= 2 && options.maxBatch > 0,
                   "MLP needs inputs > 0, classes >= 2 and maxBatch > 0 (got {}, {}, {})",
                   options.inputs, options.classes, options.maxBatch);
  widths_.push_back(options.inputs);
  for (std::size_t h : options.hidden) {
    GOSSAMER_ENFORCE(h > 0, "hidden layer widths must be positive");
    widths_.push_back(h);
  }
  widths_.push_back(options.classes);
  for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
    layout_.add(fmt::format("fc{}.weight", l + 1), {widths_[l], widths_[l + 1]});
    layout_.add(fmt::format("fc{}.bias", l + 1), {widths_[l + 1]});
    activations_.push_back(compute_.allocate<float>(options.maxBatch * widths_[l + 1]));
    deltas_.push_back(compute_.allocate<float>(options.maxBatch * widths_[l + 1]));
  }
}

std::string Mlp::name() const {
  return options_.hidden.empty() ? "softmax" : fmt::format("mlp-{}", fmt::join(widths_, "-"));
}

std::span<const float> Mlp::weight(std::span<const float> params, std::size_t layer) const {
  const TensorSlot& slot = layout_.tensors()[2 * layer];
  return params.subspan(slot.offset, slot.size());
}

std::span<const float> Mlp::bias(std::span<const float> params, std::size_t layer) const {
  const TensorSlot& slot = layout_.tensors()[2 * layer + 1];
  return params.subspan(slot.offset, slot.size());
}

void Mlp::initialize(std::span<float> params, std::uint64_t seed) {
  GOSSAMER_ENFORCE_EQ(params.size(), parameterCount(), "MLP parameter buffer size");
  std::vector<float> host(parameterCount(), 0.0f);
  std::mt19937_64 rng(seed);
  const std::size_t layers = widths_.size() - 1;
  for (std::size_t l = 0; l < layers; ++l) {
    // He-uniform for layers followed by ReLU, Glorot-uniform for the output layer.
    const double fanIn = static_cast<double>(widths_[l]);
    const double fanOut = static_cast<double>(widths_[l + 1]);
    const double limit = l + 1 < layers ? std::sqrt(6.0 / fanIn) : std::sqrt(6.0 / (fanIn + fanOut));
    std::uniform_real_distribution<float> uniform(static_cast<float>(-limit),
                                                  static_cast<float>(limit));
    const TensorSlot& w = layout_.tensors()[2 * l];
    for (std::size_t i = 0; i < w.size(); ++i) host[w.offset + i] = uniform(rng);
  }
  compute_.upload(params, std::span<const float>(host));
}

void Mlp::forward(const DeviceBatch& batch, std::span<const float> params) {
  GOSSAMER_ENFORCE_EQ(params.size(), parameterCount(), "MLP parameter buffer size");
  GOSSAMER_ENFORCE(batch.rows > 0 && batch.rows <= options_.maxBatch,
                   "batch of {} rows does not fit the model's maxBatch {}", batch.rows,
                   options_.maxBatch);
  GOSSAMER_ENFORCE_EQ(batch.inputs.size(), batch.rows * options_.inputs, "batch input size");
  GOSSAMER_ENFORCE_EQ(batch.labels.size(), batch.rows, "batch label count");
  const std::size_t rows = batch.rows;
  const std::size_t layers = widths_.size() - 1;
  std::span<const float> input = batch.inputs;
  for (std::size_t l = 0; l < layers; ++l) {
    std::span<float> out = activations_[l].span().first(rows * widths_[l + 1]);
    compute_.gemm(Transpose::kNo, Transpose::kNo, rows, widths_[l + 1], widths_[l], 1.0f, input,
                  weight(params, l), 0.0f, out);
    compute_.biasAdd(out, bias(params, l), rows);
    if (l + 1 < layers) compute_.relu(out);
    input = out;
  }
}

double Mlp::forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                            std::span<float> grads, std::span<float> dInputs) {
  GOSSAMER_ENFORCE_EQ(grads.size(), parameterCount(), "MLP gradient buffer size");
  GOSSAMER_ENFORCE(dInputs.empty() || dInputs.size() == batch.rows * options_.inputs,
                   "MLP input gradient: {} floats for {} rows of {} inputs", dInputs.size(),
                   batch.rows, options_.inputs);
  forward(batch, params);
  const std::size_t rows = batch.rows;
  const std::size_t layers = widths_.size() - 1;
  auto activation = [&](std::size_t l) {
    return activations_[l].span().first(rows * widths_[l + 1]);
  };
  auto delta = [&](std::size_t l) { return deltas_[l].span().first(rows * widths_[l + 1]); };

  // dLoss/dlogits of the mean loss: (softmax - onehot) / rows.
  const double lossSum = compute_.softmaxCrossEntropy(activation(layers - 1), batch.labels,
                                                      options_.classes, delta(layers - 1),
                                                      1.0f / static_cast<float>(rows));
  for (std::size_t l = layers; l-- > 0;) {
    std::span<const float> input = l == 0 ? batch.inputs : std::span<const float>(activation(l - 1));
    const TensorSlot& w = layout_.tensors()[2 * l];
    const TensorSlot& b = layout_.tensors()[2 * l + 1];
    // dW = input^T delta, db = column sums of delta.
    compute_.gemm(Transpose::kYes, Transpose::kNo, widths_[l], widths_[l + 1], rows, 1.0f, input,
                  delta(l), 0.0f, grads.subspan(w.offset, w.size()));
    compute_.biasGrad(grads.subspan(b.offset, b.size()), delta(l), rows);
    if (l > 0) {
      // delta of the previous layer = delta W^T, masked by that layer's ReLU.
      compute_.gemm(Transpose::kNo, Transpose::kYes, rows, widths_[l], widths_[l + 1], 1.0f,
                    delta(l), weight(params, l), 0.0f, delta(l - 1));
      compute_.reluBackward(delta(l - 1), activation(l - 1));
    } else if (!dInputs.empty()) {
      compute_.gemm(Transpose::kNo, Transpose::kYes, rows, widths_[0], widths_[1], 1.0f, delta(0),
                    weight(params, 0), 0.0f, dInputs);
    }
  }
  return lossSum / static_cast<double>(rows);
}

EvalResult Mlp::evaluate(const DeviceBatch& batch, std::span<const float> params) {
  forward(batch, params);
  std::span<const float> logits = activations_.back().span().first(batch.rows * options_.classes);
  EvalResult result;
  result.lossSum = compute_.softmaxCrossEntropy(logits, batch.labels, options_.classes, {}, 0.0f);
  result.correct = compute_.countCorrect(logits, batch.labels, options_.classes);
  result.samples = batch.rows;
  return result;
}

double gemmFlops(const std::vector<GemmShape>& gemms) {
  double flops = 0;
  for (const GemmShape& g : gemms) {
    flops += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  }
  return flops;
}

std::vector<GemmShape> Mlp::trainingGemms(std::size_t rows, bool inputGradient) const {
  const std::size_t layers = widths_.size() - 1;
  std::vector<GemmShape> gemms;
  for (std::size_t l = 0; l < layers; ++l) {
    gemms.push_back({Transpose::kNo, Transpose::kNo, rows, widths_[l + 1], widths_[l]});
  }
  for (std::size_t l = layers; l-- > 0;) {
    gemms.push_back({Transpose::kYes, Transpose::kNo, widths_[l], widths_[l + 1], rows});
    if (l > 0 || inputGradient) {
      gemms.push_back({Transpose::kNo, Transpose::kYes, rows, widths_[l], widths_[l + 1]});
    }
  }
  return gemms;
}

}  // namespace gossamer::engine::models
