#include "kernels/compute_checks.h"

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::kernels::checks {
namespace {
// A shape named in an error message, formatted (describe) only when a message is made: the
// checks run on every call of an op, the messages almost never.
struct Described {
  const Conv2dShape* conv = nullptr;
  const Pool2dShape* pool = nullptr;
};
}  // namespace
}  // namespace gossamer::kernels::checks

template <>
struct fmt::formatter<gossamer::kernels::checks::Described> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const gossamer::kernels::checks::Described& d, Context& context) const {
    const std::string text = d.conv != nullptr ? gossamer::kernels::checks::describe(*d.conv)
                                               : gossamer::kernels::checks::describe(*d.pool);
    return fmt::formatter<std::string_view>::format(text, context);
  }
};

namespace gossamer::kernels::checks {

bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes) {
  const auto aBegin = reinterpret_cast<std::uintptr_t>(a);
  const auto bBegin = reinterpret_cast<std::uintptr_t>(b);
  return aBegin < bBegin + bBytes && bBegin < aBegin + aBytes;
}

void enforceSameOrDisjoint(std::span<const float> a, std::span<const float> b, const char* op) {
  GOSSAMER_ENFORCE(
      a.data() == b.data() || !overlaps(a.data(), a.size_bytes(), b.data(), b.size_bytes()),
      "{}: buffers partially overlap (they must be identical or disjoint)", op);
}

// ---- element-wise BLAS-1 ----

void copy(std::span<const float> dst, std::span<const float> src) {
  GOSSAMER_ENFORCE_EQ(dst.size(), src.size(), "copy: dst and src lengths differ");
}

void axpby(std::span<const float> y, std::span<const float> x) {
  GOSSAMER_ENFORCE_EQ(y.size(), x.size(), "axpby: y and x lengths differ");
  enforceSameOrDisjoint(y, x, "axpby");
}

void weightedSum(std::span<const float> out, std::span<const WeightedInput> inputs) {
  GOSSAMER_ENFORCE(!inputs.empty(), "weightedSum: needs at least one input");
  GOSSAMER_ENFORCE_LE(inputs.size(), Compute::kMaxWeightedInputs, "weightedSum: too many inputs");
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    GOSSAMER_ENFORCE_EQ(inputs[j].input.size(), out.size(),
                        "weightedSum: input {} and out lengths differ", j);
    enforceSameOrDisjoint(out, inputs[j].input, "weightedSum");
  }
}

void elasticPull(std::span<const float> x, std::span<const float> center) {
  GOSSAMER_ENFORCE_EQ(x.size(), center.size(), "elasticPull: x and center lengths differ");
  GOSSAMER_ENFORCE(
      x.empty() || !overlaps(x.data(), x.size_bytes(), center.data(), center.size_bytes()),
      "elasticPull: x and center must not overlap");
}

void dot(std::span<const float> x, std::span<const float> y) {
  GOSSAMER_ENFORCE_EQ(x.size(), y.size(), "dot: x and y lengths differ");
}

// ---- local optimizer steps ----

void sgdStep(std::span<const float> w, std::span<const float> g) {
  GOSSAMER_ENFORCE_EQ(w.size(), g.size(), "sgdStep: w and g lengths differ");
}

void momentumStep(std::span<const float> w, std::span<const float> g,
                  std::span<const float> velocity) {
  GOSSAMER_ENFORCE_EQ(w.size(), g.size(), "momentumStep: w and g lengths differ");
  GOSSAMER_ENFORCE_EQ(w.size(), velocity.size(), "momentumStep: w and velocity lengths differ");
}

void adamStep(std::span<const float> w, std::span<const float> g, std::span<const float> m,
              std::span<const float> v, std::int64_t step) {
  GOSSAMER_ENFORCE_EQ(w.size(), g.size(), "adamStep: w and g lengths differ");
  GOSSAMER_ENFORCE_EQ(w.size(), m.size(), "adamStep: w and m lengths differ");
  GOSSAMER_ENFORCE_EQ(w.size(), v.size(), "adamStep: w and v lengths differ");
  GOSSAMER_ENFORCE_GE(step, std::int64_t{1}, "adamStep: step is 1-based");
}

// ---- compression ----

namespace {
void enforceAligned4(const void* pointer, const char* op) {
  GOSSAMER_ENFORCE(reinterpret_cast<std::uintptr_t>(pointer) % 4 == 0,
                   "{}: the payload must be 4-byte aligned", op);
}
void enforceIndexable(const Codec& codec, std::size_t n, const char* op) {
  GOSSAMER_ENFORCE(!isSparse(codec.kind) || n <= UINT32_MAX,
                   "{}: {} takes at most 2^32 - 1 elements (uint32 indices), got {}", op,
                   codecName(codec.kind), n);
}
}  // namespace

