// CudaCompute: kernels::Compute on one CUDA device. Host side only (g++): shape checks, error
// reporting, cuBLAS calls and scalar read-back; the device code is in cuda_kernels.cu.
#include "kernels/cuda/cuda_compute.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "kernels/compute_checks.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gossamer::kernels::cuda {
namespace {

static_assert(detail::kMaxWeightedInputs == Compute::kMaxWeightedInputs);

// Throws gossamer::Error for a failed CUDA runtime call, pointing at the caller's file:line.
// Clears the runtime's last-error slot first, so the next launch is not blamed for this one.
[[noreturn]] void throwCudaError(const char* call, const char* file, int line, cudaError_t error) {
  cudaGetLastError();
  gossamer::detail::throwEnforce(file, line, nullptr,
                                 fmt::format("CUDA error {} in {}: {}", cudaGetErrorName(error),
                                             call, cudaGetErrorString(error)));
}

[[noreturn]] void throwCublasError(const char* call, const char* file, int line,
                                   cublasStatus_t status) {
  gossamer::detail::throwEnforce(
      file, line, nullptr,
      fmt::format("cuBLAS error {} in {}: {}", cublasGetStatusName(status), call,
                  cublasGetStatusString(status)));
}

// GOSSAMER_CUDA_CHECK(cudaCall(...)): throws gossamer::Error naming the call, file:line and the
// CUDA error string when the call does not return cudaSuccess.
#define GOSSAMER_CUDA_CHECK(call)                                      \
  do {                                                                 \
    const cudaError_t gossamer_cuda_error_ = (call);                   \
    if (gossamer_cuda_error_ != cudaSuccess) [[unlikely]] {            \
      throwCudaError(#call, __FILE__, __LINE__, gossamer_cuda_error_); \
    }                                                                  \
  } while (0)

#define GOSSAMER_CUBLAS_CHECK(call)                                         \
  do {                                                                      \
    const cublasStatus_t gossamer_cublas_status_ = (call);                  \
    if (gossamer_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {    \
      throwCublasError(#call, __FILE__, __LINE__, gossamer_cublas_status_); \
    }                                                                       \
  } while (0)

// Logs a failure in a path that must not throw (destructor, freeBytes) and clears it.
// cudaErrorCudartUnloading (a Buffer freed after the runtime shut down at exit) is not logged.
void logCudaError(const char* what, cudaError_t error) {
  cudaGetLastError();
  if (error == cudaErrorCudartUnloading) return;
  try {
    log::get("kernels")->error("{} failed: {} ({})", what, cudaGetErrorString(error),
                               cudaGetErrorName(error));
  } catch (...) {
    // Logging is best effort here; the caller cannot report anything either.
  }
}

class CudaCompute final : public Compute {
 public:
  // Binds to `device` (already validated by makeCompute) and creates the stream, the cuBLAS
  // handle and the scratch. Throws gossamer::Error and releases what it made on failure.
  explicit CudaCompute(int device);
  ~CudaCompute() override;
  CudaCompute(const CudaCompute&) = delete;
  CudaCompute& operator=(const CudaCompute&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string describe() const override { return description_; }
  void setMemoryMeter(MemoryMeter* meter) override { meter_ = meter; }
  MemoryMeter* memoryMeter() const override { return meter_; }

  void* allocateBytes(std::size_t bytes) override;
  // Never throws (it runs in Buffer destructors): a failure is logged.
  void freeBytes(void* pointer) override;
  bool isDeviceMemory(const void* pointer) const override;
  void copyToDevice(void* deviceDst, const void* hostSrc, std::size_t bytes) override;
  void copyToHost(void* hostDst, const void* deviceSrc, std::size_t bytes) override;
  void synchronize() override;
  void* allocateHost(std::size_t bytes) override;
  // Never throws: a failure is logged.
  void freeHost(void* pointer) override;
  // A device-to-device snapshot on the compute stream (so later kernels may overwrite the
  // source at once), then the device-to-host copy on the copy stream, then `done` from CUDA's
  // callback thread.
  void copyToHostAsync(void* hostDst, const void* deviceSrc, std::size_t bytes,
                       std::function<void()> done) override;

  void copy(std::span<float> dst, std::span<const float> src) override;
  void fill(std::span<float> x, float value) override;
  void scale(std::span<float> x, float a) override;
  void axpby(std::span<float> y, float a, std::span<const float> x, float b) override;
  void weightedSum(std::span<float> out, std::span<const WeightedInput> inputs) override;
  using Compute::weightedSum;
  void elasticPull(std::span<float> x, std::span<float> center, float a, float b) override;
  double dot(std::span<const float> x, std::span<const float> y) override;
  double norm2(std::span<const float> x) override;

  void sgdStep(std::span<float> w, std::span<const float> g, const SgdHyper& h) override;
  void momentumStep(std::span<float> w, std::span<const float> g, std::span<float> velocity,
                    const MomentumHyper& h) override;
  void adamStep(std::span<float> w, std::span<const float> g, std::span<float> m,
                std::span<float> v, std::int64_t step, const AdamHyper& h) override;

  std::size_t encode(const Codec& codec, std::span<const float> input, std::span<float> residual,
                     std::span<std::byte> out, std::uint64_t seed) override;
  void decode(const Codec& codec, std::span<const std::byte> payload, std::span<float> out,
              DecodeMode mode) override;

  void gemm(Transpose transA, Transpose transB, std::size_t m, std::size_t n, std::size_t k,
            float alpha, std::span<const float> a, std::span<const float> b, float beta,
            std::span<float> c) override;
  void biasAdd(std::span<float> y, std::span<const float> bias, std::size_t rows) override;
  void biasGrad(std::span<float> dbias, std::span<const float> dy, std::size_t rows) override;
  void relu(std::span<float> x) override;
  void reluBackward(std::span<float> dy, std::span<const float> y) override;
  double softmaxCrossEntropy(std::span<const float> logits, std::span<const std::int32_t> labels,
                             std::size_t classes, std::span<float> dlogits,
                             float gradScale) override;
  void argmax(std::span<const float> x, std::size_t classes, std::span<std::int32_t> out) override;
  std::size_t countCorrect(std::span<const float> logits, std::span<const std::int32_t> labels,
                           std::size_t classes) override;

  void conv2d(const Conv2dShape& shape, std::span<const float> input, std::span<const float> weight,
              std::span<const float> bias, std::span<float> output,
              std::span<float> workspace) override;
  void conv2dBackwardData(const Conv2dShape& shape, std::span<const float> dOutput,
                          std::span<const float> weight, std::span<float> dInput,
                          std::span<float> workspace) override;
  void conv2dBackwardWeights(const Conv2dShape& shape, std::span<const float> input,
                             std::span<const float> dOutput, std::span<float> dWeight,
                             std::span<float> dBias, std::span<float> workspace) override;
  void maxPool2d(const Pool2dShape& shape, std::span<const float> input, std::span<float> output,
                 std::span<std::int32_t> argmax) override;
  void maxPool2dBackward(const Pool2dShape& shape, std::span<const float> dOutput,
                         std::span<const std::int32_t> argmax, std::span<float> dInput) override;

 private:
  // Makes device_ current on the calling thread (the Compute may have been created on another
  // thread than the one that uses it; a stream only accepts work from its own device).
  void activate() const;
  detail::Launch launch() const { return {stream_, multiprocessors_}; }
  // Copies the scratch results to pinned host memory and waits for the stream.
  detail::ScratchResults readResults();
  // Frees whatever was created; safe on a partially constructed object; never throws.
  void release() noexcept;

  int device_;
  MemoryMeter* meter_ = nullptr;
  int multiprocessors_ = 1;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copyStream_ = nullptr;  // device-to-host staging, overlapped with stream_
  cublasHandle_t blas_ = nullptr;
  detail::Scratch* scratch_ = nullptr;             // device memory
  detail::ScratchResults* hostResults_ = nullptr;  // pinned host memory
};

CudaCompute::CudaCompute(int device) : device_(device) {
  try {
    GOSSAMER_CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp properties{};
    GOSSAMER_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
    multiprocessors_ = std::max(properties.multiProcessorCount, 1);
    description_ = fmt::format("cuda:{} {} (sm_{}{}, {} GiB)", device_,
                               static_cast<const char*>(properties.name), properties.major,
                               properties.minor, properties.totalGlobalMem >> 30);
    if (const cudaError_t error = detail::checkKernelImage(); error != cudaSuccess) {
      GOSSAMER_THROW(
          "{}: gossamer's CUDA kernels have no image for sm_{}{} ({}); rebuild with "
          "-DCMAKE_CUDA_ARCHITECTURES={}{}",
          description_, properties.major, properties.minor, cudaGetErrorString(error),
          properties.major, properties.minor);
    }
    GOSSAMER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GOSSAMER_CUDA_CHECK(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking));
    GOSSAMER_CUBLAS_CHECK(cublasCreate(&blas_));
    GOSSAMER_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    GOSSAMER_CUBLAS_CHECK(cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST));
    // Full FP32 GEMM (no TF32 tensor cores), so results stay within float tolerance of the CPU
    // reference backend.
    GOSSAMER_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    GOSSAMER_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(detail::Scratch)));
    GOSSAMER_CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&hostResults_), sizeof(detail::ScratchResults)));
  } catch (...) {
    release();
    throw;
  }
}

