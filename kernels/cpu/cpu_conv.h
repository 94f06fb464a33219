// The convolution and pooling loops of the CPU backend (internal to kernels/cpu): CpuCompute's
// conv2d*, maxPool2d* check their arguments (checks::conv2d etc.) and call these.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/conv_math.h"

namespace gossamer::kernels::cpu {

// The convolution loops work on one zero-padded input plane at a time, (height + 2 padHeight) x
// (width + 2 padWidth) floats in `padded` (scratch the caller sizes with paddedPlane()): a row
// of the im2col matrix is then a plain strided read of it, with no edge cases, and the plane
// stays in L1 while its kernelHeight x kernelWidth rows are written.
inline std::size_t paddedPlane(const Conv2dShape& s) {
  return (s.height + 2 * s.padHeight) * (s.width + 2 * s.padWidth);
}

// im2col of the whole batch into columns (patch() x columns()); `padded` holds paddedPlane(s).
void im2colLoop(const Conv2dShape& s, const float* input, float* columns, float* padded);

// col2im: the im2col gradient dColumns summed back into dInput; `padded` holds paddedPlane(s).
void col2imLoop(const Conv2dShape& s, const float* dColumns, float* dInput, float* padded);

// [channels][batch * plane] to [batch][channels][plane], adding bias[c] when bias is not null.
void channelMajorToNchw(const float* in, const float* bias, float* out, std::size_t batch,
                        std::size_t channels, std::size_t plane);

// [batch][channels][plane] to [channels][batch * plane].
void nchwToChannelMajor(const float* in, float* out, std::size_t batch, std::size_t channels,
                        std::size_t plane);

// sums[c] = the sum of row c of a channels x count matrix, in double, rounded once.
void rowSumsDouble(const float* rows, float* sums, std::size_t channels, std::size_t count);

// Max pooling forward: output and the flat in-plane position of each window's maximum.
void maxPoolLoop(const Pool2dShape& s, const float* input, float* output, std::int32_t* argmax);

// Max pooling backward: each output gradient routed to its window's maximum, the rest 0.
void maxPoolBackwardLoop(const Pool2dShape& s, const float* dOutput, const std::int32_t* argmax,
                         float* dInput);

}  // namespace gossamer::kernels::cpu
