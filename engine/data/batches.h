// Mini-batches over one shard of a dataset, for the training loop, and row gathering for
// evaluation batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/data/dataset.h"

namespace gossamer::engine::data {

// Serves the rows of a shard in a seeded order that is reshuffled every epoch. An epoch's order
// is a pure function of (seed, epoch), the same on every platform, so the position (epoch(),
// cursor()) is the sampler's whole state: a checkpoint stores it and seek() restores it exactly.
// Batches never straddle epochs: the last batch of an epoch holds the remaining rows.
//
// Not thread-safe; the dataset must outlive the sampler and not change while it is used.
class BatchSampler {
 public:
  // `indices` (the shard, normally one list of shardIndices) must be non-empty and index rows of
  // `dataset`; batchSize >= 1. Throws gossamer::Error otherwise. Starts at epoch 0, cursor 0.
  BatchSampler(const Dataset& dataset, std::vector<std::size_t> indices, std::size_t batchSize,
               std::uint64_t seed);

  // Copies the next min(batchSize, size() - cursor()) rows into the front of `inputs` (row-major,
  // features floats per row) and `labels`, returns that row count (>= 1) and advances; finishing
  // an epoch moves to the next epoch's cursor 0. Throws gossamer::Error unless inputs holds at
  // least batchSize * features floats and labels at least batchSize values.
  std::size_t next(std::span<float> inputs, std::span<std::int32_t> labels);

  // Completed passes over the shard.
  std::uint64_t epoch() const { return epoch_; }
  // Rows of the current epoch already served, in [0, size()).
  std::size_t cursor() const { return cursor_; }
  // Continues exactly where a sampler with the same dataset, indices, batch size and seed stood
  // at (epoch, cursor). cursor == size() is accepted as the start of the following epoch; a
  // larger cursor throws gossamer::Error.
  void seek(std::uint64_t epoch, std::size_t cursor);

  std::size_t batchesPerEpoch() const { return (indices_.size() + batchSize_ - 1) / batchSize_; }
  // Rows in the shard (one epoch).
  std::size_t size() const { return indices_.size(); }
  std::size_t batchSize() const { return batchSize_; }

 private:
  void shuffleForEpoch();

  const Dataset* dataset_;
  std::vector<std::size_t> indices_;  // the shard as given; every epoch permutes this
  std::vector<std::size_t> order_;    // the current epoch's permutation of indices_
  std::size_t batchSize_;
  std::uint64_t seed_;
  std::uint64_t epoch_ = 0;
  std::size_t cursor_ = 0;
};

// Copies the given rows of `dataset`, in order, into the front of `inputs` and `labels` (for
// evaluation batches). Throws gossamer::Error when a row is out of range or the spans hold fewer
// than rows.size() * features floats or rows.size() labels.
void copyRows(const Dataset& dataset, std::span<const std::size_t> rows, std::span<float> inputs,
              std::span<std::int32_t> labels);

}  // namespace gossamer::engine::data