void encode(const Codec& codec, std::span<const float> input, std::span<const float> residual,
            std::span<const std::byte> out) {
  validate(codec);
  const std::size_t n = input.size();
  enforceIndexable(codec, n, "encode");
  GOSSAMER_ENFORCE(residual.empty() || residual.size() == n,
                   "encode: the residual must be empty or as long as the input ({} vs {})",
                   residual.size(), n);
  GOSSAMER_ENFORCE_EQ(out.size(), encodedBytes(codec, n),
                      "encode: out must be encodedBytes({}, {}) bytes", formatCodec(codec), n);
  enforceAligned4(out.data(), "encode");
  GOSSAMER_ENFORCE(
      !overlaps(input.data(), input.size_bytes(), residual.data(), residual.size_bytes()),
      "encode: input and residual must not overlap");
  GOSSAMER_ENFORCE(!overlaps(input.data(), input.size_bytes(), out.data(), out.size()),
                   "encode: input and out must not overlap");
  GOSSAMER_ENFORCE(!overlaps(residual.data(), residual.size_bytes(), out.data(), out.size()),
                   "encode: residual and out must not overlap");
}

std::size_t decode(const Codec& codec, std::span<const std::byte> payload,
                   std::span<const float> out) {
  validate(codec);
  const std::size_t n = out.size();
  enforceIndexable(codec, n, "decode");
  enforceAligned4(payload.data(), "decode");
  GOSSAMER_ENFORCE(!overlaps(payload.data(), payload.size(), out.data(), out.size_bytes()),
                   "decode: payload and out must not overlap");
  if (!isSparse(codec.kind)) {
    GOSSAMER_ENFORCE_EQ(payload.size(), encodedBytes(codec, n),
                        "decode: a {} payload of {} elements has encodedBytes bytes",
                        formatCodec(codec), n);
    return 0;
  }
  const std::size_t bytes = payload.size();
  GOSSAMER_ENFORCE(bytes >= 4 && (bytes - 4) % 8 == 0,
                   "decode: a {} payload is 4 + 8c bytes, got {}", formatCodec(codec), bytes);
  const std::size_t count = sparsePayloadCount(bytes);
  const std::size_t k = sparseCount(codec, n);
  const bool exact = codec.kind == CodecKind::kRandK || codec.selection == TopKSelection::kExact;
  GOSSAMER_ENFORCE(exact ? count == k : count <= k,
                   "decode: a {} payload of {} elements carries {}{} values, got {}",
                   formatCodec(codec), n, exact ? "" : "at most ", k, count);
  return count;
}

// ---- dense algebra and NN ops ----

GemmRest gemm(Compute& compute, std::size_t m, std::size_t n, std::size_t k,
              std::span<const float> a, std::span<const float> b, float beta, std::span<float> c) {
  GOSSAMER_ENFORCE_EQ(a.size(), m * k, "gemm: A must hold m*k elements (m={}, k={})", m, k);
  GOSSAMER_ENFORCE_EQ(b.size(), k * n, "gemm: B must hold k*n elements (k={}, n={})", k, n);
  GOSSAMER_ENFORCE_EQ(c.size(), m * n, "gemm: C must hold m*n elements (m={}, n={})", m, n);
  if (m == 0 || n == 0) return GemmRest::kDone;
  if (k == 0) {
    if (beta == 0.0f) {
      compute.fill(c, 0.0f);
    } else {
      compute.scale(c, beta);
    }
    return GemmRest::kDone;
  }
  // BLAS takes int dimensions: a larger one would wrap silently. The leading dimensions are
  // stored row lengths, each one of m, n and k, so these three checks cover them.
  constexpr auto kIntMax = static_cast<std::size_t>(INT_MAX);
  GOSSAMER_ENFORCE_LE(m, kIntMax, "gemm: m exceeds the 32-bit BLAS index range");
  GOSSAMER_ENFORCE_LE(n, kIntMax, "gemm: n exceeds the 32-bit BLAS index range");
  GOSSAMER_ENFORCE_LE(k, kIntMax, "gemm: k exceeds the 32-bit BLAS index range");
  return GemmRest::kProduct;
}

