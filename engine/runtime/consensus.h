// The consensus model of a cluster, the average of its members' models, evaluated on a test set
// with a CPU copy of the model, and how far the members are from it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "engine/registry.h"
#include "engine/runtime/snapshots.h"

namespace gossamer::engine::runtime {

// The accuracy of the average of the members' models, and how far they are from it.
struct ConsensusResult {
  std::size_t peers = 0;
  double accuracy = 0;
  double loss = 0;
  double distance = 0;  // mean over peers of ||w_i - mean w||^2
  double minPeerAccuracy = 0;
  double meanPeerAccuracy = 0;
};

// The average of `snapshots`' params (float64 sums) and, in `distance` when given, the mean over
// them of ||w_i - mean||^2. Throws gossamer::Error when they are of different sizes.
std::vector<float> averageModels(std::span<const Snapshot> snapshots, double* distance = nullptr);

class ConsensusEvaluator {
 public:
  ConsensusEvaluator(const Registry& registry, const std::string& model, ModelConfig config,
                     const data::Dataset& test);
  // Evaluates with the caller's function: host params, the first `samples` test samples (0: all).
  explicit ConsensusEvaluator(
      std::function<EvalResult(std::span<const float> params, std::size_t samples)> evaluate);
  ~ConsensusEvaluator();
  // `samples` = 0: the whole test set. Each peer's own accuracy is evaluated when `perPeer`.
  // Throws gossamer::Error when the snapshots are of different sizes.
  ConsensusResult evaluate(std::span<const Snapshot> snapshots, std::size_t samples = 0,
                           bool perPeer = true);
  // One model (host params) on the first `samples` test samples (0: all).
  EvalResult evaluateModel(std::span<const float> params, std::size_t samples = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossamer::engine::runtime
