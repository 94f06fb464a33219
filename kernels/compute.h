// kernels::Compute: the only math an algorithm or model may call.
//
// Every operation works on flat float32 (or int32 label) buffers that live in the memory of the
// Compute's device: host memory for the CPU backend, device memory for CUDA. Spans passed in
// must come from this Compute's `allocate` (or, for the CPU backend, any host memory).
//
// Threading: one Compute belongs to one thread (a peer's compute thread). Operations are
// enqueued in order on the backend's stream; the CPU backend runs them synchronously. Functions
// that return a host value (dot, norm2, softmaxCrossEntropy, countCorrect) wait for the result.
// Errors: shape mismatches and misuse throw gossamer::Error (GOSSAMER_ENFORCE); backend failures
// (a CUDA error) throw gossamer::Error with the backend's message.
// Aliasing: where an operation allows an output to alias an input, the two spans must be
// identical or disjoint; a partial overlap is an error. Empty spans are valid no-ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "engine/base/enforce.h"
#include "kernels/codec.h"
#include "kernels/conv_math.h"
#include "kernels/memory_meter.h"

namespace gossamer::kernels {

enum class Device { kCpu, kCuda };

const char* deviceName(Device device);

// Where memory the caller owns lives (a framework's tensors, say): host memory, or the device
// memory of CUDA device `index`, whose work the caller orders on `stream` (a cudaStream_t of that
// device; null: its default stream).
struct MemoryPlace {
  Device device = Device::kCpu;
  int index = 0;
  void* stream = nullptr;
  std::string describe() const;  // "cpu", "cuda:1"
};

class Compute;

// Owning, move-only buffer of `T` in a Compute's memory. Freed through the Compute that made it,
// which must outlive the buffer; counted, while it lives, by the meter the Compute had when it
// made it (Compute::setMemoryMeter), which must outlive it too.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Compute* owner, T* data, std::size_t size, MemoryMeter* meter = nullptr)
      : owner_(owner), meter_(meter), data_(data), size_(size) {
    if (meter_ != nullptr) meter_->allocated(size_ * sizeof(T));
  }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  operator std::span<T>() { return span(); }
  operator std::span<const T>() const { return span(); }
  void reset();

 private:
  Compute* owner_ = nullptr;
  MemoryMeter* meter_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// One term of a weighted sum: weight * input.
struct WeightedInput {
  float weight;
  std::span<const float> input;
};

// Hyper-parameters of the local optimizer steps. `weightDecay` adds weightDecay * w to the
// gradient before the update (L2 regularisation, as in PyTorch's SGD and Adam).
struct SgdHyper {
  float lr = 0.01f;
  float weightDecay = 0.0f;
};
struct MomentumHyper {
  float lr = 0.01f;
  float momentum = 0.9f;
  bool nesterov = false;
  float weightDecay = 0.0f;
};
struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weightDecay = 0.0f;
};

// Row-major matrix operand for gemm: `rows x cols` as stored, optionally transposed in use.
enum class Transpose { kNo, kYes };

class Compute {
 public:
  virtual ~Compute() = default;

  virtual Device device() const = 0;
  // Human-readable description ("cpu (OpenBLAS, 1 thread)", "cuda:0 NVIDIA H100 ...").
  virtual std::string describe() const = 0;

