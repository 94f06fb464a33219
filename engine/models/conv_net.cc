#include "engine/models/conv_net.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::engine::models {

using kernels::Transpose;

ConvNetOptions lenetOptions(std::size_t channels, std::size_t height, std::size_t width,
                            std::size_t classes, std::size_t maxBatch) {
  return {.name = "lenet",
          .channels = channels,
          .height = height,
          .width = width,
          .convs = {{.channels = 6, .kernel = 5, .padding = 2, .pool = 2},
                    {.channels = 16, .kernel = 5, .padding = 0, .pool = 2}},
          .hidden = {120, 84},
          .classes = classes,
          .maxBatch = maxBatch};
}

ConvNetOptions cnnOptions(std::size_t channels, std::size_t height, std::size_t width,
                          std::size_t classes, std::size_t maxBatch) {
  return {.name = "cnn",
          .channels = channels,
          .height = height,
          .width = width,
          .convs = {{.channels = 32, .kernel = 3, .padding = 1, .pool = 2},
                    {.channels = 64, .kernel = 3, .padding = 1, .pool = 2}},
          .hidden = {128},
          .classes = classes,
          .maxBatch = maxBatch};
}

ConvNet::ConvNet(kernels::Compute& compute, const ConvNetOptions& options)
    : compute_(compute), options_(options) {
  const std::string& name = options.name;
  GOSSAMER_ENFORCE(options.channels > 0 && options.height > 0 && options.width > 0,
                   "{}: the images need channels, height and width > 0 (got {}x{}x{})", name,
                   options.channels, options.height, options.width);
  GOSSAMER_ENFORCE(options.classes >= 2 && options.maxBatch > 0,
                   "{} needs classes >= 2 and maxBatch > 0 (got {}, {})", name, options.classes,
                   options.maxBatch);
  const std::size_t rows = options.maxBatch;
  std::size_t channels = options.channels, height = options.height, width = options.width;
  std::size_t workspace = 0;
  for (std::size_t i = 0; i < options.convs.size(); ++i) {
    const ConvLayerOptions& layer = options.convs[i];
    GOSSAMER_ENFORCE(layer.channels > 0 && layer.kernel > 0 && layer.pool > 0,
                     "{}: conv{} needs channels, kernel and pool > 0", name, i + 1);
    GOSSAMER_ENFORCE(layer.kernel <= height + 2 * layer.padding &&
                         layer.kernel <= width + 2 * layer.padding,
                     "{}: the {}x{} kernel of conv{} does not fit its {}x{} input (padded by {}); "
                     "the {}x{} images are too small for this model",
                     name, layer.kernel, layer.kernel, i + 1, height, width, layer.padding,
                     options.height, options.width);
    ConvBlock block;
    block.conv = {.batch = rows,
                  .inChannels = channels,
                  .height = height,
                  .width = width,
                  .outChannels = layer.channels,
                  .kernelHeight = layer.kernel,
                  .kernelWidth = layer.kernel,
                  .padHeight = layer.padding,
                  .padWidth = layer.padding};
    layout_.add(fmt::format("conv{}.weight", i + 1),
                {layer.channels, channels, layer.kernel, layer.kernel});
    layout_.add(fmt::format("conv{}.bias", i + 1), {layer.channels});
    workspace = std::max(workspace, block.conv.workspaceSize());
    block.convOut = compute_.allocate<float>(block.conv.outputSize());
    block.dConvOut = compute_.allocate<float>(block.conv.outputSize());
    channels = layer.channels;
    height = block.conv.outHeight();
    width = block.conv.outWidth();
    if (layer.pool > 1) {
      GOSSAMER_ENFORCE(layer.pool <= height && layer.pool <= width,
                       "{}: the {}x{} pooling after conv{} does not fit its {}x{} input; the {}x{} "
                       "images are too small for this model",
                       name, layer.pool, layer.pool, i + 1, height, width, options.height,
                       options.width);
      block.hasPool = true;
      block.pool = {.batch = rows,
                    .channels = channels,
                    .height = height,
                    .width = width,
                    .window = layer.pool,
                    .stride = layer.pool};
      block.pooled = compute_.allocate<float>(block.pool.outputSize());
      block.dPooled = compute_.allocate<float>(block.pool.outputSize());
      block.argmax = compute_.allocate<std::int32_t>(block.pool.outputSize());
      height = block.pool.outHeight();
      width = block.pool.outWidth();
    }
    blocks_.push_back(std::move(block));
  }
  workspace_ = compute_.allocate<float>(workspace);
  headOffset_ = layout_.parameterCount();
  head_ = std::make_unique<Mlp>(compute_, MlpOptions{.inputs = channels * height * width,
                                                     .hidden = options.hidden,
                                                     .classes = options.classes,
                                                     .maxBatch = rows});
  for (const TensorSlot& slot : head_->layout().tensors()) layout_.add(slot.name, slot.shape);
}

