// One peer's local learning state: the model, the flat params and grads buffers, the local
// optimizer and the batch sampler of its data shard. A decentralized algorithm (peer-runtime
// issue) drives a Learner step by step and mixes its params buffer with other peers'.
//
// Threading: belongs to the compute thread of its Compute.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/data/batches.h"
#include "engine/data/dataset.h"
#include "engine/model.h"
#include "engine/train/checkpoint.h"
#include "engine/train/optimizer.h"
#include "kernels/compute.h"

namespace gossamer::engine::train {

class Learner {
 public:
  // `compute`, `model` and `train` must outlive the learner. Params are initialised from `seed`
  // (the same seed gives every peer the same initial model).
  Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
          const data::Dataset& train, std::vector<std::size_t> shard, std::size_t batchSize,
          std::uint64_t seed);
  // A learner without data, for a caller that computes the gradients itself (the externally
  // driven loop, engine/runtime/peer.h): params initialised by `model` from `seed`, grads zero;
  // computeGradients(), setShard() and sampler() throw gossamer::Error.
  Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
          std::uint64_t seed);
  // The same over buffers the caller owns (in `compute`'s memory, model.parameterCount() floats
  // each, disjoint, outliving the learner): no copy of them is made, and their values are the
  // initial model (nothing is initialised).
  Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
          std::span<float> params, std::span<float> grads);

  // One local step on the next mini-batch of the shard: forward, backward, optimizer update.
  // Returns the batch's mean loss. The same as computeGradients() then applyUpdate().
  double step();
  // Forward and backward on the next mini-batch: writes grads(), returns the batch's mean loss.
  double computeGradients();
  // The optimizer's update of params() with grads() (advances steps()).
  void applyUpdate();

  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  Model& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  bool hasData() const { return sampler_.has_value(); }
  const data::BatchSampler& sampler() const;
  std::int64_t steps() const { return optimizer_.steps(); }
  std::size_t batchSize() const { return batchSize_; }
  // Samples processed so far (partial last batches counted as they are).
  std::int64_t samples() const { return samples_; }
  // Counts `rows` samples whose gradients the caller computed (a learner without data).
  void countSamples(std::size_t rows) { samples_ += static_cast<std::int64_t>(rows); }

  // Trains on `shard` from now on (a cluster rebalanced its data), from the start of its first
  // epoch; the batch size and seed stay.
  void setShard(std::vector<std::size_t> shard);

  // Params, optimizer state and position in the data, in host memory.
  Checkpoint checkpoint() const;
  // Verifies everything (fingerprint, sizes, optimizer kind) before changing anything; throws
  // gossamer::Error with the first mismatch and leaves the learner untouched. Without
  // `position`, the place in the data is not restored (the shard may have changed since).
  void restore(const Checkpoint& checkpoint, bool position = true);

 private:
  kernels::Compute& compute_;
  Model& model_;
  const data::Dataset* train_;  // null: no data
  std::uint64_t seed_;
  std::size_t batchSize_;
  kernels::Buffer<float> ownParams_;  // empty over the caller's buffers
  kernels::Buffer<float> ownGrads_;
  std::span<float> params_;  // ownParams_, or the caller's
  std::span<float> grads_;
  Optimizer optimizer_;
  std::optional<data::BatchSampler> sampler_;
  std::vector<float> hostInputs_;  // staging of one batch on the host
  std::vector<std::int32_t> hostLabels_;
  kernels::Buffer<float> inputs_;  // the same batch in the Compute's memory
  kernels::Buffer<std::int32_t> labels_;
  std::int64_t samples_ = 0;
};

// Evaluates params on a fixed dataset (a test set) copied once into the Compute's memory.
class Evaluator {
 public:
  Evaluator(kernels::Compute& compute, Model& model, const data::Dataset& dataset);
  // Loss and accuracy over the first `limit` samples (0: all).
  EvalResult run(std::span<const float> params, std::size_t limit = 0);
  std::size_t size() const { return labels_.size(); }

 private:
  kernels::Compute& compute_;
  Model& model_;
  std::size_t features_;
  kernels::Buffer<float> inputs_;
  kernels::Buffer<std::int32_t> labels_;
};

}  // namespace gossamer::engine::train