  // ---- memory ----
  template <typename T>
  Buffer<T> allocate(std::size_t count) {
    GOSSAMER_ENFORCE_LE(count, SIZE_MAX / sizeof(T), "allocation size overflows");
    return Buffer<T>(this, static_cast<T*>(allocateBytes(count * sizeof(T))), count, memoryMeter());
  }
  // Where this Compute's Buffers are counted from now on (null: nowhere, the default). The
  // meter must outlive every Buffer made while it is set.
  virtual void setMemoryMeter(MemoryMeter* /*meter*/) {}
  virtual MemoryMeter* memoryMeter() const { return nullptr; }
  // Raw allocation in device memory; contents are unspecified. Throws on exhaustion.
  virtual void* allocateBytes(std::size_t bytes) = 0;
  virtual void freeBytes(void* pointer) = 0;
  // True when `pointer` points into this Compute's device memory (CUDA: of its device, whoever
  // allocated it); never on the CPU, where "device" memory is host memory. Any thread.
  virtual bool isDeviceMemory(const void* /*pointer*/) const { return false; }
  // Host <-> device copies of `bytes` bytes; block until done.
  virtual void copyToDevice(void* deviceDst, const void* hostSrc, std::size_t bytes) = 0;
  virtual void copyToHost(void* hostDst, const void* deviceSrc, std::size_t bytes) = 0;
  // Waits until every enqueued operation has finished.
  virtual void synchronize() = 0;
  // Ordering with a stream of the caller's (MemoryPlace::stream, e.g. torch's current stream),
  // so that neither side needs to wait on the host: after waitForStream, work enqueued here
  // starts after everything `stream` held at the call; after orderStreamAfter, work enqueued on
  // `stream` starts after everything enqueued here so far. Both record an event and return at
  // once. Nothing to order on the CPU backend, where an operation is done when it returns.
  virtual void waitForStream(void* /*stream*/) {}
  virtual void orderStreamAfter(void* /*stream*/) {}
  // Host memory for staging exchanges with other peers: page-locked (pinned) on CUDA, so that
  // copies to and from the device run at full speed and without a bounce buffer; ordinary
  // 64-byte-aligned memory on the CPU. Any thread. Throws on exhaustion.
  virtual void* allocateHost(std::size_t bytes);
  virtual void freeHost(void* pointer);
  // Copies `bytes` of device memory at `deviceSrc` to host memory `hostDst` (from allocateHost)
  // without stalling the compute stream: the source is captured in order with the operations
  // enqueued so far (later operations may overwrite it at once), the transfer overlaps whatever
  // comes next, and `done` runs once hostDst holds the bytes, on another thread (CUDA's callback
  // thread; it must not call into this Compute) or, on the CPU backend, before this returns.
  // hostDst must stay valid until then.
  virtual void copyToHostAsync(void* hostDst, const void* deviceSrc, std::size_t bytes,
                               std::function<void()> done);

  // Typed copies of equal-length spans (throws on a length mismatch). The source type is not
  // deduced, so Buffers and std::vectors convert: upload(buffer.span(), hostVector).
  template <typename T>
  void upload(std::span<T> deviceDst, std::span<const std::type_identity_t<T>> hostSrc);
  template <typename T>
  void download(std::span<T> hostDst, std::span<const std::type_identity_t<T>> deviceSrc);

  // ---- element-wise BLAS-1 (all spans of equal length) ----
  virtual void copy(std::span<float> dst, std::span<const float> src) = 0;
  virtual void fill(std::span<float> x, float value) = 0;
  virtual void scale(std::span<float> x, float a) = 0;
  // y = a * x + b * y (x may be y)
  virtual void axpby(std::span<float> y, float a, std::span<const float> x, float b) = 0;
  // out = sum_i w_i * x_i in ONE pass over memory. `out` may alias one of the inputs.
  // 1 <= inputs.size() <= kMaxWeightedInputs.
  virtual void weightedSum(std::span<float> out, std::span<const WeightedInput> inputs) = 0;
  void weightedSum(std::span<float> out, std::initializer_list<WeightedInput> inputs) {
    weightedSum(out, std::span<const WeightedInput>(inputs.begin(), inputs.size()));
  }
  static constexpr std::size_t kMaxWeightedInputs = 16;
  // Fused elastic pull (EASGD): d = x - c; x -= a * d; c += b * d. x and c must be disjoint.
  virtual void elasticPull(std::span<float> x, std::span<float> center, float a, float b) = 0;
  // Sum of x_i * y_i and Euclidean norm, accumulated in double.
  virtual double dot(std::span<const float> x, std::span<const float> y) = 0;
  virtual double norm2(std::span<const float> x) = 0;