std::span<const float> ConvNet::tensor(std::span<const float> params, std::size_t index) const {
  const TensorSlot& slot = layout_.tensors()[index];
  return params.subspan(slot.offset, slot.size());
}

std::span<float> ConvNet::tensor(std::span<float> grads, std::size_t index) const {
  const TensorSlot& slot = layout_.tensors()[index];
  return grads.subspan(slot.offset, slot.size());
}

std::span<float> ConvNet::blockOut(std::size_t b, std::size_t rows) {
  ConvBlock& block = blocks_[b];
  return block.hasPool ? block.pooled.span().first(rows * block.pool.outputSize() / block.pool.batch)
                       : block.convOut.span().first(rows * block.conv.outputSize() /
                                                    block.conv.batch);
}

std::span<float> ConvNet::blockGrad(std::size_t b, std::size_t rows) {
  ConvBlock& block = blocks_[b];
  return block.hasPool ? block.dPooled.span().first(rows * block.pool.outputSize() /
                                                    block.pool.batch)
                       : block.dConvOut.span().first(rows * block.conv.outputSize() /
                                                     block.conv.batch);
}

void ConvNet::initialize(std::span<float> params, std::uint64_t seed) {
  GOSSAMER_ENFORCE_EQ(params.size(), parameterCount(), "{} parameter buffer size", name());
  std::vector<float> host(headOffset_, 0.0f);
  std::mt19937_64 rng(seed);
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    const TensorSlot& weight = layout_.tensors()[2 * b];  // the bias stays 0
    const double limit = std::sqrt(6.0 / static_cast<double>(blocks_[b].conv.patch()));
    std::uniform_real_distribution<float> uniform(static_cast<float>(-limit),
                                                  static_cast<float>(limit));
    for (std::size_t i = 0; i < weight.size(); ++i) host[weight.offset + i] = uniform(rng);
  }
  compute_.upload(params.first(headOffset_), std::span<const float>(host));
  head_->initialize(params.subspan(headOffset_), rng());
}

std::span<const float> ConvNet::forwardConvs(const DeviceBatch& batch,
                                             std::span<const float> params) {
  GOSSAMER_ENFORCE_EQ(params.size(), parameterCount(), "{} parameter buffer size", name());
  GOSSAMER_ENFORCE(batch.rows > 0 && batch.rows <= options_.maxBatch,
                   "batch of {} rows does not fit the model's maxBatch {}", batch.rows,
                   options_.maxBatch);
  GOSSAMER_ENFORCE_EQ(batch.inputs.size(), batch.rows * inputFeatures(), "batch input size");
  const std::size_t rows = batch.rows;
  std::span<const float> input = batch.inputs;
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    ConvBlock& block = blocks_[b];
    kernels::Conv2dShape conv = block.conv;
    conv.batch = rows;
    std::span<float> convOut = block.convOut.span().first(conv.outputSize());
    compute_.conv2d(conv, input, tensor(params, 2 * b), tensor(params, 2 * b + 1), convOut,
                    workspace_.span().first(conv.workspaceSize()));
    // Max pooling and ReLU commute (both are monotone), so the ReLU runs on the pooled
    // output, a pool window's times fewer elements, forward and backward.
    if (block.hasPool) {
      kernels::Pool2dShape pool = block.pool;
      pool.batch = rows;
      compute_.maxPool2d(pool, convOut, block.pooled.span().first(pool.outputSize()),
                         block.argmax.span().first(pool.outputSize()));
    }
    compute_.relu(blockOut(b, rows));
    input = blockOut(b, rows);
  }
  return input;
}

