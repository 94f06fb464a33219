// Convolution and pooling loops of the CPU reference backend (geometry: conv_math.h).
#include "kernels/cpu/cpu_conv.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/dispatch.h"

namespace gossamer::kernels::cpu {
namespace {

// Calls f(segment, kh, kw) for each row (c, kh, kw) of the im2col matrix, in ascending (kh, kw)
// order, with `segment` the float offset of that row's part for image n (outPlane() columns).
template <typename F>
[[gnu::always_inline]] inline void forEachPatchRow(const Conv2dShape& s, std::size_t n,
                                                   std::size_t c, F&& f) {
  const std::size_t cols = s.columns(), plane = s.outPlane();
  for (std::size_t kh = 0; kh < s.kernelHeight; ++kh) {
    for (std::size_t kw = 0; kw < s.kernelWidth; ++kw) {
      const std::size_t row = (c * s.kernelHeight + kh) * s.kernelWidth + kw;
      f(row * cols + n * plane, kh, kw);
    }
  }
}

}  // namespace

// im2col: columns[(c, kh, kw)][(n, oh, ow)] = input[n, c, oh * sh + kh - ph, ow * sw + kw - pw],
// 0 in the padding.
GOSSAMER_CPU_CLONES void im2colLoop(const Conv2dShape& s, const float* input, float* columns,
                                    float* padded) {
  const std::size_t outH = s.outHeight(), outW = s.outWidth();
  const std::size_t paddedWidth = s.width + 2 * s.padWidth;
  const std::size_t sh = s.strideHeight, sw = s.strideWidth;
  std::fill(padded, padded + paddedPlane(s), 0.0f);  // the border stays 0
  for (std::size_t n = 0; n < s.batch; ++n) {
    for (std::size_t c = 0; c < s.inChannels; ++c) {
      const float* image = input + (n * s.inChannels + c) * s.inPlane();
      for (std::size_t h = 0; h < s.height; ++h) {
        float* dst = padded + (h + s.padHeight) * paddedWidth + s.padWidth;
        for (std::size_t w = 0; w < s.width; ++w) dst[w] = image[h * s.width + w];
      }
      forEachPatchRow(s, n, c, [&](std::size_t segment, std::size_t kh, std::size_t kw) {
        float* dst = columns + segment;
        for (std::size_t oh = 0; oh < outH; ++oh, dst += outW) {
          const float* src = padded + (oh * sh + kh) * paddedWidth + kw;
          if (sw == 1) {
            for (std::size_t ow = 0; ow < outW; ++ow) dst[ow] = src[ow];
          } else {
            for (std::size_t ow = 0; ow < outW; ++ow) dst[ow] = src[ow * sw];
          }
        }
      });
    }
  }
}

// col2im: dInput = the sum of the im2col gradient entries that copied each input element, from
// 0 in ascending (kh, kw) order per element, as conv_math::col2imGather sums them (accumulated
// in the padded plane, whose border is then dropped).
GOSSAMER_CPU_CLONES void col2imLoop(const Conv2dShape& s, const float* dColumns, float* dInput,
                                    float* padded) {
  const std::size_t outH = s.outHeight(), outW = s.outWidth();
  const std::size_t paddedWidth = s.width + 2 * s.padWidth;
  const std::size_t sh = s.strideHeight, sw = s.strideWidth;
  const std::size_t planeSize = paddedPlane(s);
  for (std::size_t n = 0; n < s.batch; ++n) {
    for (std::size_t c = 0; c < s.inChannels; ++c) {
      std::fill(padded, padded + planeSize, 0.0f);
      forEachPatchRow(s, n, c, [&](std::size_t segment, std::size_t kh, std::size_t kw) {
        const float* src = dColumns + segment;
        for (std::size_t oh = 0; oh < outH; ++oh, src += outW) {
          float* dst = padded + (oh * sh + kh) * paddedWidth + kw;
          if (sw == 1) {
            for (std::size_t ow = 0; ow < outW; ++ow) dst[ow] += src[ow];
          } else {
            for (std::size_t ow = 0; ow < outW; ++ow) dst[ow * sw] += src[ow];
          }
        }
      });
      float* image = dInput + (n * s.inChannels + c) * s.inPlane();
      for (std::size_t h = 0; h < s.height; ++h) {
        const float* src = padded + (h + s.padHeight) * paddedWidth + s.padWidth;
        for (std::size_t w = 0; w < s.width; ++w) image[h * s.width + w] = src[w];
      }
    }
  }
}

// [channels][batch * plane] (channel-major, what the batched GEMM produces) to
// [batch][channels][plane] (NCHW), adding bias[c] to channel c when bias is not null.
GOSSAMER_CPU_CLONES void channelMajorToNchw(const float* in, const float* bias, float* out,
                                            std::size_t batch, std::size_t channels,
                                            std::size_t plane) {
  for (std::size_t n = 0; n < batch; ++n) {
    for (std::size_t c = 0; c < channels; ++c) {
      const float* src = in + (c * batch + n) * plane;
      float* dst = out + (n * channels + c) * plane;
      if (bias == nullptr) {
        std::memcpy(dst, src, plane * sizeof(float));
      } else {
        const float b = bias[c];
        for (std::size_t p = 0; p < plane; ++p) dst[p] = src[p] + b;
      }
    }
  }
}

// The inverse: [batch][channels][plane] to [channels][batch * plane].
void nchwToChannelMajor(const float* in, float* out, std::size_t batch, std::size_t channels,
                        std::size_t plane) {
  for (std::size_t n = 0; n < batch; ++n) {
    for (std::size_t c = 0; c < channels; ++c) {
      std::memcpy(out + (c * batch + n) * plane, in + (n * channels + c) * plane,
                  plane * sizeof(float));
    }
  }
}

// sums[c] = the sum of row c of a channels x count matrix, in double, rounded once.
GOSSAMER_CPU_CLONES void rowSumsDouble(const float* rows, float* sums, std::size_t channels,
                                       std::size_t count) {
  for (std::size_t c = 0; c < channels; ++c) {
    const float* row = rows + c * count;
    constexpr std::size_t kLanes = 8;
    std::array<double, kLanes> acc{};
    std::size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      for (std::size_t l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(row[i + l]);
    }
    double sum = 0.0;
    for (; i < count; ++i) sum += static_cast<double>(row[i]);
    for (double a : acc) sum += a;
    sums[c] = static_cast<float>(sum);
  }
}

GOSSAMER_CPU_CLONES void maxPoolLoop(const Pool2dShape& s, const float* input, float* output,
                                     std::int32_t* argmax) {
  const std::size_t planes = s.batch * s.channels;
  const std::size_t outH = s.outHeight(), outW = s.outWidth();
  if (s.window == 2 && s.stride == 2) {
    // The common 2x2 case unrolled: the same comparisons in the same (row-major) order as
    // conv_math::windowMax, so the same maximum and position.
    const std::size_t width = s.width;
    for (std::size_t q = 0; q < planes; ++q) {
      const float* plane = input + q * s.inPlane();
      float* out = output + q * s.outPlane();
      std::int32_t* where = argmax + q * s.outPlane();
      for (std::size_t oh = 0; oh < outH; ++oh) {
        const std::size_t top = 2 * oh * width;
        const float* upper = plane + top;
        const float* lower = upper + width;
        // Selects, not branches, so that the loop vectorises.
        for (std::size_t ow = 0; ow < outW; ++ow) {
          const auto first = static_cast<std::int32_t>(top + 2 * ow);
          float value = upper[2 * ow];
          std::int32_t best = first;
          const float b = upper[2 * ow + 1], c = lower[2 * ow], d = lower[2 * ow + 1];
          best = b > value ? first + 1 : best;
          value = b > value ? b : value;
          best = c > value ? first + static_cast<std::int32_t>(width) : best;
          value = c > value ? c : value;
          best = d > value ? first + static_cast<std::int32_t>(width) + 1 : best;
          value = d > value ? d : value;
          out[oh * outW + ow] = value;
          where[oh * outW + ow] = best;
        }
      }
    }
    return;
  }
  for (std::size_t q = 0; q < planes; ++q) {
    const float* plane = input + q * s.inPlane();
    float* out = output + q * s.outPlane();
    std::int32_t* where = argmax + q * s.outPlane();
    for (std::size_t oh = 0; oh < outH; ++oh) {
      for (std::size_t ow = 0; ow < outW; ++ow) {
        out[oh * outW + ow] = conv_math::windowMax(s, plane, oh, ow, &where[oh * outW + ow]);
      }
    }
  }
}

// Routes each output gradient to its window's maximum. Overlapping windows scatter in ascending
// (oh, ow) order (conv_math::poolGather's order). `argmax` must be what maxPool2d wrote; a
// position outside its window (a caller's bug) is never written outside the plane.
GOSSAMER_CPU_CLONES void maxPoolBackwardLoop(const Pool2dShape& s, const float* dOutput,
                                             const std::int32_t* argmax, float* dInput) {
  const std::size_t planes = s.batch * s.channels;
  const std::size_t inPlane = s.inPlane(), outPlane = s.outPlane();
  if (s.window == s.stride) {
    // Windows that do not overlap: a band of `window` input rows is cleared while it is in
    // cache and its windows' gradients are stored into it, one pass over memory in all.
    const std::size_t outH = s.outHeight(), outW = s.outWidth();
    const std::size_t band = s.window * s.width;
    for (std::size_t q = 0; q < planes; ++q) {
      float* plane = dInput + q * inPlane;
      const float* dout = dOutput + q * outPlane;
      const std::int32_t* where = argmax + q * outPlane;
      for (std::size_t oh = 0; oh < outH; ++oh) {
        float* rows = plane + oh * band;
        for (std::size_t i = 0; i < band; ++i) rows[i] = 0.0f;
        for (std::size_t ow = 0; ow < outW; ++ow) {
          const std::size_t o = oh * outW + ow;
          // Within the band, so never outside the plane nor overwritten by a later band.
          const auto at = static_cast<std::size_t>(where[o]);
          if (at - oh * band < band) plane[at] = dout[o];
        }
      }
      for (std::size_t i = outH * band; i < inPlane; ++i) plane[i] = 0.0f;
    }
    return;
  }
  std::fill(dInput, dInput + s.inputSize(), 0.0f);
  for (std::size_t q = 0; q < planes; ++q) {
    float* plane = dInput + q * inPlane;
    const float* dout = dOutput + q * outPlane;
    const std::int32_t* where = argmax + q * outPlane;
    for (std::size_t o = 0; o < outPlane; ++o) {
      const auto at = static_cast<std::size_t>(where[o]);
      if (at < inPlane) plane[at] += dout[o];
    }
  }
}

}  // namespace gossamer::kernels::cpu
