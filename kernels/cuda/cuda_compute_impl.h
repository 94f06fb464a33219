// CudaCompute, the CUDA backend's Compute, and its CUDA/cuBLAS error checks (internal).
//
// Shared by cuda_compute.cc (the lifetime, memory, element-wise, optimizer and codec members,
// makeCompute) and cuda_compute_nn.cc (the GEMM, NN and convolution members). The device code
// is in the .cu files, behind cuda_kernels.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/compute.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gossamer::kernels::cuda {

// Throws gossamer::Error for a failed CUDA runtime call, pointing at the caller's file:line.
// Clears the runtime's last-error slot first, so the next launch is not blamed for this one.
[[noreturn]] void throwCudaError(const char* call, const char* file, int line, cudaError_t error);
// Throws gossamer::Error for a failed cuBLAS call, pointing at the caller's file:line.
[[noreturn]] void throwCublasError(const char* call, const char* file, int line,
                                   cublasStatus_t status);

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
  // One event of this Compute's (`order_`), recorded on one stream and waited for by the other.
  void waitForStream(void* stream) override;
  void orderStreamAfter(void* stream) override;
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
  cudaEvent_t order_ = nullptr;  // waitForStream, orderStreamAfter (re-recorded at each call)
  detail::Scratch* scratch_ = nullptr;             // device memory
  detail::ScratchResults* hostResults_ = nullptr;  // pinned host memory
};

}  // namespace gossamer::kernels::cuda
