// Geometry of the convolution and pooling ops of kernels::Compute (NCHW layout), shared verbatim
// by the CPU reference (kernels/cpu/, g++) and the CUDA kernels (kernels/cuda/cuda_conv.cu,
// nvcc), so that both backends agree on which input element each output reads and on the order
// in which gradients are summed. Plain C++17 without library calls, like codec_math.h.
//
// Layouts (row-major, outermost first):
//   input   [batch][inChannels][height][width]
//   weight  [outChannels][inChannels][kernelHeight][kernelWidth]  (= outChannels x patch())
//   output  [batch][outChannels][outHeight][outWidth]
//   columns [patch()][batch * outPlane()]: the im2col matrix; row (c, kh, kw), column (n, oh, ow)
// An output position (oh, ow) reads input (oh * strideHeight + kh - padHeight,
// ow * strideWidth + kw - padWidth), zero outside the input (zero padding).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GOSSAMER_CONV_FN __host__ __device__ __forceinline__
#else
#define GOSSAMER_CONV_FN inline
#endif

namespace gossamer::kernels {

// A 2-D convolution over a batch of NCHW images. The ops check it (compute_checks.h): every
// dimension and stride positive (batch may be 0), and the kernel no larger than the padded input.
struct Conv2dShape {
  std::size_t batch = 1;
  std::size_t inChannels = 1;
  std::size_t height = 1;
  std::size_t width = 1;
  std::size_t outChannels = 1;
  std::size_t kernelHeight = 1;
  std::size_t kernelWidth = 1;
  std::size_t strideHeight = 1;
  std::size_t strideWidth = 1;
  std::size_t padHeight = 0;
  std::size_t padWidth = 0;

  GOSSAMER_CONV_FN std::size_t outHeight() const {
    return (height + 2 * padHeight - kernelHeight) / strideHeight + 1;
  }
  GOSSAMER_CONV_FN std::size_t outWidth() const {
    return (width + 2 * padWidth - kernelWidth) / strideWidth + 1;
  }
  GOSSAMER_CONV_FN std::size_t inPlane() const { return height * width; }
  GOSSAMER_CONV_FN std::size_t outPlane() const { return outHeight() * outWidth(); }
  // Rows of the im2col matrix: the inputs one output element reads.
  GOSSAMER_CONV_FN std::size_t patch() const { return inChannels * kernelHeight * kernelWidth; }
  // Columns of the im2col matrix: the output positions of the whole batch.
  GOSSAMER_CONV_FN std::size_t columns() const { return batch * outPlane(); }
  GOSSAMER_CONV_FN std::size_t inputSize() const { return batch * inChannels * inPlane(); }
  GOSSAMER_CONV_FN std::size_t weightSize() const { return outChannels * patch(); }
  GOSSAMER_CONV_FN std::size_t outputSize() const { return batch * outChannels * outPlane(); }
  // Floats of scratch the three convolution ops need: the im2col matrix (patch x columns) and
  // the output or its gradient in channel-major order (outChannels x columns), so that the whole
  // batch is ONE matrix product.
  GOSSAMER_CONV_FN std::size_t workspaceSize() const { return (patch() + outChannels) * columns(); }
};

// Max pooling of NCHW images over window x window squares every `stride` elements, without
// padding (the last rows and columns that fill no whole window are dropped).
struct Pool2dShape {
  std::size_t batch = 1;
  std::size_t channels = 1;
  std::size_t height = 1;
  std::size_t width = 1;
  std::size_t window = 2;
  std::size_t stride = 2;

