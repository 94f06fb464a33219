#include "engine/train/optimizer.h"

#include "engine/base/enforce.h"

namespace gossamer::engine::train {

OptimizerKind parseOptimizerKind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  if (name == "nesterov") return OptimizerKind::kNesterov;
  if (name == "adam") return OptimizerKind::kAdam;
  GOSSAMER_THROW("unknown optimizer '{}' (use sgd, momentum, nesterov or adam)", name);
}

const char* optimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kNesterov: return "nesterov";
    case OptimizerKind::kAdam: return "adam";
  }
  return "unknown";
}

Optimizer::Optimizer(kernels::Compute& compute, const OptimizerOptions& options,
                     std::size_t parameters)
    : compute_(compute), options_(options) {
  GOSSAMER_ENFORCE(options.lr >= 0.0f, "learning rate must be >= 0 (got {})", options.lr);
  if (options.kind != OptimizerKind::kSgd) first_ = compute.allocate<float>(parameters);
  if (options.kind == OptimizerKind::kAdam) second_ = compute.allocate<float>(parameters);
  resetState();
}

void Optimizer::resetState() {
  if (!first_.empty()) compute_.fill(first_, 0.0f);
  if (!second_.empty()) compute_.fill(second_, 0.0f);
}

void Optimizer::step(std::span<float> params, std::span<const float> grads) {
  ++steps_;
  switch (options_.kind) {
    case OptimizerKind::kSgd:
      compute_.sgdStep(params, grads, {.lr = options_.lr, .weightDecay = options_.weightDecay});
      return;
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      compute_.momentumStep(params, grads, first_,
                            {.lr = options_.lr,
                             .momentum = options_.momentum,
                             .nesterov = options_.kind == OptimizerKind::kNesterov,
                             .weightDecay = options_.weightDecay});
      return;
    case OptimizerKind::kAdam:
      compute_.adamStep(params, grads, first_, second_, steps_,
                        {.lr = options_.lr,
                         .beta1 = options_.beta1,
                         .beta2 = options_.beta2,
                         .epsilon = options_.epsilon,
                         .weightDecay = options_.weightDecay});
      return;
  }
}

std::vector<std::pair<std::string, std::span<float>>> Optimizer::state() {
  switch (options_.kind) {
    case OptimizerKind::kSgd:
      return {};
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      return {{"velocity", first_.span()}};
    case OptimizerKind::kAdam:
      return {{"adam.m", first_.span()}, {"adam.v", second_.span()}};
  }
  return {};
}

std::vector<std::pair<std::string, std::span<const float>>> Optimizer::state() const {
  std::vector<std::pair<std::string, std::span<const float>>> views;
  for (auto& [name, buffer] : const_cast<Optimizer*>(this)->state()) views.emplace_back(name, buffer);
  return views;
}

}  // namespace gossamer::engine::train