void biasAdd(std::span<const float> y, std::span<const float> bias, std::size_t rows) {
  GOSSAMER_ENFORCE_EQ(y.size(), rows * bias.size(),
                      "biasAdd: y must be rows x bias.size() (rows={})", rows);
}

void biasGrad(std::span<const float> dbias, std::span<const float> dy, std::size_t rows) {
  GOSSAMER_ENFORCE_EQ(dy.size(), rows * dbias.size(),
                      "biasGrad: dy must be rows x dbias.size() (rows={})", rows);
}

void reluBackward(std::span<const float> dy, std::span<const float> y) {
  GOSSAMER_ENFORCE_EQ(dy.size(), y.size(), "reluBackward: dy and y lengths differ");
}

std::size_t softmaxCrossEntropy(std::span<const float> logits, std::span<const std::int32_t> labels,
                                std::size_t classes, std::span<const float> dlogits) {
  GOSSAMER_ENFORCE_GT(classes, std::size_t{0}, "softmaxCrossEntropy: classes must be positive");
  const std::size_t rows = labels.size();
  GOSSAMER_ENFORCE_EQ(logits.size(), rows * classes,
                      "softmaxCrossEntropy: logits must be labels.size() x classes ({})", classes);
  if (!dlogits.empty()) {
    GOSSAMER_ENFORCE_EQ(dlogits.size(), logits.size(),
                        "softmaxCrossEntropy: dlogits must be empty or as long as logits");
    enforceSameOrDisjoint(dlogits, logits, "softmaxCrossEntropy");
  }
  return rows;
}

std::size_t argmax(std::span<const float> x, std::size_t classes,
                   std::span<const std::int32_t> out) {
  GOSSAMER_ENFORCE_GT(classes, std::size_t{0}, "argmax: classes must be positive");
  GOSSAMER_ENFORCE_LE(classes, static_cast<std::size_t>(INT32_MAX), "argmax: too many classes");
  const std::size_t rows = out.size();
  GOSSAMER_ENFORCE_EQ(x.size(), rows * classes, "argmax: x must be out.size() x classes ({})",
                      classes);
  return rows;
}

std::size_t countCorrect(std::span<const float> logits, std::span<const std::int32_t> labels,
                         std::size_t classes) {
  GOSSAMER_ENFORCE_GT(classes, std::size_t{0}, "countCorrect: classes must be positive");
  const std::size_t rows = labels.size();
  GOSSAMER_ENFORCE_EQ(logits.size(), rows * classes,
                      "countCorrect: logits must be labels.size() x classes ({})", classes);
  // A row's argmax is compared with an int32 label (and CUDA's warp argmax keeps 32-bit
  // indices); a 2^31-float row is not a real case.
  GOSSAMER_ENFORCE_LE(classes, static_cast<std::size_t>(INT32_MAX),
                      "countCorrect: too many classes");
  return rows;
}

// ---- convolutional layers ----