double ConvNet::forwardBackward(const DeviceBatch& batch, std::span<const float> params,
                                std::span<float> grads) {
  GOSSAMER_ENFORCE_EQ(grads.size(), parameterCount(), "{} gradient buffer size", name());
  const std::size_t rows = batch.rows;
  const DeviceBatch headBatch{forwardConvs(batch, params), batch.labels, rows};
  const double loss = head_->forwardBackward(
      headBatch, params.subspan(headOffset_), grads.subspan(headOffset_),
      blocks_.empty() ? std::span<float>() : blockGrad(blocks_.size() - 1, rows));

  // Conv blocks from the last down: un-ReLU, un-pool, then the weight and input gradients.
  for (std::size_t b = blocks_.size(); b-- > 0;) {
    ConvBlock& block = blocks_[b];
    kernels::Conv2dShape conv = block.conv;
    conv.batch = rows;
    std::span<float> dConvOut = block.dConvOut.span().first(conv.outputSize());
    compute_.reluBackward(blockGrad(b, rows), blockOut(b, rows));
    if (block.hasPool) {
      kernels::Pool2dShape pool = block.pool;
      pool.batch = rows;
      compute_.maxPool2dBackward(pool, block.dPooled.span().first(pool.outputSize()),
                                 block.argmax.span().first(pool.outputSize()), dConvOut);
    }
    std::span<const float> input = b > 0 ? std::span<const float>(blockOut(b - 1, rows))
                                         : batch.inputs;
    std::span<float> workspace = workspace_.span().first(conv.workspaceSize());
    compute_.conv2dBackwardWeights(conv, input, dConvOut, tensor(grads, 2 * b),
                                   tensor(grads, 2 * b + 1), workspace);
    if (b > 0) {
      compute_.conv2dBackwardData(conv, dConvOut, tensor(params, 2 * b), blockGrad(b - 1, rows),
                                  workspace);
    }
  }
  return loss;
}

EvalResult ConvNet::evaluate(const DeviceBatch& batch, std::span<const float> params) {
  const DeviceBatch headBatch{forwardConvs(batch, params), batch.labels, batch.rows};
  return head_->evaluate(headBatch, params.subspan(headOffset_));
}

std::vector<GemmShape> ConvNet::trainingGemms(std::size_t rows) const {
  // Forward: each conv block's product; then the head's forward and backward GEMMs (with the
  // input gradient that feeds the convs); then the conv blocks' backward from the last down.
  std::vector<GemmShape> gemms;
  for (const ConvBlock& block : blocks_) {
    kernels::Conv2dShape conv = block.conv;
    conv.batch = rows;
    gemms.push_back(
        {Transpose::kNo, Transpose::kNo, conv.outChannels, conv.columns(), conv.patch()});
  }
  for (const GemmShape& g : head_->trainingGemms(rows, !blocks_.empty())) gemms.push_back(g);
  for (std::size_t b = blocks_.size(); b-- > 0;) {
    kernels::Conv2dShape conv = blocks_[b].conv;
    conv.batch = rows;
    gemms.push_back(
        {Transpose::kNo, Transpose::kYes, conv.outChannels, conv.patch(), conv.columns()});
    if (b > 0) {
      gemms.push_back(
          {Transpose::kYes, Transpose::kNo, conv.patch(), conv.columns(), conv.outChannels});
    }
  }
  return gemms;
}

double ConvNet::trainingFlops(std::size_t rows) const { return gemmFlops(trainingGemms(rows)); }

}  // namespace gossamer::engine::models
