#include "engine/train/learner.h"

#include <algorithm>

#include "engine/base/enforce.h"

namespace gossamer::engine::train {

Learner::Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
                 const data::Dataset& train, std::vector<std::size_t> shard, std::size_t batchSize,
                 std::uint64_t seed)
    : compute_(compute),
      model_(model),
      train_(&train),
      seed_(seed),
      batchSize_(batchSize),
      ownParams_(compute.allocate<float>(model.parameterCount())),
      ownGrads_(compute.allocate<float>(model.parameterCount())),
      params_(ownParams_),
      grads_(ownGrads_),
      optimizer_(compute, optimizer, model.parameterCount()),
      sampler_(std::in_place, train, std::move(shard), batchSize, seed),
      hostInputs_(batchSize * train.features),
      hostLabels_(batchSize),
      inputs_(compute.allocate<float>(batchSize * train.features)),
      labels_(compute.allocate<std::int32_t>(batchSize)) {
  GOSSAMER_ENFORCE_EQ(train.features, model.inputFeatures(),
                      "dataset '{}' has {} features per sample but model {} expects {}", train.name,
                      train.features, model.name(), model.inputFeatures());
  GOSSAMER_ENFORCE(train.classes <= model.classes(),
                   "dataset '{}' has {} classes but model {} predicts only {}", train.name,
                   train.classes, model.name(), model.classes());
  GOSSAMER_ENFORCE(batchSize > 0 && batchSize <= model.maxBatch(),
                   "batch size {} must be in [1, {}] for model {}", batchSize, model.maxBatch(),
                   model.name());
  model.initialize(params_, seed);
  compute.fill(grads_, 0.0f);
}

Learner::Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
                 std::uint64_t seed)
    : compute_(compute),
      model_(model),
      train_(nullptr),
      seed_(seed),
      batchSize_(0),
      ownParams_(compute.allocate<float>(model.parameterCount())),
      ownGrads_(compute.allocate<float>(model.parameterCount())),
      params_(ownParams_),
      grads_(ownGrads_),
      optimizer_(compute, optimizer, model.parameterCount()),
      inputs_(compute.allocate<float>(0)),
      labels_(compute.allocate<std::int32_t>(0)) {
  model.initialize(params_, seed);
  compute.fill(grads_, 0.0f);
}

Learner::Learner(kernels::Compute& compute, Model& model, const OptimizerOptions& optimizer,
                 std::span<float> params, std::span<float> grads)
    : compute_(compute),
      model_(model),
      train_(nullptr),
      seed_(0),
      batchSize_(0),
      params_(params),
      grads_(grads),
      optimizer_(compute, optimizer, model.parameterCount()),
      inputs_(compute.allocate<float>(0)),
      labels_(compute.allocate<std::int32_t>(0)) {
  GOSSAMER_ENFORCE(params.size() == model.parameterCount() && grads.size() == params.size(),
                   "the caller's buffers hold {} and {} floats; the model has {} parameters",
                   params.size(), grads.size(), model.parameterCount());
  GOSSAMER_ENFORCE(params.data() + params.size() <= grads.data() ||
                       grads.data() + grads.size() <= params.data(),
                   "the caller's params and grads buffers overlap");
}

const data::BatchSampler& Learner::sampler() const {
  GOSSAMER_ENFORCE(sampler_.has_value(), "this learner has no data (its caller computes the gradients)");
  return *sampler_;
}

double Learner::step() {
  const double loss = computeGradients();
  applyUpdate();
  return loss;
}

void Learner::applyUpdate() { optimizer_.step(params_, grads_); }

double Learner::computeGradients() {
  GOSSAMER_ENFORCE(sampler_.has_value(),
                   "this learner has no data: its caller computes the gradients");
  const std::size_t rows = sampler_->next(hostInputs_, hostLabels_);
  const std::size_t features = model_.inputFeatures();
  compute_.upload(inputs_.span().first(rows * features),
                  std::span<const float>(hostInputs_).first(rows * features));
  compute_.upload(labels_.span().first(rows),
                  std::span<const std::int32_t>(hostLabels_).first(rows));
  const DeviceBatch batch{inputs_.span().first(rows * features), labels_.span().first(rows), rows};
  const double loss = model_.forwardBackward(batch, params_, grads_);
  samples_ += static_cast<std::int64_t>(rows);
  return loss;
}

void Learner::setShard(std::vector<std::size_t> shard) {
  GOSSAMER_ENFORCE(train_ != nullptr, "this learner has no data to shard");
  sampler_ = data::BatchSampler(*train_, std::move(shard), batchSize_, seed_);
}