namespace {

// A span of an op, named for the error message.
struct Named {
  const char* name;
  const void* data;
  std::size_t bytes;
};
template <typename T>
Named named(const char* name, std::span<const T> span) {
  return {name, span.data(), span.size_bytes()};
}

// Each output disjoint from every other span of the call (empty spans overlap nothing).
void enforceOutputsDisjoint(const char* op, std::initializer_list<Named> outputs,
                            std::initializer_list<Named> all) {
  for (const Named& out : outputs) {
    for (const Named& other : all) {
      if (other.data == out.data && other.bytes == out.bytes && other.name == out.name) continue;
      GOSSAMER_ENFORCE(!overlaps(out.data, out.bytes, other.data, other.bytes),
                       "{}: {} must not overlap {}", op, out.name, other.name);
    }
  }
}

// a * b, throwing when it overflows (dimensions no real tensor has, but unchecked they would
// wrap into a small size that the span checks then accept).
std::size_t checkedProduct(std::initializer_list<std::size_t> factors, const char* op,
                           const Described& shape) {
  std::size_t product = 1;
  for (std::size_t f : factors) {
    GOSSAMER_ENFORCE(!__builtin_mul_overflow(product, f, &product), "{} {}: sizes overflow", op,
                     shape);
  }
  return product;
}

// The geometry rules of a convolution; returns its description for later messages.
Described checkConv(const Conv2dShape& s, const char* op) {
  const Described shape{.conv = &s};
  GOSSAMER_ENFORCE(s.inChannels > 0 && s.height > 0 && s.width > 0 && s.outChannels > 0 &&
                       s.kernelHeight > 0 && s.kernelWidth > 0,
                   "{} {}: channels, height, width and kernel must be positive", op, shape);
  GOSSAMER_ENFORCE(s.strideHeight > 0 && s.strideWidth > 0, "{} {}: strides must be positive", op,
                   shape);
  constexpr auto kIntMax = static_cast<std::size_t>(INT_MAX);
  for (std::size_t d : {s.batch, s.inChannels, s.height, s.width, s.outChannels, s.kernelHeight,
                        s.kernelWidth, s.strideHeight, s.strideWidth, s.padHeight, s.padWidth}) {
    GOSSAMER_ENFORCE_LE(d, kIntMax, "{} {}: a dimension exceeds 2^31 - 1", op, shape);
  }
  GOSSAMER_ENFORCE(s.kernelHeight <= s.height + 2 * s.padHeight &&
                       s.kernelWidth <= s.width + 2 * s.padWidth,
                   "{} {}: the kernel is larger than the padded input", op, shape);
  const std::size_t plane = checkedProduct({s.outHeight(), s.outWidth()}, op, shape);
  const std::size_t patch = checkedProduct({s.inChannels, s.kernelHeight, s.kernelWidth}, op, shape);
  const std::size_t columns = checkedProduct({s.batch, plane}, op, shape);
  checkedProduct({s.batch, s.inChannels, s.height, s.width}, op, shape);
  checkedProduct({s.outChannels, patch}, op, shape);
  checkedProduct({s.batch, s.outChannels, plane}, op, shape);
  std::size_t rows = 0;
  GOSSAMER_ENFORCE(!__builtin_add_overflow(patch, s.outChannels, &rows), "{} {}: sizes overflow",
                   op, shape);
  checkedProduct({rows, columns}, op, shape);
  // The matrix product's dimensions go to BLAS as int.
  GOSSAMER_ENFORCE_LE(patch, kIntMax, "{} {}: inChannels x kernel exceeds the 32-bit BLAS range",
                      op, shape);
  GOSSAMER_ENFORCE_LE(columns, kIntMax,
                      "{} {}: batch x output plane exceeds the 32-bit BLAS range", op, shape);
  return shape;
}

Described checkPool(const Pool2dShape& s, const char* op) {
  const Described shape{.pool = &s};
  GOSSAMER_ENFORCE(s.channels > 0 && s.height > 0 && s.width > 0 && s.window > 0 && s.stride > 0,
                   "{} {}: channels, height, width, window and stride must be positive", op,
                   shape);
  GOSSAMER_ENFORCE(s.window <= s.height && s.window <= s.width,
                   "{} {}: the window is larger than the input", op, shape);
  // argmax holds positions in a plane as int32.
  const std::size_t plane = checkedProduct({s.height, s.width}, op, shape);
  GOSSAMER_ENFORCE_LE(plane, static_cast<std::size_t>(INT32_MAX),
                      "{} {}: an input plane exceeds 2^31 - 1 elements", op, shape);
  checkedProduct({s.batch, s.channels, plane}, op, shape);
  return shape;
}

void enforceSize(std::size_t got, std::size_t want, const char* op, const Described& shape,
                 const char* what) {
  GOSSAMER_ENFORCE_EQ(got, want, "{} {}: {} must hold {} elements", op, shape, what, want);
}

void enforceWorkspace(std::size_t got, const Conv2dShape& s, const char* op,
                      const Described& shape) {
  GOSSAMER_ENFORCE_GE(got, s.workspaceSize(), "{} {}: the workspace must hold at least {} floats",
                      op, shape, s.workspaceSize());
}

}  // namespace

std::string describe(const Conv2dShape& s) {
  return fmt::format("{}x{}x{}x{} -> {} channels, kernel {}x{}, stride {}x{}, pad {}x{}", s.batch,
                     s.inChannels, s.height, s.width, s.outChannels, s.kernelHeight,
                     s.kernelWidth, s.strideHeight, s.strideWidth, s.padHeight, s.padWidth);
}

std::string describe(const Pool2dShape& s) {
  return fmt::format("{}x{}x{}x{}, window {}, stride {}", s.batch, s.channels, s.height, s.width,
                     s.window, s.stride);
}

