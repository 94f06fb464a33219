// CudaCompute: kernels::Compute on one CUDA device. Host side only (g++): shape checks, error
// reporting, cuBLAS calls and scalar read-back; the device code is in the .cu files (behind
// cuda_kernels.h). This file: the error checks, the lifetime, memory and copies, the element-wise,
// optimizer and codec ops, and makeCompute; the GEMM, NN and convolution ops are in
// cuda_compute_nn.cc (the class is declared in cuda_compute_impl.h).
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
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/cuda_compute_impl.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gossamer::kernels::cuda {

static_assert(detail::kMaxWeightedInputs == Compute::kMaxWeightedInputs);

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

namespace {

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

}  // namespace

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
    GOSSAMER_CUDA_CHECK(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming));
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
  if (order_ != nullptr) cudaEventDestroy(order_);
  order_ = nullptr;
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
  return (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) &&
         attributes.device == device_;
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

// cudaStreamWaitEvent waits for the event as recorded at the call, so one event serves every
// ordering in turn: re-recording it later does not change what an earlier wait waits for.
void CudaCompute::waitForStream(void* stream) {
  activate();
  GOSSAMER_CUDA_CHECK(cudaEventRecord(order_, static_cast<cudaStream_t>(stream)));
  GOSSAMER_CUDA_CHECK(cudaStreamWaitEvent(stream_, order_, 0));
}

void CudaCompute::orderStreamAfter(void* stream) {
  activate();
  GOSSAMER_CUDA_CHECK(cudaEventRecord(order_, stream_));
  GOSSAMER_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), order_, 0));
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
    if (const std::string& error = cublasLoadError(); !error.empty()) {
      if (reason != nullptr) *reason = "cuBLAS: " + error;
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
