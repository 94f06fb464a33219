// engine::Model: a neural network over ONE flat parameter buffer.
//
// The model owns no parameters: the caller owns one flat `params` buffer and one flat `grads`
// buffer of parameterCount() floats (allocated from the model's Compute) and passes views of
// them in. Layer tensors are views at the offsets that layout() describes, so every optimizer
// step and every averaging rule is one kernel over one buffer.
//
// Threading: a Model belongs to the thread of its Compute. Batches must have at most
// maxBatch() rows. Misuse (wrong sizes) throws gossamer::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/compute.h"

namespace gossamer::engine {

// One named tensor inside the flat parameter buffer.
struct TensorSlot {
  std::string name;                // "fc1.weight"
  std::vector<std::size_t> shape;  // {784, 256}
  std::size_t offset = 0;          // in floats, from the start of the flat buffer
  std::size_t size() const;
};

// The layout of the flat buffer: tensors in order, back to back.
class ParamLayout {
 public:
  // Appends a tensor after the previous ones and returns its slot.
  const TensorSlot& add(std::string name, std::vector<std::size_t> shape);
  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  std::size_t parameterCount() const { return count_; }
  // FNV-1a hash of names and shapes: two peers (or a checkpoint) with the same fingerprint hold
  // interchangeable buffers.
  std::uint64_t fingerprint() const;
  std::string describe() const;  // "fc1.weight[784x256] fc1.bias[256] ..."

 private:
  std::vector<TensorSlot> tensors_;
  std::size_t count_ = 0;
};

// A mini-batch in the Compute's memory: rows x features inputs, row-major, and rows labels.
struct DeviceBatch {
  std::span<const float> inputs;
  std::span<const std::int32_t> labels;
  std::size_t rows = 0;
};

struct EvalResult {
  double lossSum = 0;         // sum of per-sample cross-entropy losses
  std::size_t correct = 0;    // samples whose argmax equals the label
  std::size_t samples = 0;
  // Fraction correct and mean loss (0 for no samples).
  double accuracy() const {
    return samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples) : 0;
  }
  double meanLoss() const { return samples > 0 ? lossSum / static_cast<double>(samples) : 0; }
};

class Model {
 public:
  virtual ~Model() = default;

  virtual std::string name() const = 0;
  virtual const ParamLayout& layout() const = 0;
  std::size_t parameterCount() const { return layout().parameterCount(); }
  virtual std::size_t inputFeatures() const = 0;
  virtual std::size_t classes() const = 0;
  virtual std::size_t maxBatch() const = 0;

  // Writes a seeded initialisation (He/Glorot uniform weights, zero biases) into `params`.
  // Same seed, same values on every backend.
  virtual void initialize(std::span<float> params, std::uint64_t seed) = 0;
  // Forward and backward pass: overwrites `grads` with the gradient of the MEAN loss over the
  // batch and returns that mean loss.
  virtual double forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                                 std::span<float> grads) = 0;
  // Forward pass only.
  virtual EvalResult evaluate(const DeviceBatch& batch, std::span<const float> params) = 0;
};

}  // namespace gossamer::engine
