// The local optimizer of one peer: SGD, momentum, Nesterov or Adam over the flat parameter
// buffer, each step ONE fused kernel of kernels::Compute. Owns its state buffers (velocity, or
// Adam's m and v) in the Compute's memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/compute.h"

namespace gossamer::engine::train {

enum class OptimizerKind { kSgd, kMomentum, kNesterov, kAdam };

// "sgd", "momentum", "nesterov", "adam"; throws gossamer::Error listing them otherwise.
OptimizerKind parseOptimizerKind(const std::string& name);
const char* optimizerName(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kMomentum;
  float lr = 0.02f;
  float momentum = 0.9f;  // momentum and Nesterov
  float beta1 = 0.9f;     // Adam
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weightDecay = 0.0f;
};

class Optimizer {
 public:
  // `compute` must outlive the optimizer. State starts at zero.
  Optimizer(kernels::Compute& compute, const OptimizerOptions& options, std::size_t parameters);

  // params -= update(grads); advances the step count.
  void step(std::span<float> params, std::span<const float> grads);

  const OptimizerOptions& options() const { return options_; }
  void setLearningRate(float lr) { options_.lr = lr; }
  std::int64_t steps() const { return steps_; }
  void setSteps(std::int64_t steps) { steps_ = steps; }
  // Named state buffers ("velocity", or "adam.m" and "adam.v"), for checkpoints and for
  // algorithms that must move optimizer state with a model.
  std::vector<std::pair<std::string, std::span<float>>> state();
  std::vector<std::pair<std::string, std::span<const float>>> state() const;
  // Zeroes the state (e.g. after a model is replaced by an average).
  void resetState();

 private:
  kernels::Compute& compute_;
  OptimizerOptions options_;
  std::int64_t steps_ = 0;
  kernels::Buffer<float> first_;   // velocity, or Adam's first moment
  kernels::Buffer<float> second_;  // Adam's second moment
};

}  // namespace gossamer::engine::train
