// The kernels::Compute conformance suite (compute_conformance.h), part four: convolution and
// max pooling, forward and backward, against float64 references straight from the definitions,
// and the shape errors that name the op and the shape, on every backend.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "kernels/compute.h"
#include "tests/kernels/compute_conformance.h"

namespace gossamer::kernels::conformance {
namespace {

// ---- convolution and pooling (float64 references straight from the definitions) ----

// Index of input element (n, c, h, w) of an NCHW tensor.
std::size_t nchw(std::size_t n, std::size_t c, std::size_t h, std::size_t w, std::size_t channels,
                 std::size_t height, std::size_t width) {
  return ((n * channels + c) * height + h) * width + w;
}

// Calls f(n, oc, oh, ow, c, kh, kw, inputIndex) for every product of the convolution that
// reads an input element (the padding contributes nothing).
template <typename F>
void forEachConvTerm(const Conv2dShape& s, F&& f) {
  for (std::size_t n = 0; n < s.batch; ++n)
    for (std::size_t oc = 0; oc < s.outChannels; ++oc)
      for (std::size_t oh = 0; oh < s.outHeight(); ++oh)
        for (std::size_t ow = 0; ow < s.outWidth(); ++ow)
          for (std::size_t c = 0; c < s.inChannels; ++c)
            for (std::size_t kh = 0; kh < s.kernelHeight; ++kh)
              for (std::size_t kw = 0; kw < s.kernelWidth; ++kw) {
                const auto ih = static_cast<std::int64_t>(oh * s.strideHeight + kh) -
                                static_cast<std::int64_t>(s.padHeight);
                const auto iw = static_cast<std::int64_t>(ow * s.strideWidth + kw) -
                                static_cast<std::int64_t>(s.padWidth);
                if (ih < 0 || iw < 0 || ih >= static_cast<std::int64_t>(s.height) ||
                    iw >= static_cast<std::int64_t>(s.width))
                  continue;
                f(n, oc, oh, ow, c, kh, kw,
                  nchw(n, c, static_cast<std::size_t>(ih), static_cast<std::size_t>(iw),
                       s.inChannels, s.height, s.width));
              }
}

// Float accumulation over `terms` products: the bound grows with the number of terms and with
// their summed magnitude, as for gemm.
double sumTolerance(std::size_t terms) {
  return 2e-6 * static_cast<double>(terms) + kElementwiseTolerance;
}

// Geometries that exercise padding (including outputs that see only padding), strides in each
// direction, a kernel as large as the input, 1x1 kernels, and a LeNet-like layer.
const Conv2dShape kConvShapes[] = {
    {.batch = 1,
     .inChannels = 1,
     .height = 1,
     .width = 1,
     .outChannels = 1,
     .kernelHeight = 1,
     .kernelWidth = 1},
    {.batch = 2,
     .inChannels = 3,
     .height = 5,
     .width = 7,
     .outChannels = 4,
     .kernelHeight = 3,
     .kernelWidth = 3,
     .padHeight = 1,
     .padWidth = 1},
    {.batch = 3,
     .inChannels = 2,
     .height = 8,
     .width = 6,
     .outChannels = 5,
     .kernelHeight = 3,
     .kernelWidth = 2,
     .strideHeight = 2,
     .strideWidth = 1,
     .padHeight = 0,
     .padWidth = 1},
    {.batch = 1,
     .inChannels = 4,
     .height = 9,
     .width = 9,
     .outChannels = 3,
     .kernelHeight = 5,
     .kernelWidth = 5,
     .strideHeight = 2,
     .strideWidth = 2,
     .padHeight = 2,
     .padWidth = 2},
    {.batch = 2,
     .inChannels = 3,
     .height = 4,
     .width = 4,
     .outChannels = 2,
     .kernelHeight = 4,
     .kernelWidth = 4},
    {.batch = 1,
     .inChannels = 2,
     .height = 7,
     .width = 5,
     .outChannels = 2,
     .kernelHeight = 1,
     .kernelWidth = 1,
     .strideHeight = 3,
     .strideWidth = 2},
    {.batch = 1,
     .inChannels = 1,
     .height = 5,
     .width = 4,
     .outChannels = 2,
     .kernelHeight = 3,
     .kernelWidth = 3,
     .strideHeight = 2,
     .strideWidth = 3,
     .padHeight = 3,
     .padWidth = 3},
    {.batch = 2,
     .inChannels = 1,
     .height = 28,
     .width = 28,
     .outChannels = 6,
     .kernelHeight = 5,
     .kernelWidth = 5,
     .padHeight = 2,
     .padWidth = 2},
    {.batch = 3,
     .inChannels = 8,
     .height = 14,
     .width = 14,
     .outChannels = 16,
     .kernelHeight = 3,
     .kernelWidth = 3,
     .padHeight = 1,
     .padWidth = 1},
};

std::string convLabel(const char* op, const Conv2dShape& s) {
  return label(op, " ", s.batch, "x", s.inChannels, "x", s.height, "x", s.width, " -> ",
               s.outChannels, " k", s.kernelHeight, "x", s.kernelWidth, " s", s.strideHeight, "x",
               s.strideWidth, " p", s.padHeight, "x", s.padWidth);
}

TEST_CASE_TEMPLATE("kernels: conv2d forward, with and without bias", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(21);
  for (const Conv2dShape& s : kConvShapes) {
    for (bool withBias : {true, false}) {
      const Host input = randomVector(rng, s.inputSize());
      const Host weight = randomVector(rng, s.weightSize());
      const Host bias = withBias ? randomVector(rng, s.outChannels) : Host();
      Buffer<float> inputd = toDevice(*compute, input);
      Buffer<float> weightd = toDevice(*compute, weight);
      Buffer<float> biasd = toDevice(*compute, bias);
      Buffer<float> outputd = nanBuffer(*compute, s.outputSize());
      Buffer<float> workspace = nanBuffer(*compute, s.workspaceSize());
      compute->conv2d(s, inputd, weightd, biasd, outputd, workspace);

      Reference want(s.outputSize(), 0.0), magnitude(s.outputSize(), 0.0);
      forEachConvTerm(s, [&](std::size_t n, std::size_t oc, std::size_t oh, std::size_t ow,
                             std::size_t c, std::size_t kh, std::size_t kw, std::size_t in) {
        const std::size_t o = nchw(n, oc, oh, ow, s.outChannels, s.outHeight(), s.outWidth());
        const double term =
            static_cast<double>(input[in]) *
            weight[((oc * s.inChannels + c) * s.kernelHeight + kh) * s.kernelWidth + kw];
        want[o] += term;
        magnitude[o] += std::abs(term);
      });
      Reference bound(s.outputSize());
      const std::size_t plane = s.outPlane();
      for (std::size_t o = 0; o < want.size(); ++o) {
        const double b = withBias ? bias[(o / plane) % s.outChannels] : 0.0;
        want[o] += b;
        bound[o] = sumTolerance(s.patch()) * (magnitude[o] + std::abs(b) + 1.0);
      }
      checkNear(toHost(*compute, outputd), want, bound,
                convLabel(withBias ? "conv2d+bias" : "conv2d", s));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: conv2d backward data and weights", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(22);
  for (const Conv2dShape& s : kConvShapes) {
    const Host input = randomVector(rng, s.inputSize());
    const Host weight = randomVector(rng, s.weightSize());
    const Host dOutput = randomVector(rng, s.outputSize());
    Buffer<float> inputd = toDevice(*compute, input);
    Buffer<float> weightd = toDevice(*compute, weight);
    Buffer<float> dOutputd = toDevice(*compute, dOutput);
    Buffer<float> workspace = nanBuffer(*compute, s.workspaceSize());
    Buffer<float> dInputd = nanBuffer(*compute, s.inputSize());
    Buffer<float> dWeightd = nanBuffer(*compute, s.weightSize());
    Buffer<float> dBiasd = nanBuffer(*compute, s.outChannels);
    compute->conv2dBackwardData(s, dOutputd, weightd, dInputd, workspace);
    compute->conv2dBackwardWeights(s, inputd, dOutputd, dWeightd, dBiasd, workspace);

    // Every product of the forward pass, differentiated: d(in * w) = dOut * w and dOut * in.
    Reference dInput(s.inputSize(), 0.0), dInputMagnitude(s.inputSize(), 0.0);
    Reference dWeight(s.weightSize(), 0.0), dWeightMagnitude(s.weightSize(), 0.0);
    forEachConvTerm(s, [&](std::size_t n, std::size_t oc, std::size_t oh, std::size_t ow,
                           std::size_t c, std::size_t kh, std::size_t kw, std::size_t in) {
      const double g = dOutput[nchw(n, oc, oh, ow, s.outChannels, s.outHeight(), s.outWidth())];
      const std::size_t wi = ((oc * s.inChannels + c) * s.kernelHeight + kh) * s.kernelWidth + kw;
      dInput[in] += g * weight[wi];
      dInputMagnitude[in] += std::abs(g * weight[wi]);
      dWeight[wi] += g * input[in];
      dWeightMagnitude[wi] += std::abs(g * input[in]);
    });
    Reference dBias(s.outChannels, 0.0), dBiasMagnitude(s.outChannels, 0.0);
    for (std::size_t o = 0; o < s.outputSize(); ++o) {
      const std::size_t oc = (o / s.outPlane()) % s.outChannels;
      dBias[oc] += dOutput[o];
      dBiasMagnitude[oc] += std::abs(dOutput[o]);
    }
    auto bounds = [](const Reference& magnitude, std::size_t terms) {
      Reference bound(magnitude.size());
      for (std::size_t i = 0; i < bound.size(); ++i) {
        bound[i] = sumTolerance(terms) * (magnitude[i] + 1.0);
      }
      return bound;
    };
    const std::size_t dataTerms = s.outChannels * s.kernelHeight * s.kernelWidth;
    checkNear(toHost(*compute, dInputd), dInput, bounds(dInputMagnitude, dataTerms),
              convLabel("conv2dBackwardData", s));
    checkNear(toHost(*compute, dWeightd), dWeight, bounds(dWeightMagnitude, s.columns()),
              convLabel("conv2dBackwardWeights dWeight", s));
    // dBias is summed in double: one rounding.
    checkNear(toHost(*compute, dBiasd), dBias, bounds(dBiasMagnitude, 0),
              convLabel("conv2dBackwardWeights dBias", s));

    // Without dBias the weights are the same.
    Buffer<float> dWeight2 = nanBuffer(*compute, s.weightSize());
    compute->conv2dBackwardWeights(s, inputd, dOutputd, dWeight2, {}, workspace);
    checkNear(toHost(*compute, dWeight2), dWeight, bounds(dWeightMagnitude, s.columns()),
              convLabel("conv2dBackwardWeights without dBias", s));
  }
}

TEST_CASE_TEMPLATE("kernels: conv2d on an empty batch", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Conv2dShape s{.batch = 0,
                      .inChannels = 2,
                      .height = 4,
                      .width = 4,
                      .outChannels = 3,
                      .kernelHeight = 3,
                      .kernelWidth = 3,
                      .padHeight = 1,
                      .padWidth = 1};
  Buffer<float> empty = compute->allocate<float>(0);
  Buffer<float> weight = toDevice(*compute, Host(s.weightSize(), 1.0f));
  compute->conv2d(s, empty, weight, {}, empty, empty);
  compute->conv2dBackwardData(s, empty, weight, empty, empty);
  // No samples: zero gradients, written.
  Buffer<float> dWeight = nanBuffer(*compute, s.weightSize());
  Buffer<float> dBias = nanBuffer(*compute, s.outChannels);
  compute->conv2dBackwardWeights(s, empty, empty, dWeight, dBias, empty);
  checkEqual(toHost(*compute, dWeight), Host(s.weightSize(), 0.0f), "dWeight of no samples");
  checkEqual(toHost(*compute, dBias), Host(s.outChannels, 0.0f), "dBias of no samples");
}

const Pool2dShape kPoolShapes[] = {
    {.batch = 1, .channels = 1, .height = 2, .width = 2, .window = 2, .stride = 2},
    {.batch = 2, .channels = 3, .height = 8, .width = 8, .window = 2, .stride = 2},
    {.batch = 1, .channels = 2, .height = 7, .width = 5, .window = 2, .stride = 2},
    {.batch = 2, .channels = 2, .height = 7, .width = 9, .window = 3, .stride = 2},
    {.batch = 1, .channels = 1, .height = 6, .width = 6, .window = 3, .stride = 1},
    {.batch = 2, .channels = 2, .height = 8, .width = 7, .window = 3, .stride = 3},
    {.batch = 3, .channels = 4, .height = 28, .width = 28, .window = 2, .stride = 2},
};

std::string poolLabel(const char* op, const Pool2dShape& s) {
  return label(op, " ", s.batch, "x", s.channels, "x", s.height, "x", s.width, " window ", s.window,
               " stride ", s.stride);
}

// Reference max pooling: the first maximum of each window in row-major order.
void poolReference(const Pool2dShape& s, const Host& input, Host* output, Labels* argmax) {
  output->assign(s.outputSize(), 0.0f);
  argmax->assign(s.outputSize(), -1);
  for (std::size_t q = 0; q < s.batch * s.channels; ++q) {
    for (std::size_t oh = 0; oh < s.outHeight(); ++oh) {
      for (std::size_t ow = 0; ow < s.outWidth(); ++ow) {
        std::size_t best = oh * s.stride * s.width + ow * s.stride;
        for (std::size_t dh = 0; dh < s.window; ++dh) {
          for (std::size_t dw = 0; dw < s.window; ++dw) {
            const std::size_t at = (oh * s.stride + dh) * s.width + ow * s.stride + dw;
            if (input[q * s.inPlane() + at] > input[q * s.inPlane() + best]) best = at;
          }
        }
        const std::size_t o = q * s.outPlane() + oh * s.outWidth() + ow;
        (*output)[o] = input[q * s.inPlane() + best];
        (*argmax)[o] = static_cast<std::int32_t>(best);
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: maxPool2d and its backward", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(23);
  for (const Pool2dShape& s : kPoolShapes) {
    for (bool ties : {false, true}) {
      Host input = randomVector(rng, s.inputSize());
      // Ties: values from {-1, 0, 1}, so most windows hold several maxima; the first one wins.
      if (ties) {
        for (float& x : input) x = std::round(x);
      }
      Buffer<float> inputd = toDevice(*compute, input);
      Buffer<float> outputd = nanBuffer(*compute, s.outputSize());
      Buffer<std::int32_t> argmaxd = toDevice(*compute, Labels(s.outputSize(), -7));
      compute->maxPool2d(s, inputd, outputd, argmaxd);
      Host wantOutput;
      Labels wantArgmax;
      poolReference(s, input, &wantOutput, &wantArgmax);
      const std::string what = poolLabel(ties ? "maxPool2d (ties)" : "maxPool2d", s);
      checkEqual(toHost(*compute, outputd), wantOutput, what);
      CHECK_MESSAGE(toHost(*compute, argmaxd) == wantArgmax, what << ": argmax");

      const Host dOutput = randomVector(rng, s.outputSize());
      Buffer<float> dOutputd = toDevice(*compute, dOutput);
      Buffer<float> dInputd = nanBuffer(*compute, s.inputSize());
      compute->maxPool2dBackward(s, dOutputd, argmaxd, dInputd);
      Reference want(s.inputSize(), 0.0), magnitude(s.inputSize(), 0.0);
      for (std::size_t o = 0; o < s.outputSize(); ++o) {
        const std::size_t q = o / s.outPlane();
        const std::size_t at = q * s.inPlane() + static_cast<std::size_t>(wantArgmax[o]);
        want[at] += dOutput[o];
        magnitude[at] += std::abs(dOutput[o]);
      }
      Reference bound(want.size());
      for (std::size_t i = 0; i < bound.size(); ++i) {
        bound[i] = sumTolerance(s.window * s.window) * (magnitude[i] + 1.0);
      }
      checkNear(toHost(*compute, dInputd), want, bound,
                poolLabel(ties ? "maxPool2dBackward (ties)" : "maxPool2dBackward", s));
    }
  }
}

// The message of the gossamer::Error that `f` throws ("" when it throws none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const gossamer::Error& error) {
    return error.what();
  }
  return "";
}

TEST_CASE_TEMPLATE("kernels: convolution and pooling shape errors name the op and the shape",
                   Backend, CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Conv2dShape s{.batch = 2,
                      .inChannels = 3,
                      .height = 8,
                      .width = 8,
                      .outChannels = 4,
                      .kernelHeight = 3,
                      .kernelWidth = 3,
                      .padHeight = 1,
                      .padWidth = 1};
  const std::string shape = "2x3x8x8 -> 4 channels, kernel 3x3, stride 1x1, pad 1x1";
  Buffer<float> input = toDevice(*compute, Host(s.inputSize(), 1.0f));
  Buffer<float> shortInput = toDevice(*compute, Host(s.inputSize() - 1, 1.0f));
  Buffer<float> weight = toDevice(*compute, Host(s.weightSize(), 1.0f));
  Buffer<float> bias = toDevice(*compute, Host(s.outChannels, 0.0f));
  Buffer<float> badBias = toDevice(*compute, Host(s.outChannels + 1, 0.0f));
  Buffer<float> output = toDevice(*compute, Host(s.outputSize(), 0.0f));
  Buffer<float> workspace = toDevice(*compute, Host(s.workspaceSize(), 0.0f));
  Buffer<float> smallWorkspace = toDevice(*compute, Host(s.workspaceSize() - 1, 0.0f));

  CHECK_NOTHROW(compute->conv2d(s, input, weight, bias, output, workspace));
  std::string message =
      errorOf([&] { compute->conv2d(s, shortInput, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": input") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, weight, badBias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": bias") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, weight, bias, output, smallWorkspace); });
  CHECK_MESSAGE(message.find("workspace") != std::string::npos, message);
  message = errorOf([&] { compute->conv2d(s, input, bias, bias, output, workspace); });
  CHECK_MESSAGE(message.find("conv2d " + shape + ": weight") != std::string::npos, message);
  // The output may not alias an input.
  Buffer<float> same = toDevice(*compute, Host(s.inputSize(), 1.0f));
  const Conv2dShape keep{.batch = 2,
                         .inChannels = 3,
                         .height = 8,
                         .width = 8,
                         .outChannels = 3,
                         .kernelHeight = 3,
                         .kernelWidth = 3,
                         .padHeight = 1,
                         .padWidth = 1};
  Buffer<float> keepWeight = toDevice(*compute, Host(keep.weightSize(), 1.0f));
  Buffer<float> keepWorkspace = toDevice(*compute, Host(keep.workspaceSize(), 0.0f));
  message = errorOf([&] { compute->conv2d(keep, same, keepWeight, {}, same, keepWorkspace); });
  CHECK_MESSAGE(message.find("output must not overlap input") != std::string::npos, message);
  // A kernel larger than the padded input, and a zero stride.
  Conv2dShape tooLarge = s;
  tooLarge.kernelHeight = 11;
  message = errorOf([&] { compute->conv2d(tooLarge, input, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("kernel 11x3") != std::string::npos, message);
  CHECK_MESSAGE(message.find("larger than the padded input") != std::string::npos, message);
  Conv2dShape zeroStride = s;
  zeroStride.strideWidth = 0;
  message = errorOf([&] { compute->conv2d(zeroStride, input, weight, bias, output, workspace); });
  CHECK_MESSAGE(message.find("strides must be positive") != std::string::npos, message);

  message = errorOf([&] { compute->conv2dBackwardData(s, output, weight, shortInput, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardData " + shape + ": dInput") != std::string::npos,
                message);
  message = errorOf(
      [&] { compute->conv2dBackwardWeights(s, input, output, weight, badBias, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardWeights " + shape + ": dBias") != std::string::npos,
                message);
  message =
      errorOf([&] { compute->conv2dBackwardWeights(s, input, input, weight, bias, workspace); });
  CHECK_MESSAGE(message.find("conv2dBackwardWeights " + shape + ": dOutput") != std::string::npos,
                message);

  const Pool2dShape p{.batch = 2, .channels = 3, .height = 8, .width = 8};
  Buffer<float> pooled = toDevice(*compute, Host(p.outputSize(), 0.0f));
  Buffer<std::int32_t> where = toDevice(*compute, Labels(p.outputSize(), 0));
  Buffer<std::int32_t> shortWhere = toDevice(*compute, Labels(p.outputSize() - 1, 0));
  CHECK_NOTHROW(compute->maxPool2d(p, input, pooled, where));
  message = errorOf([&] { compute->maxPool2d(p, input, pooled, shortWhere); });
  CHECK_MESSAGE(message.find("maxPool2d 2x3x8x8, window 2, stride 2: argmax") != std::string::npos,
                message);
  message = errorOf([&] { compute->maxPool2dBackward(p, pooled, where, shortInput); });
  CHECK_MESSAGE(
      message.find("maxPool2dBackward 2x3x8x8, window 2, stride 2: dInput") != std::string::npos,
      message);
  Pool2dShape wide = p;
  wide.window = 9;
  message = errorOf([&] { compute->maxPool2d(wide, input, pooled, where); });
  CHECK_MESSAGE(message.find("window is larger than the input") != std::string::npos, message);
}

}  // namespace
}  // namespace gossamer::kernels::conformance