CudaCompute::~CudaCompute() {
  if (const cudaError_t error = cudaSetDevice(device_); error != cudaSuccess) {
    logCudaError("cudaSetDevice in ~CudaCompute", error);
  }
  for (cudaStream_t s : {stream_, copyStream_}) {
    if (s == nullptr) continue;
    if (const cudaError_t error = cudaStreamSynchronize(s); error != cudaSuccess) {
      logCudaError("cudaStreamSynchronize in ~CudaCompute", error);
    }
  }
  release();
}

void CudaCompute::release() noexcept {
  // Errors are ignored: this runs on teardown or after a failure that is already reported.
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (copyStream_ != nullptr) cudaStreamDestroy(copyStream_);
  copyStream_ = nullptr;
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (hostResults_ != nullptr) cudaFreeHost(hostResults_);
  blas_ = nullptr;
  stream_ = nullptr;
  scratch_ = nullptr;
  hostResults_ = nullptr;
  cudaGetLastError();
}

void CudaCompute::activate() const {
  int current = -1;
  GOSSAMER_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) GOSSAMER_CUDA_CHECK(cudaSetDevice(device_));
}

detail::ScratchResults CudaCompute::readResults() {
  GOSSAMER_CUDA_CHECK(cudaMemcpyAsync(hostResults_, &scratch_->results,
                                      sizeof(detail::ScratchResults), cudaMemcpyDeviceToHost,
                                      stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *hostResults_;
}

// ---- memory ----

bool CudaCompute::isDeviceMemory(const void* pointer) const {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError();  // an unknown host pointer is not an error worth keeping
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void* CudaCompute::allocateBytes(std::size_t bytes) {
  activate();
  void* pointer = nullptr;
  // A zero-byte buffer still gets a unique, freeable pointer, as on the CPU backend.
  if (const cudaError_t error = cudaMalloc(&pointer, std::max<std::size_t>(bytes, 1));
      error != cudaSuccess) {
    cudaGetLastError();
    std::size_t freeMemory = 0;
    std::size_t totalBytes = 0;
    cudaMemGetInfo(&freeMemory, &totalBytes);
    cudaGetLastError();
    GOSSAMER_THROW("{}: cudaMalloc of {} bytes ({:.1f} MiB) failed: {} ({:.1f} of {:.1f} MiB free)",
                   description_, bytes, static_cast<double>(bytes) / (1 << 20),
                   cudaGetErrorString(error), static_cast<double>(freeMemory) / (1 << 20),
                   static_cast<double>(totalBytes) / (1 << 20));
  }
  return pointer;
}

void CudaCompute::freeBytes(void* pointer) {
  if (pointer == nullptr) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_) cudaSetDevice(device_);
  if (const cudaError_t error = cudaFree(pointer); error != cudaSuccess) {
    logCudaError("cudaFree", error);
  }
}

void CudaCompute::copyToDevice(void* deviceDst, const void* hostSrc, std::size_t bytes) {
  if (bytes == 0) return;
  activate();
  GOSSAMER_CUDA_CHECK(cudaMemcpyAsync(deviceDst, hostSrc, bytes, cudaMemcpyHostToDevice, stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaCompute::copyToHost(void* hostDst, const void* deviceSrc, std::size_t bytes) {
  if (bytes == 0) return;
  activate();
  GOSSAMER_CUDA_CHECK(cudaMemcpyAsync(hostDst, deviceSrc, bytes, cudaMemcpyDeviceToHost, stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void* CudaCompute::allocateHost(std::size_t bytes) {
  activate();
  void* pointer = nullptr;
  if (const cudaError_t error = cudaMallocHost(&pointer, std::max<std::size_t>(bytes, 1));
      error != cudaSuccess) {
    cudaGetLastError();
    GOSSAMER_THROW("{}: cudaMallocHost of {} bytes (pinned staging) failed: {}", description_,
                   bytes, cudaGetErrorString(error));
  }
  return pointer;
}

void CudaCompute::freeHost(void* pointer) {
  if (pointer == nullptr) return;
  if (const cudaError_t error = cudaFreeHost(pointer); error != cudaSuccess) {
    logCudaError("cudaFreeHost", error);
  }
}

namespace {
// cudaLaunchHostFunc's trampoline: runs and frees the std::function.
void CUDART_CB runDone(void* data) {
  std::unique_ptr<std::function<void()>> done(static_cast<std::function<void()>*>(data));
  (*done)();
}
}  // namespace

void CudaCompute::copyToHostAsync(void* hostDst, const void* deviceSrc, std::size_t bytes,
                                  std::function<void()> done) {
  if (bytes == 0) {
    done();
    return;
  }
  activate();
  // Stream-ordered allocation: freed on the copy stream once the transfer has read it.
  void* snapshot = nullptr;
  GOSSAMER_CUDA_CHECK(cudaMallocAsync(&snapshot, bytes, stream_));
  GOSSAMER_CUDA_CHECK(
      cudaMemcpyAsync(snapshot, deviceSrc, bytes, cudaMemcpyDeviceToDevice, stream_));
  cudaEvent_t captured = nullptr;
  GOSSAMER_CUDA_CHECK(cudaEventCreateWithFlags(&captured, cudaEventDisableTiming));
  GOSSAMER_CUDA_CHECK(cudaEventRecord(captured, stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamWaitEvent(copyStream_, captured, 0));
  cudaEventDestroy(captured);  // released once the wait is satisfied
  GOSSAMER_CUDA_CHECK(
      cudaMemcpyAsync(hostDst, snapshot, bytes, cudaMemcpyDeviceToHost, copyStream_));
  GOSSAMER_CUDA_CHECK(cudaFreeAsync(snapshot, copyStream_));
  auto callback = std::make_unique<std::function<void()>>(std::move(done));
  GOSSAMER_CUDA_CHECK(cudaLaunchHostFunc(copyStream_, runDone, callback.get()));
  callback.release();  // runDone owns it now
}

void CudaCompute::synchronize() {
  activate();
  GOSSAMER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamSynchronize(copyStream_));
}

// ---- element-wise BLAS-1 ----

void CudaCompute::copy(std::span<float> dst, std::span<const float> src) {
  checks::copy(dst, src);
  if (src.empty() || dst.data() == src.data()) return;
  activate();
  GOSSAMER_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaCompute::fill(std::span<float> x, float value) {
  activate();
  GOSSAMER_CUDA_CHECK(detail::fill(x.data(), x.size(), value, launch()));
}

void CudaCompute::scale(std::span<float> x, float a) {
  activate();
  GOSSAMER_CUDA_CHECK(detail::scale(x.data(), x.size(), a, launch()));
}

void CudaCompute::axpby(std::span<float> y, float a, std::span<const float> x, float b) {
  checks::axpby(y, x);
  activate();
  GOSSAMER_CUDA_CHECK(detail::axpby(y.data(), x.data(), y.size(), a, b, launch()));
}

void CudaCompute::weightedSum(std::span<float> out, std::span<const WeightedInput> inputs) {
  checks::weightedSum(out, inputs);
  detail::WeightedInputs terms;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    terms.inputs[i] = inputs[i].input.data();
    terms.weights[i] = inputs[i].weight;
  }
  terms.count = static_cast<int>(inputs.size());
  activate();
  GOSSAMER_CUDA_CHECK(detail::weightedSum(out.data(), terms, out.size(), launch()));
}

void CudaCompute::elasticPull(std::span<float> x, std::span<float> center, float a, float b) {
  checks::elasticPull(x, center);
  activate();
  GOSSAMER_CUDA_CHECK(detail::elasticPull(x.data(), center.data(), x.size(), a, b, launch()));
}

double CudaCompute::dot(std::span<const float> x, std::span<const float> y) {
  checks::dot(x, y);
  activate();
  GOSSAMER_CUDA_CHECK(detail::dot(x.data(), y.data(), x.size(), scratch_, launch()));
  return readResults().value;
}

double CudaCompute::norm2(std::span<const float> x) {
  activate();
  GOSSAMER_CUDA_CHECK(detail::sumOfSquares(x.data(), x.size(), scratch_, launch()));
  return std::sqrt(readResults().value);
}

// ---- local optimizer steps ----

void CudaCompute::sgdStep(std::span<float> w, std::span<const float> g, const SgdHyper& h) {
  checks::sgdStep(w, g);
  activate();
  GOSSAMER_CUDA_CHECK(detail::sgdStep(w.data(), g.data(), w.size(), h.lr, h.weightDecay, launch()));
}

void CudaCompute::momentumStep(std::span<float> w, std::span<const float> g,
                               std::span<float> velocity, const MomentumHyper& h) {
  checks::momentumStep(w, g, velocity);
  activate();
  GOSSAMER_CUDA_CHECK(detail::momentumStep(w.data(), g.data(), velocity.data(), w.size(), h.lr,
                                           h.momentum, h.nesterov, h.weightDecay, launch()));
}

void CudaCompute::adamStep(std::span<float> w, std::span<const float> g, std::span<float> m,
                           std::span<float> v, std::int64_t step, const AdamHyper& h) {
  checks::adamStep(w, g, m, v, step);
  // Bias corrections in double (1 - beta^t loses all precision in float once beta^t ~ 1 - 1e-7),
  // inverted and rounded once to float, exactly as the CPU reference does.
  const auto t = static_cast<double>(step);
  const auto inverseCorrection1 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  const auto inverseCorrection2 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta2), t)));
  activate();
  GOSSAMER_CUDA_CHECK(detail::adamStep(w.data(), g.data(), m.data(), v.data(), w.size(), h.lr,
                                       h.beta1, h.beta2, h.epsilon, h.weightDecay,
                                       inverseCorrection1, inverseCorrection2, launch()));
}

// ---- compression (kernels in cuda_codec.cu) ----

std::size_t CudaCompute::encode(const Codec& codec, std::span<const float> input,
                                std::span<float> residual, std::span<std::byte> out,
                                std::uint64_t seed) {
  checks::encode(codec, input, residual, out);
  const std::size_t n = input.size();
  const float* in = input.data();
  float* res = residual.empty() ? nullptr : residual.data();
  void* payload = out.data();
  activate();
  if (isSparse(codec.kind) && n == 0) {
    // Only the count, 0.
    GOSSAMER_CUDA_CHECK(cudaMemsetAsync(payload, 0, 4, stream_));
    return out.size();
  }
  switch (codec.kind) {
    case CodecKind::kNone:
      GOSSAMER_CUDA_CHECK(detail::encodeNone(in, res, static_cast<float*>(payload), n, launch()));
      break;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      GOSSAMER_CUDA_CHECK(detail::encodeHalf(codec.kind == CodecKind::kBf16, in, res,
                                             static_cast<std::uint16_t*>(payload), n, launch()));
      break;
    case CodecKind::kInt8:
    case CodecKind::kInt4:
      GOSSAMER_CUDA_CHECK(detail::encodeBlocks(codec.kind == CodecKind::kInt4, in, res, payload, n,
                                               codec.blockSize, launch()));
      break;
    case CodecKind::kTopK:
      if (codec.selection == TopKSelection::kSampled) {
        const std::size_t m = sampleSize(codec, n);
        GOSSAMER_CUDA_CHECK(detail::encodeTopKSampled(in, res, payload, n, sparseCount(codec, n), m,
                                                      sampledThresholdRank(codec, m), seed,
                                                      launch()));
        std::uint32_t count = 0;
        copyToHost(&count, payload, sizeof(count));
        return 4 + 8 * std::size_t{count};
      }
      GOSSAMER_CUDA_CHECK(
          detail::encodeTopKExact(in, res, payload, n, sparseCount(codec, n), launch()));
      break;
    case CodecKind::kRandK:
      GOSSAMER_CUDA_CHECK(
          detail::encodeRandK(in, res, payload, n, sparseCount(codec, n), seed, launch()));
      break;
  }
  return out.size();
}

void CudaCompute::decode(const Codec& codec, std::span<const std::byte> payload,
                         std::span<float> out, DecodeMode mode) {
  const std::size_t count = checks::decode(codec, payload, out);
  const std::size_t n = out.size();
  const bool accumulate = mode == DecodeMode::kAccumulate;
  const void* p = payload.data();
  activate();
  switch (codec.kind) {
    case CodecKind::kNone:
      if (n == 0) return;
      if (accumulate) {
        GOSSAMER_CUDA_CHECK(
            detail::axpby(out.data(), static_cast<const float*>(p), n, 1.0f, 1.0f, launch()));
      } else {
        GOSSAMER_CUDA_CHECK(
            cudaMemcpyAsync(out.data(), p, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
      }
      return;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      GOSSAMER_CUDA_CHECK(detail::decodeHalf(codec.kind == CodecKind::kBf16,
                                             static_cast<const std::uint16_t*>(p), out.data(), n,
                                             accumulate, launch()));
      return;
    case CodecKind::kInt8:
    case CodecKind::kInt4:
      GOSSAMER_CUDA_CHECK(detail::decodeBlocks(codec.kind == CodecKind::kInt4, p, out.data(), n,
                                               codec.blockSize, accumulate, launch()));
      return;
    case CodecKind::kTopK:
    case CodecKind::kRandK:
      GOSSAMER_CUDA_CHECK(detail::decodeSparse(p, count, out.data(), n, accumulate, launch()));
      return;
  }
}

// ---- dense algebra and NN ops ----

void CudaCompute::gemm(Transpose transA, Transpose transB, std::size_t m, std::size_t n,
                       std::size_t k, float alpha, std::span<const float> a,
                       std::span<const float> b, float beta, std::span<float> c) {
  if (checks::gemm(*this, m, n, k, a, b, beta, c) == checks::GemmRest::kDone) return;
  // cuBLAS is column-major; a row-major matrix read column-major is its transpose. So compute
  // C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m): B is the first operand, A the second, and
  // each keeps its own op. Leading dimensions are the row lengths of the STORED row-major
  // matrices: A is m x k (lda = k) or, transposed, k x m (lda = m); B is k x n (ldb = n) or,
  // transposed, n x k (ldb = k); C is m x n (ldc = n). Each fits in cuBLAS's int: checks::gemm
  // rejected larger dimensions.
  const bool tA = transA == Transpose::kYes;
  const bool tB = transB == Transpose::kYes;
  const int lda = static_cast<int>(tA ? m : k);
  const int ldb = static_cast<int>(tB ? k : n);
  const int ldc = static_cast<int>(n);
  activate();
  GOSSAMER_CUBLAS_CHECK(cublasSgemm(blas_, tB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    tA ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                    static_cast<int>(m), static_cast<int>(k), &alpha, b.data(), ldb,
                                    a.data(), lda, &beta, c.data(), ldc));
}

void CudaCompute::biasAdd(std::span<float> y, std::span<const float> bias, std::size_t rows) {
  checks::biasAdd(y, bias, rows);
  activate();
  GOSSAMER_CUDA_CHECK(detail::biasAdd(y.data(), bias.data(), rows, bias.size(), launch()));
}

void CudaCompute::biasGrad(std::span<float> dbias, std::span<const float> dy, std::size_t rows) {
  checks::biasGrad(dbias, dy, rows);
  activate();
  GOSSAMER_CUDA_CHECK(detail::biasGrad(dbias.data(), dy.data(), rows, dbias.size(), launch()));
}

void CudaCompute::relu(std::span<float> x) {
  activate();
  GOSSAMER_CUDA_CHECK(detail::relu(x.data(), x.size(), launch()));
}

void CudaCompute::reluBackward(std::span<float> dy, std::span<const float> y) {
  checks::reluBackward(dy, y);
  activate();
  GOSSAMER_CUDA_CHECK(detail::reluBackward(dy.data(), y.data(), dy.size(), launch()));
}

double CudaCompute::softmaxCrossEntropy(std::span<const float> logits,
                                        std::span<const std::int32_t> labels, std::size_t classes,
                                        std::span<float> dlogits, float gradScale) {
  const std::size_t rows = checks::softmaxCrossEntropy(logits, labels, classes, dlogits);
  activate();
  GOSSAMER_CUDA_CHECK(detail::softmaxCrossEntropy(logits.data(), labels.data(), rows, classes,
                                                  dlogits.empty() ? nullptr : dlogits.data(),
                                                  gradScale, scratch_, launch()));
  const detail::ScratchResults results = readResults();
  if (results.badRow != detail::kNoBadRow) {
    // Nothing was written (the kernel checks the flag first), like the CPU reference, which
    // validates every label before any output; the row is the first bad one, as there.
    const auto row = static_cast<std::size_t>(results.badRow);
    std::int32_t label = 0;
    copyToHost(&label, labels.data() + row, sizeof(label));
    checks::throwLabelOutOfRange(label, row, classes);
  }
  return results.value;
}

void CudaCompute::argmax(std::span<const float> x, std::size_t classes,
                         std::span<std::int32_t> out) {
  const std::size_t rows = checks::argmax(x, classes, out);
  activate();
  GOSSAMER_CUDA_CHECK(detail::argmax(x.data(), rows, classes, out.data(), launch()));
}

std::size_t CudaCompute::countCorrect(std::span<const float> logits,
                                      std::span<const std::int32_t> labels, std::size_t classes) {
  const std::size_t rows = checks::countCorrect(logits, labels, classes);
  activate();
  GOSSAMER_CUDA_CHECK(
      detail::countCorrect(logits.data(), labels.data(), rows, classes, scratch_, launch()));
  return static_cast<std::size_t>(readResults().count);
}

// ---- convolutional layers: the CPU reference's plan (im2col, one cuBLAS GEMM over the whole
// batch, a layout change) with conv_math.h's per-element kernels ----

void CudaCompute::conv2d(const Conv2dShape& shape, std::span<const float> input,
                         std::span<const float> weight, std::span<const float> bias,
                         std::span<float> output, std::span<float> workspace) {
  if (!checks::conv2d(shape, input, weight, bias, output, workspace)) return;
  const std::size_t patch = shape.patch(), cols = shape.columns();
  std::span<float> columns = workspace.first(patch * cols);
  std::span<float> product = workspace.subspan(patch * cols, shape.outChannels * cols);
  activate();
  GOSSAMER_CUDA_CHECK(detail::im2col(shape, input.data(), columns.data(), launch()));
  gemm(Transpose::kNo, Transpose::kNo, shape.outChannels, cols, patch, 1.0f, weight, columns, 0.0f,
       product);
  GOSSAMER_CUDA_CHECK(detail::channelMajorToNchw(
      product.data(), bias.empty() ? nullptr : bias.data(), output.data(), shape.batch,
      shape.outChannels, shape.outPlane(), launch()));
}

void CudaCompute::conv2dBackwardData(const Conv2dShape& shape, std::span<const float> dOutput,
                                     std::span<const float> weight, std::span<float> dInput,
                                     std::span<float> workspace) {
  if (!checks::conv2dBackwardData(shape, dOutput, weight, dInput, workspace)) return;
  const std::size_t patch = shape.patch(), cols = shape.columns();
  std::span<float> dColumns = workspace.first(patch * cols);
  std::span<float> dProduct = workspace.subspan(patch * cols, shape.outChannels * cols);
  activate();
  GOSSAMER_CUDA_CHECK(detail::nchwToChannelMajor(dOutput.data(), dProduct.data(), shape.batch,
                                                 shape.outChannels, shape.outPlane(), launch()));
  gemm(Transpose::kYes, Transpose::kNo, patch, cols, shape.outChannels, 1.0f, weight, dProduct,
       0.0f, dColumns);
  GOSSAMER_CUDA_CHECK(detail::col2im(shape, dColumns.data(), dInput.data(), launch()));
}

void CudaCompute::conv2dBackwardWeights(const Conv2dShape& shape, std::span<const float> input,
                                        std::span<const float> dOutput, std::span<float> dWeight,
                                        std::span<float> dBias, std::span<float> workspace) {
  checks::conv2dBackwardWeights(shape, input, dOutput, dWeight, dBias, workspace);
  const std::size_t patch = shape.patch(), cols = shape.columns();
  std::span<float> columns = workspace.first(patch * cols);
  std::span<float> dProduct = workspace.subspan(patch * cols, shape.outChannels * cols);
  activate();
  GOSSAMER_CUDA_CHECK(detail::im2col(shape, input.data(), columns.data(), launch()));
  GOSSAMER_CUDA_CHECK(detail::nchwToChannelMajor(dOutput.data(), dProduct.data(), shape.batch,
                                                 shape.outChannels, shape.outPlane(), launch()));
  // k = 0 (an empty batch) zeroes dWeight.
  gemm(Transpose::kNo, Transpose::kYes, shape.outChannels, patch, cols, 1.0f, dProduct, columns,
       0.0f, dWeight);
  if (!dBias.empty()) {
    GOSSAMER_CUDA_CHECK(
        detail::rowSums(dProduct.data(), dBias.data(), shape.outChannels, cols, launch()));
  }
}

void CudaCompute::maxPool2d(const Pool2dShape& shape, std::span<const float> input,
                            std::span<float> output, std::span<std::int32_t> argmax) {
  if (!checks::maxPool2d(shape, input, output, argmax)) return;
  activate();
  GOSSAMER_CUDA_CHECK(
      detail::maxPool2d(shape, input.data(), output.data(), argmax.data(), launch()));
}

void CudaCompute::maxPool2dBackward(const Pool2dShape& shape, std::span<const float> dOutput,
                                    std::span<const std::int32_t> argmax, std::span<float> dInput) {
  if (!checks::maxPool2dBackward(shape, dOutput, argmax, dInput)) return;
  activate();
  GOSSAMER_CUDA_CHECK(
      detail::maxPool2dBackward(shape, dOutput.data(), argmax.data(), dInput.data(), launch()));
}

}  // namespace

bool isViable(std::string* reason) {
  try {
    int count = 0;
    if (const cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
      cudaGetLastError();
      if (reason != nullptr) *reason = cudaGetErrorString(error);
      return false;
    }
    if (count <= 0) {
      if (reason != nullptr) *reason = "no CUDA device";
      return false;
    }
    return true;
  } catch (const std::exception& error) {  // only std::string assignment can throw
    if (reason != nullptr) {
      try {
        *reason = error.what();
      } catch (...) {
      }
    }
    return false;
  }
}

std::unique_ptr<Compute> makeCompute(const Options& options) {
  int count = 0;
  GOSSAMER_CUDA_CHECK(cudaGetDeviceCount(&count));
  GOSSAMER_ENFORCE_GE(options.deviceIndex, 0, "CUDA device index must not be negative");
  GOSSAMER_ENFORCE_LT(options.deviceIndex, count, "CUDA device index beyond the visible devices");
  auto compute = std::make_unique<CudaCompute>(options.deviceIndex);
  log::get("kernels")->debug("CUDA backend on {}", compute->describe());
  return compute;
}

}  // namespace gossamer::kernels::cuda
