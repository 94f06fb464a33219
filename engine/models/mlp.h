// Multi-layer perceptron: inputs -> [Linear -> ReLU] x hidden.size() -> Linear -> softmax
// cross-entropy. Weights are stored (in x out) row-major so a layer is Y = X W + b.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/model.h"

namespace gossamer::engine::models {

// One row-major matrix product of a training step, C[m x n] = op(A) op(B) with op(A) m x k, as
// kernels::Compute::gemm takes it: what a benchmark replays bare to compare a model's speed with.
struct GemmShape {
  kernels::Transpose transA = kernels::Transpose::kNo;
  kernels::Transpose transB = kernels::Transpose::kNo;
  std::size_t m = 0;
  std::size_t n = 0;
  std::size_t k = 0;
};

// 2*m*n*k summed over `gemms`.
double gemmFlops(const std::vector<GemmShape>& gemms);

struct MlpOptions {
  std::size_t inputs = 784;
  std::vector<std::size_t> hidden = {256, 256};
  std::size_t classes = 10;
  std::size_t maxBatch = 256;  // activation buffers are preallocated for this many rows
};

class Mlp final : public Model {
 public:
  // `compute` must outlive the model.
  Mlp(kernels::Compute& compute, const MlpOptions& options);

  std::string name() const override;
  const ParamLayout& layout() const override { return layout_; }
  std::size_t inputFeatures() const override { return options_.inputs; }
  std::size_t classes() const override { return options_.classes; }
  std::size_t maxBatch() const override { return options_.maxBatch; }
  void initialize(std::span<float> params, std::uint64_t seed) override;
  double forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                         std::span<float> grads) override {
    return forwardBackward(batch, params, grads, {});
  }
  // The same, and with a non-empty `dInputs` (rows x inputs) also the gradient of the mean loss
  // with respect to the inputs: for a model that puts this MLP on top of layers of its own.
  double forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                         std::span<float> grads, std::span<float> dInputs);
  EvalResult evaluate(const DeviceBatch& batch, std::span<const float> params) override;

  // The GEMMs of one forward+backward pass over `rows` samples, in the order they are issued:
  // Y = X W per layer, then from the last layer down dW = X^T dY and, but for the first layer,
  // dX = dY W^T (for the first layer too with `inputGradient`).
  std::vector<GemmShape> trainingGemms(std::size_t rows, bool inputGradient = false) const;
  // Floating-point operations of one forward+backward pass over `rows` samples (GEMMs only:
  // 2*m*n*k for each of the forward, input-gradient and weight-gradient products).
  double trainingFlops(std::size_t rows) const { return gemmFlops(trainingGemms(rows)); }

 private:
  // Runs the forward pass; leaves the logits in activations_.back().
  void forward(const DeviceBatch& batch, std::span<const float> params);
  std::span<const float> weight(std::span<const float> params, std::size_t layer) const;
  std::span<const float> bias(std::span<const float> params, std::size_t layer) const;

  kernels::Compute& compute_;
  MlpOptions options_;
  ParamLayout layout_;
  std::vector<std::size_t> widths_;                    // inputs, hidden..., classes
  std::vector<kernels::Buffer<float>> activations_;    // one per layer output (maxBatch x width)
  std::vector<kernels::Buffer<float>> deltas_;         // gradient w.r.t. each layer output
};

}  // namespace gossamer::engine::models