bool conv2d(const Conv2dShape& s, std::span<const float> input, std::span<const float> weight,
            std::span<const float> bias, std::span<const float> output,
            std::span<const float> workspace) {
  constexpr const char* kOp = "conv2d";
  const Described shape = checkConv(s, kOp);
  enforceSize(input.size(), s.inputSize(), kOp, shape, "input");
  enforceSize(weight.size(), s.weightSize(), kOp, shape, "weight");
  GOSSAMER_ENFORCE(bias.empty() || bias.size() == s.outChannels,
                   "{} {}: bias must be empty or hold {} elements, got {}", kOp, shape,
                   s.outChannels, bias.size());
  enforceSize(output.size(), s.outputSize(), kOp, shape, "output");
  enforceWorkspace(workspace.size(), s, kOp, shape);
  const auto in = named("input", input), w = named("weight", weight), b = named("bias", bias),
             out = named("output", output), ws = named("workspace", workspace);
  enforceOutputsDisjoint(kOp, {out, ws}, {in, w, b, out, ws});
  return s.batch > 0;
}

bool conv2dBackwardData(const Conv2dShape& s, std::span<const float> dOutput,
                        std::span<const float> weight, std::span<const float> dInput,
                        std::span<const float> workspace) {
  constexpr const char* kOp = "conv2dBackwardData";
  const Described shape = checkConv(s, kOp);
  enforceSize(dOutput.size(), s.outputSize(), kOp, shape, "dOutput");
  enforceSize(weight.size(), s.weightSize(), kOp, shape, "weight");
  enforceSize(dInput.size(), s.inputSize(), kOp, shape, "dInput");
  enforceWorkspace(workspace.size(), s, kOp, shape);
  const auto dout = named("dOutput", dOutput), w = named("weight", weight),
             din = named("dInput", dInput), ws = named("workspace", workspace);
  enforceOutputsDisjoint(kOp, {din, ws}, {dout, w, din, ws});
  return s.batch > 0;
}

bool conv2dBackwardWeights(const Conv2dShape& s, std::span<const float> input,
                           std::span<const float> dOutput, std::span<const float> dWeight,
                           std::span<const float> dBias, std::span<const float> workspace) {
  constexpr const char* kOp = "conv2dBackwardWeights";
  const Described shape = checkConv(s, kOp);
  enforceSize(input.size(), s.inputSize(), kOp, shape, "input");
  enforceSize(dOutput.size(), s.outputSize(), kOp, shape, "dOutput");
  enforceSize(dWeight.size(), s.weightSize(), kOp, shape, "dWeight");
  GOSSAMER_ENFORCE(dBias.empty() || dBias.size() == s.outChannels,
                   "{} {}: dBias must be empty or hold {} elements, got {}", kOp, shape,
                   s.outChannels, dBias.size());
  enforceWorkspace(workspace.size(), s, kOp, shape);
  const auto in = named("input", input), dout = named("dOutput", dOutput),
             dw = named("dWeight", dWeight), db = named("dBias", dBias),
             ws = named("workspace", workspace);
  enforceOutputsDisjoint(kOp, {dw, db, ws}, {in, dout, dw, db, ws});
  return true;  // an empty batch still writes zero gradients
}

bool maxPool2d(const Pool2dShape& s, std::span<const float> input, std::span<const float> output,
               std::span<const std::int32_t> argmax) {
  constexpr const char* kOp = "maxPool2d";
  const Described shape = checkPool(s, kOp);
  enforceSize(input.size(), s.inputSize(), kOp, shape, "input");
  enforceSize(output.size(), s.outputSize(), kOp, shape, "output");
  enforceSize(argmax.size(), s.outputSize(), kOp, shape, "argmax");
  const auto in = named("input", input), out = named("output", output),
             idx = named("argmax", argmax);
  enforceOutputsDisjoint(kOp, {out, idx}, {in, out, idx});
  return s.batch > 0;
}

bool maxPool2dBackward(const Pool2dShape& s, std::span<const float> dOutput,
                       std::span<const std::int32_t> argmax, std::span<const float> dInput) {
  constexpr const char* kOp = "maxPool2dBackward";
  const Described shape = checkPool(s, kOp);
  enforceSize(dOutput.size(), s.outputSize(), kOp, shape, "dOutput");
  enforceSize(argmax.size(), s.outputSize(), kOp, shape, "argmax");
  enforceSize(dInput.size(), s.inputSize(), kOp, shape, "dInput");
  const auto dout = named("dOutput", dOutput), idx = named("argmax", argmax),
             din = named("dInput", dInput);
  enforceOutputsDisjoint(kOp, {din}, {dout, idx, din});
  return s.batch > 0;
}

void throwLabelOutOfRange(std::int32_t label, std::size_t row, std::size_t classes) {
  GOSSAMER_THROW("softmaxCrossEntropy: label {} in row {} is outside [0, {})", label, row, classes);
}

}  // namespace gossamer::kernels::checks
