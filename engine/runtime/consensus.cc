#include "engine/runtime/consensus.h"

#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/train/learner.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::runtime {

struct ConsensusEvaluator::Impl {
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute({.blasThreads = 1});
  std::unique_ptr<Model> model;
  std::unique_ptr<train::Evaluator> evaluator;
  std::function<EvalResult(std::span<const float>, std::size_t)> run;
};

ConsensusEvaluator::ConsensusEvaluator(const Registry& registry, const std::string& model,
                                       ModelConfig config, const data::Dataset& test)
    : impl_(std::make_unique<Impl>()) {
  impl_->model = registry.models.get(model)(*impl_->compute, config);
  impl_->evaluator = std::make_unique<train::Evaluator>(*impl_->compute, *impl_->model, test);
  impl_->run = [evaluator = impl_->evaluator.get()](std::span<const float> params,
                                                    std::size_t samples) {
    return evaluator->run(params, samples);
  };
}

ConsensusEvaluator::ConsensusEvaluator(
    std::function<EvalResult(std::span<const float> params, std::size_t samples)> evaluate)
    : impl_(std::make_unique<Impl>()) {
  GOSSAMER_ENFORCE(static_cast<bool>(evaluate), "a consensus evaluator needs an evaluation");
  impl_->run = std::move(evaluate);
}

ConsensusEvaluator::~ConsensusEvaluator() = default;

std::vector<float> averageModels(std::span<const Snapshot> snapshots, double* distance) {
  if (distance != nullptr) *distance = 0;
  if (snapshots.empty()) return {};
  const std::size_t n = snapshots.front().params.size();
  std::vector<double> sum(n, 0.0);
  for (const Snapshot& s : snapshots) {
    GOSSAMER_ENFORCE_EQ(s.params.size(), n, "snapshots of different models");
    for (std::size_t i = 0; i < n; ++i) sum[i] += s.params[i];
  }
  std::vector<float> mean(n);
  const double count = static_cast<double>(snapshots.size());
  for (std::size_t i = 0; i < n; ++i) mean[i] = static_cast<float>(sum[i] / count);
  if (distance != nullptr) {
    for (const Snapshot& s : snapshots) {
      double d2 = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(s.params[i]) - mean[i];
        d2 += d * d;
      }
      *distance += d2 / count;
    }
  }
  return mean;
}

EvalResult ConsensusEvaluator::evaluateModel(std::span<const float> params, std::size_t samples) {
  return impl_->run(params, samples);
}

ConsensusResult ConsensusEvaluator::evaluate(std::span<const Snapshot> snapshots,
                                             std::size_t samples, bool perPeer) {
  ConsensusResult result;
  result.peers = snapshots.size();
  if (snapshots.empty()) return result;
  const double count = static_cast<double>(snapshots.size());
  const std::vector<float> mean = averageModels(snapshots, &result.distance);
  const EvalResult consensus = impl_->run(mean, samples);
  result.accuracy = consensus.accuracy();
  result.loss = consensus.meanLoss();
  if (perPeer) {
    result.minPeerAccuracy = 1;
    for (const Snapshot& s : snapshots) {
      const double a = impl_->run(s.params, samples).accuracy();
      result.minPeerAccuracy = std::min(result.minPeerAccuracy, a);
      result.meanPeerAccuracy += a / count;
    }
  }
  return result;
}

}  // namespace gossamer::engine::runtime