  // ---- local optimizer steps (w, g and state of equal length) ----
  // w -= lr * (g + wd * w)
  virtual void sgdStep(std::span<float> w, std::span<const float> g, const SgdHyper& h) = 0;
  // v = momentum * v + (g + wd * w); w -= lr * v, or with Nesterov w -= lr * (g' + momentum * v).
  virtual void momentumStep(std::span<float> w, std::span<const float> g, std::span<float> velocity,
                            const MomentumHyper& h) = 0;
  // Adam (Kingma & Ba) with bias correction; `step` is the 1-based update count (>= 1).
  virtual void adamStep(std::span<float> w, std::span<const float> g, std::span<float> m,
                        std::span<float> v, std::int64_t step, const AdamHyper& h) = 0;

  // ---- compression (codecs, payload layouts and numerics: codec.h) ----
  // Encodes `input` under `codec` into `out`, a byte buffer in this Compute's memory of exactly
  // encodedBytes(codec, input.size()) bytes, 4-byte aligned, and returns how many of them the
  // payload uses: all of them, except for sampled top-k (4 + 8c, c <= k). Reading that count
  // back makes sampled top-k wait for the backend's stream; the other codecs do not wait.
  // With a non-empty `residual` (as long as input) this is error feedback, fused into the
  // encode: v = input + residual is encoded and the residual becomes v - decode(payload), so
  // whatever is not sent now is carried to the next call (top-k and random-k zero the entries
  // they send and keep the rest of v). With an empty residual, input itself is encoded.
  // `seed` draws random-k's positions and sampled top-k's sample, the same on every backend;
  // the other codecs ignore it. input, residual and out must be disjoint. Throws
  // gossamer::Error on an invalid codec, a size mismatch, a misaligned or overlapping buffer,
  // or (sparse codecs) n >= 2^32.
  virtual std::size_t encode(const Codec& codec, std::span<const float> input,
                             std::span<float> residual, std::span<std::byte> out,
                             std::uint64_t seed) = 0;
  // Decodes `payload` (in this Compute's memory, 4-byte aligned) into `out`, whose length is
  // the element count n the payload was encoded from: kOverwrite writes every element of out
  // (sparse codecs write 0 where nothing was sent), kAccumulate adds the decoded values to out
  // in float32. `payload` is what encode wrote (the bytes it returned), or bytes that passed
  // checkEncoded: decode checks the lengths (throwing gossamer::Error on a mismatch; a sparse
  // payload's count is taken from its length) but trusts the contents. payload and out must be
  // disjoint.
  virtual void decode(const Codec& codec, std::span<const std::byte> payload, std::span<float> out,
                      DecodeMode mode) = 0;

  // ---- dense algebra and NN ops for the built-in models ----
  // C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k, op(B) is k x n.
  // A is stored as (m x k) or, transposed, (k x m); likewise B. With beta == 0, C is overwritten
  // without being read (BLAS semantics); with k == 0, C = beta * C.
  virtual void gemm(Transpose transA, Transpose transB, std::size_t m, std::size_t n, std::size_t k,
                    float alpha, std::span<const float> a, std::span<const float> b, float beta,
                    std::span<float> c) = 0;
  // y[r, j] += bias[j] for a rows x cols matrix y.
  virtual void biasAdd(std::span<float> y, std::span<const float> bias, std::size_t rows) = 0;
  // dbias[j] = sum_r dy[r, j] (overwrites dbias).
  virtual void biasGrad(std::span<float> dbias, std::span<const float> dy, std::size_t rows) = 0;
  // x = x > 0 ? x : 0 in place (NaN becomes 0).
  virtual void relu(std::span<float> x) = 0;
  // dy[i] = y[i] > 0 ? dy[i] : 0, where y is the ReLU output.
  virtual void reluBackward(std::span<float> dy, std::span<const float> y) = 0;
  // Softmax cross-entropy over rows of `logits` (rows x classes) with integer labels. Writes
  // dlogits = (softmax - onehot) * gradScale (dlogits may alias logits; empty skips it) and
  // returns the SUM of the per-row losses. Throws, naming the label and its row, on a label
  // outside [0, classes), before writing anything.
  virtual double softmaxCrossEntropy(std::span<const float> logits,
                                     std::span<const std::int32_t> labels, std::size_t classes,
                                     std::span<float> dlogits, float gradScale) = 0;
  // out[r] = argmax_j x[r, j] (first maximum on ties).
  virtual void argmax(std::span<const float> x, std::size_t classes,
                      std::span<std::int32_t> out) = 0;
  // Number of rows whose argmax equals the label (a label outside [0, classes) counts as wrong).
  virtual std::size_t countCorrect(std::span<const float> logits,
                                   std::span<const std::int32_t> labels, std::size_t classes) = 0;