  GOSSAMER_CONV_FN std::size_t outHeight() const { return (height - window) / stride + 1; }
  GOSSAMER_CONV_FN std::size_t outWidth() const { return (width - window) / stride + 1; }
  GOSSAMER_CONV_FN std::size_t inPlane() const { return height * width; }
  GOSSAMER_CONV_FN std::size_t outPlane() const { return outHeight() * outWidth(); }
  GOSSAMER_CONV_FN std::size_t inputSize() const { return batch * channels * inPlane(); }
  GOSSAMER_CONV_FN std::size_t outputSize() const { return batch * channels * outPlane(); }
};

namespace conv_math {

// Half-open range [lo, hi) of the output positions o in [0, outSize) whose input position
// o * stride + k - pad lies in [0, inSize), for kernel offset k. Empty (lo == hi) when none does.
struct Range {
  std::size_t lo;
  std::size_t hi;
};
GOSSAMER_CONV_FN Range validOutputs(std::size_t outSize, std::size_t inSize, std::size_t stride,
                                    std::size_t pad, std::size_t k) {
  // o * stride + k >= pad  <=>  o >= ceil((pad - k) / stride) when pad > k.
  const std::size_t lo = pad > k ? (pad - k + stride - 1) / stride : 0;
  // o * stride + k - pad <= inSize - 1  <=>  o <= (inSize - 1 + pad - k) / stride.
  if (inSize + pad < k + 1) return {0, 0};
  std::size_t hi = (inSize - 1 + pad - k) / stride + 1;
  hi = hi < outSize ? hi : outSize;
  return {lo < hi ? lo : hi, hi};
}

// The input element that im2col entry (row, column) copies, or -1 where it lies in the padding.
GOSSAMER_CONV_FN std::int64_t im2colSource(const Conv2dShape& s, std::size_t row,
                                           std::size_t column) {
  const std::size_t kw = row % s.kernelWidth;
  const std::size_t kh = (row / s.kernelWidth) % s.kernelHeight;
  const std::size_t c = row / (s.kernelWidth * s.kernelHeight);
  const std::size_t plane = s.outPlane();
  const std::size_t n = column / plane;
  const std::size_t p = column % plane;
  const std::size_t oh = p / s.outWidth();
  const std::size_t ow = p % s.outWidth();
  const std::size_t ihPadded = oh * s.strideHeight + kh;
  const std::size_t iwPadded = ow * s.strideWidth + kw;
  if (ihPadded < s.padHeight || iwPadded < s.padWidth) return -1;
  const std::size_t ih = ihPadded - s.padHeight;
  const std::size_t iw = iwPadded - s.padWidth;
  if (ih >= s.height || iw >= s.width) return -1;
  return static_cast<std::int64_t>(((n * s.inChannels + c) * s.height + ih) * s.width + iw);
}

// Gradient of input element `index` from the im2col matrix's gradient `dColumns`: the sum of
// the entries that copied it, in ascending (kh, kw) order from 0.0f. The CPU backend scatters
// in the same order, so both round alike.
GOSSAMER_CONV_FN float col2imGather(const Conv2dShape& s, const float* dColumns,
                                    std::size_t index) {
  const std::size_t iw = index % s.width;
  const std::size_t ih = (index / s.width) % s.height;
  const std::size_t c = (index / s.inPlane()) % s.inChannels;
  const std::size_t n = index / (s.inPlane() * s.inChannels);
  const std::size_t outH = s.outHeight();
  const std::size_t outW = s.outWidth();
  const std::size_t columns = s.columns();
  float sum = 0.0f;
  for (std::size_t kh = 0; kh < s.kernelHeight; ++kh) {
    const std::size_t ohScaled = ih + s.padHeight;  // oh * stride + kh
    if (ohScaled < kh || (ohScaled - kh) % s.strideHeight != 0) continue;
    const std::size_t oh = (ohScaled - kh) / s.strideHeight;
    if (oh >= outH) continue;
    for (std::size_t kw = 0; kw < s.kernelWidth; ++kw) {
      const std::size_t owScaled = iw + s.padWidth;
      if (owScaled < kw || (owScaled - kw) % s.strideWidth != 0) continue;
      const std::size_t ow = (owScaled - kw) / s.strideWidth;
      if (ow >= outW) continue;
      const std::size_t row = (c * s.kernelHeight + kh) * s.kernelWidth + kw;
      sum += dColumns[row * columns + (n * outH + oh) * outW + ow];
    }
  }
  return sum;
}

// Maximum of the window of output (oh, ow) in one input plane, and its position in the plane
// (ih * width + iw): the first maximum in row-major order; a NaN is never taken over a number
// before it (comparisons with NaN are false), a NaN first in its window is kept.
GOSSAMER_CONV_FN float windowMax(const Pool2dShape& s, const float* plane, std::size_t oh,
                                 std::size_t ow, std::int32_t* where) {
  const std::size_t ih0 = oh * s.stride;
  const std::size_t iw0 = ow * s.stride;
  std::size_t best = ih0 * s.width + iw0;
  float bestValue = plane[best];
  for (std::size_t dh = 0; dh < s.window; ++dh) {
    for (std::size_t dw = 0; dw < s.window; ++dw) {
      const std::size_t at = (ih0 + dh) * s.width + iw0 + dw;
      if (plane[at] > bestValue) {
        bestValue = plane[at];
        best = at;
      }
    }
  }
  *where = static_cast<std::int32_t>(best);
  return bestValue;
}

// Gradient of element `at` (ih * width + iw) of one input plane: the sum, in ascending (oh, ow)
// order from 0.0f, of the output gradients whose window took it as its maximum. The CPU
// backend scatters in the same order.
GOSSAMER_CONV_FN float poolGather(const Pool2dShape& s, const float* dOutPlane,
                                  const std::int32_t* argmaxPlane, std::size_t at) {
  const std::size_t ih = at / s.width;
  const std::size_t iw = at % s.width;
  // Windows oh * stride <= ih < oh * stride + window.
  const std::size_t ohLo = ih + 1 > s.window ? (ih + 1 - s.window + s.stride - 1) / s.stride : 0;
  const std::size_t owLo = iw + 1 > s.window ? (iw + 1 - s.window + s.stride - 1) / s.stride : 0;
  std::size_t ohHi = ih / s.stride + 1;
  std::size_t owHi = iw / s.stride + 1;
  ohHi = ohHi < s.outHeight() ? ohHi : s.outHeight();
  owHi = owHi < s.outWidth() ? owHi : s.outWidth();
  float sum = 0.0f;
  for (std::size_t oh = ohLo; oh < ohHi; ++oh) {
    for (std::size_t ow = owLo; ow < owHi; ++ow) {
      const std::size_t o = oh * s.outWidth() + ow;
      if (static_cast<std::size_t>(argmaxPlane[o]) == at) sum += dOutPlane[o];
    }
  }
  return sum;
}

}  // namespace conv_math
}  // namespace gossamer::kernels
