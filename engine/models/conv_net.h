// Convolutional network over NCHW images:
//   [Conv2d -> ReLU -> MaxPool] x convs -> flatten -> [Linear -> ReLU] x hidden -> Linear
// with softmax cross-entropy. Two built-in presets: `lenet` (LeNet-5 style: 6 and 16 channels of
// 5x5, dense 120-84) and `cnn` (32 and 64 channels of 3x3 with 2x2 max pooling, dense 128).
//
// Tensors in the flat buffer, in order: conv<i>.weight [out x in x k x k], conv<i>.bias [out],
// then fc<j>.weight [in x out] and fc<j>.bias [out] as in the MLP (Y = X W + b). Every conv layer
// runs the whole batch as one GEMM (kernels::Compute::conv2d), and a block's ReLU runs after its
// pooling (the two commute: the same function and gradient on a quarter of the elements for 2x2
// pooling); activation buffers and the workspace are preallocated for maxBatch rows.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/models/mlp.h"

namespace gossamer::engine::models {

struct ConvLayerOptions {
  std::size_t channels = 32;  // output channels
  std::size_t kernel = 3;     // square kernel, stride 1
  std::size_t padding = 1;
  std::size_t pool = 2;  // max pooling window and stride after the ReLU; 1: none
};

struct ConvNetOptions {
  std::string name = "cnn";
  std::size_t channels = 1;  // of the input images
  std::size_t height = 28;
  std::size_t width = 28;
  std::vector<ConvLayerOptions> convs;
  std::vector<std::size_t> hidden;  // dense layers after the convolutions
  std::size_t classes = 10;
  std::size_t maxBatch = 256;
};

// LeNet-5 style: conv 6@5x5 (pad 2) -> pool 2 -> conv 16@5x5 -> pool 2 -> 120 -> 84 -> classes,
// with ReLU and max pooling. Images of at least 12x12.
ConvNetOptions lenetOptions(std::size_t channels, std::size_t height, std::size_t width,
                            std::size_t classes, std::size_t maxBatch);
// conv 32@3x3 (pad 1) -> pool 2 -> conv 64@3x3 (pad 1) -> pool 2 -> 128 -> classes. Images of at
// least 4x4; on 28x28 images the dense head sees 64x7x7 features.
ConvNetOptions cnnOptions(std::size_t channels, std::size_t height, std::size_t width,
                          std::size_t classes, std::size_t maxBatch);

class ConvNet final : public Model {
 public:
  // `compute` must outlive the model. Throws gossamer::Error when a layer does not fit the
  // image left by the layers before it.
  ConvNet(kernels::Compute& compute, const ConvNetOptions& options);

  std::string name() const override { return options_.name; }
  const ParamLayout& layout() const override { return layout_; }
  std::size_t inputFeatures() const override {
    return options_.channels * options_.height * options_.width;
  }
  std::size_t classes() const override { return options_.classes; }
  std::size_t maxBatch() const override { return options_.maxBatch; }
  // He-uniform weights (fan-in in x k x k for convolutions) before a ReLU, Glorot-uniform for
  // the output layer, zero biases.
  void initialize(std::span<float> params, std::uint64_t seed) override;
  double forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                         std::span<float> grads) override;
  EvalResult evaluate(const DeviceBatch& batch, std::span<const float> params) override;

  // The GEMMs of one forward+backward pass over `rows` samples, in the order they are issued:
  // per conv layer the forward product, the weight gradient and (but for the first layer) the
  // input gradient, and per dense layer the same three as the MLP.
  std::vector<GemmShape> trainingGemms(std::size_t rows) const;
  // 2*m*n*k summed over trainingGemms(rows).
  double trainingFlops(std::size_t rows) const;

 private:
  // One conv block's geometry and buffers (maxBatch rows).
  struct ConvBlock {
    kernels::Conv2dShape conv;  // batch set per call
    kernels::Pool2dShape pool;  // used when hasPool
    bool hasPool = false;
    kernels::Buffer<float> convOut;  // after the bias (and the ReLU when there is no pooling)
    kernels::Buffer<float> dConvOut;
    kernels::Buffer<float> pooled;   // the block's output when hasPool, else convOut is
    kernels::Buffer<float> dPooled;
    kernels::Buffer<std::int32_t> argmax;
  };

  // Runs the conv blocks for `batch` and returns the last one's output (the head's input).
  std::span<const float> forwardConvs(const DeviceBatch& batch, std::span<const float> params);
  std::span<const float> tensor(std::span<const float> params, std::size_t index) const;
  std::span<float> tensor(std::span<float> grads, std::size_t index) const;
  // The output of conv block b (pooled or not), and its gradient, for `rows` rows.
  std::span<float> blockOut(std::size_t b, std::size_t rows);
  std::span<float> blockGrad(std::size_t b, std::size_t rows);

  kernels::Compute& compute_;
  ConvNetOptions options_;
  ParamLayout layout_;
  std::vector<ConvBlock> blocks_;
  kernels::Buffer<float> workspace_;
  // The dense layers: an MLP over the flattened output of the last block, whose tensors follow
  // the conv blocks' in the flat buffer from headOffset_ on.
  std::unique_ptr<Mlp> head_;
  std::size_t headOffset_ = 0;
};

}  // namespace gossamer::engine::models
