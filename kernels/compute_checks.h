// Argument checks of kernels::Compute, shared by every backend: the contract is the interface's
// (compute.h), so its shape, aliasing and range rules are written once, here. Each backend calls
// the function named after an operation first thing in that operation; operations without
// argument rules (fill, scale, norm2, relu) have none.
//
// Every function only reads sizes and addresses, never the data (spans may be device memory),
// and throws gossamer::Error (GOSSAMER_ENFORCE) on a violation, naming the operation. Checks that
// need the data, such as the label range of softmaxCrossEntropy, stay in the backends, which
// report them through throwLabelOutOfRange.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/compute.h"

namespace gossamer::kernels::checks {

// True when the byte ranges [a, a + aBytes) and [b, b + bBytes) share at least one byte.
bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes);

// Two spans of an element-wise op are either the same memory or disjoint; a partial overlap has
// no sensible meaning, so it is rejected as misuse of `op`.
void enforceSameOrDisjoint(std::span<const float> a, std::span<const float> b, const char* op);

// ---- element-wise BLAS-1 ----
void copy(std::span<const float> dst, std::span<const float> src);
void axpby(std::span<const float> y, std::span<const float> x);
// 1 <= inputs.size() <= Compute::kMaxWeightedInputs; each input as long as `out` and identical to
// it or disjoint from it.
void weightedSum(std::span<const float> out, std::span<const WeightedInput> inputs);
// Equal lengths, and x and center disjoint.
void elasticPull(std::span<const float> x, std::span<const float> center);
void dot(std::span<const float> x, std::span<const float> y);

// ---- local optimizer steps ----
void sgdStep(std::span<const float> w, std::span<const float> g);
void momentumStep(std::span<const float> w, std::span<const float> g,
                  std::span<const float> velocity);
// Equal lengths and step >= 1.
void adamStep(std::span<const float> w, std::span<const float> g, std::span<const float> m,
              std::span<const float> v, std::int64_t step);

// ---- compression ----
// A valid codec; residual empty or as long as input; out exactly encodedBytes(codec, n) bytes
// and 4-byte aligned; input, residual and out pairwise disjoint; n < 2^32 for sparse codecs.
void encode(const Codec& codec, std::span<const float> input, std::span<const float> residual,
            std::span<const std::byte> out);
// A valid codec; payload 4-byte aligned and disjoint from out; for dense codecs exactly
// encodedBytes(codec, out.size()) bytes; for sparse codecs 4 + 8c bytes with c <= k (and, but
// for sampled top-k, c == k) and out.size() < 2^32. Returns c (0 for dense codecs).
std::size_t decode(const Codec& codec, std::span<const std::byte> payload,
                   std::span<const float> out);

// ---- dense algebra and NN ops ----

// What is left of a gemm call once gemm() below has checked and handled it.
enum class GemmRest {
  kDone,     // nothing left: the call had no product to compute
  kProduct,  // the backend computes C = alpha * op(A) * op(B) + beta * C
};

// Checks gemm's shapes (A holds m*k elements, B k*n, C m*n) and finishes, on `compute` itself,
// the calls with no product to compute, which BLAS would reject for their zero leading
// dimension: m == 0 or n == 0 is a no-op, and k == 0 makes C = beta * C, where beta == 0
// overwrites C without reading it (NaN included), as BLAS does. Returns kProduct otherwise, after
// checking that m, n and k, hence every leading dimension, fit BLAS's 32-bit int.
GemmRest gemm(Compute& compute, std::size_t m, std::size_t n, std::size_t k,
              std::span<const float> a, std::span<const float> b, float beta, std::span<float> c);
// y is rows x bias.size().
void biasAdd(std::span<const float> y, std::span<const float> bias, std::size_t rows);
// dy is rows x dbias.size().
void biasGrad(std::span<const float> dbias, std::span<const float> dy, std::size_t rows);
void reluBackward(std::span<const float> dy, std::span<const float> y);

// The three ops below take rows x classes matrices, classes > 0, and return the number of rows.

// logits is labels.size() x classes; dlogits is empty or as long as logits, and identical to it
// or disjoint from it.
std::size_t softmaxCrossEntropy(std::span<const float> logits, std::span<const std::int32_t> labels,
                                std::size_t classes, std::span<const float> dlogits);
// classes <= INT32_MAX (an index must fit the output); x is out.size() x classes.
std::size_t argmax(std::span<const float> x, std::size_t classes,
                   std::span<const std::int32_t> out);
// logits is labels.size() x classes; classes <= INT32_MAX, as for argmax.
std::size_t countCorrect(std::span<const float> logits, std::span<const std::int32_t> labels,
                         std::size_t classes);

// ---- convolutional layers ----

// A shape as the errors name it: "conv2d 2x3x8x8 -> 4 channels, kernel 3x3, stride 1x1, pad 1x1"
// and "maxPool2d 2x3x8x8, window 2, stride 2".
std::string describe(const Conv2dShape& shape);
std::string describe(const Pool2dShape& shape);

// The five ops below check the shape (dimensions, strides and window positive, the kernel or
// window within the (padded) input, every size and BLAS dimension in range), the size of every
// span, the workspace's size, and that each output is disjoint from the other spans. They
// return false when the batch is empty (nothing to compute), true otherwise.
bool conv2d(const Conv2dShape& shape, std::span<const float> input, std::span<const float> weight,
            std::span<const float> bias, std::span<const float> output,
            std::span<const float> workspace);
bool conv2dBackwardData(const Conv2dShape& shape, std::span<const float> dOutput,
                        std::span<const float> weight, std::span<const float> dInput,
                        std::span<const float> workspace);
bool conv2dBackwardWeights(const Conv2dShape& shape, std::span<const float> input,
                           std::span<const float> dOutput, std::span<const float> dWeight,
                           std::span<const float> dBias, std::span<const float> workspace);
bool maxPool2d(const Pool2dShape& shape, std::span<const float> input,
               std::span<const float> output, std::span<const std::int32_t> argmax);
bool maxPool2dBackward(const Pool2dShape& shape, std::span<const float> dOutput,
                       std::span<const std::int32_t> argmax, std::span<const float> dInput);

// Throws the error of softmaxCrossEntropy for `label` in `row` outside [0, classes), the one
// message every backend gives, naming the label so that a bad dataset is found from the log.
[[noreturn]] void throwLabelOutOfRange(std::int32_t label, std::size_t row, std::size_t classes);

}  // namespace gossamer::kernels::checks
