#include "engine/data/batches.h"

#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/data/random.h"

namespace gossamer::engine::data {

BatchSampler::BatchSampler(const Dataset& dataset, std::vector<std::size_t> indices,
                           std::size_t batchSize, std::uint64_t seed)
    : dataset_(&dataset), indices_(std::move(indices)), batchSize_(batchSize), seed_(seed) {
  GOSSAMER_ENFORCE(!indices_.empty(), "batch sampler over dataset '{}': the shard is empty",
                   dataset.name);
  GOSSAMER_ENFORCE_GE(batchSize_, 1u, "batch size");
  for (const std::size_t index : indices_) {
    GOSSAMER_ENFORCE_LT(index, dataset.count(), "shard index out of range for dataset '{}'",
                        dataset.name);
  }
  shuffleForEpoch();
}

void BatchSampler::shuffleForEpoch() {
  // Seeded from (seed, epoch) alone, never from the previous epoch's order: seek() can jump to
  // any epoch directly.
  order_ = indices_;
  detail::Rng rng = detail::makeRng(seed_, epoch_);
  detail::shuffle(std::span<std::size_t>(order_), rng);
}

std::size_t BatchSampler::next(std::span<float> inputs, std::span<std::int32_t> labels) {
  GOSSAMER_ENFORCE_GE(inputs.size(), batchSize_ * dataset_->features,
                      "batch inputs buffer (batch size {} x {} features)", batchSize_,
                      dataset_->features);
  GOSSAMER_ENFORCE_GE(labels.size(), batchSize_, "batch labels buffer");
  const std::size_t rows = std::min(batchSize_, order_.size() - cursor_);
  copyRows(*dataset_, std::span<const std::size_t>(order_).subspan(cursor_, rows), inputs, labels);
  cursor_ += rows;
  if (cursor_ == order_.size()) {
    ++epoch_;
    cursor_ = 0;
    shuffleForEpoch();
  }
  return rows;
}

void BatchSampler::seek(std::uint64_t epoch, std::size_t cursor) {
  GOSSAMER_ENFORCE_LE(cursor, indices_.size(), "batch sampler cursor in epoch {}", epoch);
  if (cursor == indices_.size()) {
    ++epoch;
    cursor = 0;
  }
  if (epoch != epoch_) {
    epoch_ = epoch;
    shuffleForEpoch();
  }
  cursor_ = cursor;
}

void copyRows(const Dataset& dataset, std::span<const std::size_t> rows, std::span<float> inputs,
              std::span<std::int32_t> labels) {
  const std::size_t features = dataset.features;
  GOSSAMER_ENFORCE_GE(inputs.size(), rows.size() * features, "inputs buffer for {} rows of {}",
                      rows.size(), dataset.name);
  GOSSAMER_ENFORCE_GE(labels.size(), rows.size(), "labels buffer for rows of {}", dataset.name);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    GOSSAMER_ENFORCE_LT(rows[i], dataset.count(), "row {} of the batch from dataset '{}'", i,
                        dataset.name);
    const std::span<const float> source = dataset.row(rows[i]);
    std::copy(source.begin(), source.end(), inputs.begin() + i * features);
    labels[i] = dataset.labels[rows[i]];
  }
}

}  // namespace gossamer::engine::data