  // ---- convolutional layers: NCHW images, layouts and geometry in conv_math.h ----
  // The three convolution ops run the whole batch as ONE GEMM over an im2col matrix; they take
  // `workspace`, scratch of at least shape.workspaceSize() floats in this Compute's memory
  // (contents unspecified before and after): no per-call allocation. Every output must be
  // disjoint from every other span of the call. Throws gossamer::Error, naming the op and the
  // shape, on an invalid shape or a span of the wrong size. batch == 0 computes nothing (the
  // weight gradients of no samples are written as zeros).
  //
  // output = conv(input, weight) + bias[oc] over each output channel oc (bias empty: none).
  // input: inputSize(), weight: weightSize(), bias: empty or outChannels, output: outputSize().
  virtual void conv2d(const Conv2dShape& shape, std::span<const float> input,
                      std::span<const float> weight, std::span<const float> bias,
                      std::span<float> output, std::span<float> workspace) = 0;
  // dInput = the gradient of sum(dOutput * conv(input, weight)) with respect to input
  // (overwritten; a transposed convolution of dOutput).
  virtual void conv2dBackwardData(const Conv2dShape& shape, std::span<const float> dOutput,
                                  std::span<const float> weight, std::span<float> dInput,
                                  std::span<float> workspace) = 0;
  // dWeight and dBias (dBias empty: not computed) = the gradients of sum(dOutput * conv(...))
  // with respect to weight and bias (overwritten): dBias[oc] is the sum of dOutput over the
  // batch and plane of channel oc, accumulated in double.
  virtual void conv2dBackwardWeights(const Conv2dShape& shape, std::span<const float> input,
                                     std::span<const float> dOutput, std::span<float> dWeight,
                                     std::span<float> dBias, std::span<float> workspace) = 0;
  // output = the maximum of each pooling window, argmax = its position in its input plane
  // (ih * width + iw; the first maximum in row-major order, conv_math::windowMax). input:
  // inputSize(), output and argmax: outputSize().
  virtual void maxPool2d(const Pool2dShape& shape, std::span<const float> input,
                         std::span<float> output, std::span<std::int32_t> argmax) = 0;
  // dInput (overwritten) = dOutput routed back to the positions argmax recorded; an input that
  // is the maximum of several (overlapping) windows gets the sum of their gradients.
  virtual void maxPool2dBackward(const Pool2dShape& shape, std::span<const float> dOutput,
                                 std::span<const std::int32_t> argmax, std::span<float> dInput) = 0;
};

// ---- inline definitions ----

template <typename T>
Buffer<T>& Buffer<T>::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    meter_ = std::exchange(other.meter_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

template <typename T>
void Buffer<T>::reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->freeBytes(data_);
  if (meter_ != nullptr) meter_->freed(size_ * sizeof(T));
  owner_ = nullptr;
  meter_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

template <typename T>
void Compute::upload(std::span<T> deviceDst, std::span<const std::type_identity_t<T>> hostSrc) {
  GOSSAMER_ENFORCE_EQ(deviceDst.size(), hostSrc.size(), "upload size mismatch");
  copyToDevice(deviceDst.data(), hostSrc.data(), hostSrc.size() * sizeof(T));
}

template <typename T>
void Compute::download(std::span<T> hostDst, std::span<const std::type_identity_t<T>> deviceSrc) {
  GOSSAMER_ENFORCE_EQ(hostDst.size(), deviceSrc.size(), "download size mismatch");
  copyToHost(hostDst.data(), deviceSrc.data(), deviceSrc.size() * sizeof(T));
}

}  // namespace gossamer::kernels