Checkpoint Learner::checkpoint() const {
  Checkpoint c;
  c.fingerprint = model_.layout().fingerprint();
  auto download = [this](std::span<const float> device) {
    std::vector<float> host(device.size());
    compute_.download(std::span<float>(host), device);
    return host;
  };
  c.tensors["params"] = download(params_);
  for (const auto& [name, buffer] : optimizer_.state()) {
    c.tensors["optimizer." + name] = download(buffer);
  }
  c.meta["model"] = model_.name();
  c.meta["optimizer"] = optimizerName(optimizer_.options().kind);
  c.meta["step"] = std::to_string(optimizer_.steps());
  c.meta["samples"] = std::to_string(samples_);
  c.meta["epoch"] = std::to_string(sampler_ ? sampler_->epoch() : 0);
  c.meta["cursor"] = std::to_string(sampler_ ? sampler_->cursor() : 0);
  return c;
}

void Learner::restore(const Checkpoint& c, bool position) {
  // Validate everything first: a mismatched checkpoint must never be half-loaded.
  GOSSAMER_ENFORCE(c.fingerprint == model_.layout().fingerprint(),
                   "checkpoint is for a different model layout (fingerprint {:016x}, this model "
                   "{} has {:016x}: {})",
                   c.fingerprint, model_.name(), model_.layout().fingerprint(),
                   model_.layout().describe());
  const std::vector<float>& params = c.tensor("params");
  GOSSAMER_ENFORCE_EQ(params.size(), params_.size(), "checkpoint parameter count");
  const std::string& optimizer = c.metaString("optimizer");
  GOSSAMER_ENFORCE(optimizer == optimizerName(optimizer_.options().kind),
                   "checkpoint was written with optimizer '{}' but this run uses '{}'", optimizer,
                   optimizerName(optimizer_.options().kind));
  auto state = optimizer_.state();
  for (auto& [name, buffer] : state) {
    GOSSAMER_ENFORCE_EQ(c.tensor("optimizer." + name).size(), buffer.size(),
                        "checkpoint optimizer state '{}' size", name);
  }
  const std::int64_t step = c.metaInt("step");
  const std::int64_t samples = c.metaInt("samples");
  const std::int64_t epoch = c.metaInt("epoch");
  const std::int64_t cursor = c.metaInt("cursor");
  GOSSAMER_ENFORCE(step >= 0 && samples >= 0 && epoch >= 0 && cursor >= 0 &&
                       (!position || !sampler_ || static_cast<std::size_t>(cursor) <= sampler_->size()),
                   "checkpoint position is invalid (step {}, epoch {}, cursor {} of {})", step,
                   epoch, cursor, sampler_ ? sampler_->size() : 0);

  compute_.upload(params_, std::span<const float>(params));
  for (auto& [name, buffer] : state) {
    compute_.upload(buffer, std::span<const float>(c.tensor("optimizer." + name)));
  }
  optimizer_.setSteps(step);
  samples_ = samples;
  if (position && sampler_) sampler_->seek(static_cast<std::uint64_t>(epoch), static_cast<std::size_t>(cursor));
}

Evaluator::Evaluator(kernels::Compute& compute, Model& model, const data::Dataset& dataset)
    : compute_(compute),
      model_(model),
      features_(dataset.features),
      inputs_(compute.allocate<float>(dataset.inputs.size())),
      labels_(compute.allocate<std::int32_t>(dataset.labels.size())) {
  GOSSAMER_ENFORCE_EQ(dataset.features, model.inputFeatures(),
                      "evaluation set '{}' does not match the model's input size", dataset.name);
  compute.upload(inputs_.span(), std::span<const float>(dataset.inputs));
  compute.upload(labels_.span(), std::span<const std::int32_t>(dataset.labels));
}

EvalResult Evaluator::run(std::span<const float> params, std::size_t limit) {
  const std::size_t total = limit == 0 ? labels_.size() : std::min(limit, labels_.size());
  EvalResult sum;
  for (std::size_t begin = 0; begin < total; begin += model_.maxBatch()) {
    const std::size_t rows = std::min(model_.maxBatch(), total - begin);
    const DeviceBatch batch{inputs_.span().subspan(begin * features_, rows * features_),
                            labels_.span().subspan(begin, rows), rows};
    const EvalResult part = model_.evaluate(batch, params);
    sum.lossSum += part.lossSum;
    sum.correct += part.correct;
    sum.samples += part.samples;
  }
  return sum;
}

}  // namespace gossamer::engine::train
