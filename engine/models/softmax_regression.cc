#include "engine/models/softmax_regression.h"

#include "engine/base/enforce.h"

namespace gossamer::engine::models {

SoftmaxRegression::SoftmaxRegression(kernels::Compute& compute, std::size_t inputs,
                                     std::size_t classes, std::size_t maxBatch)
    : compute_(compute),
      mlp_(compute, MlpOptions{.inputs = inputs, .hidden = {}, .classes = classes, .maxBatch = maxBatch}) {}

void SoftmaxRegression::initialize(std::span<float> params, std::uint64_t /*seed*/) {
  GOSSAMER_ENFORCE_EQ(params.size(), parameterCount(), "softmax parameter buffer size");
  compute_.fill(params, 0.0f);
}

}  // namespace gossamer::engine::models
