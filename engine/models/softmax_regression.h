// Softmax (multinomial logistic) regression: logits = X W + b, cross-entropy loss. A convex
// problem, used by tests that need a known optimum and by quick runs.
#pragma once

#include "engine/models/mlp.h"

namespace gossamer::engine::models {

// Softmax regression is an MLP with no hidden layer; it reuses that implementation.
class SoftmaxRegression final : public Model {
 public:
  SoftmaxRegression(kernels::Compute& compute, std::size_t inputs, std::size_t classes,
                    std::size_t maxBatch);

  std::string name() const override { return "softmax"; }
  const ParamLayout& layout() const override { return mlp_.layout(); }
  std::size_t inputFeatures() const override { return mlp_.inputFeatures(); }
  std::size_t classes() const override { return mlp_.classes(); }
  std::size_t maxBatch() const override { return mlp_.maxBatch(); }
  // Zero initialisation: the convex problem needs no symmetry breaking.
  void initialize(std::span<float> params, std::uint64_t seed) override;
  double forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                         std::span<float> grads) override {
    return mlp_.forwardBackward(batch, params, grads);
  }
  EvalResult evaluate(const DeviceBatch& batch, std::span<const float> params) override {
    return mlp_.evaluate(batch, params);
  }

 private:
  kernels::Compute& compute_;
  Mlp mlp_;
};

}  // namespace gossamer::engine::models
