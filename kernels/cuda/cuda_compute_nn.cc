// CudaCompute's dense algebra, NN and convolution members: cuBLAS GEMM and their kernel launches.
#include <cstddef>
#include <cstdint>
#include <span>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/compute_checks.h"
#include "kernels/cuda/cuda_compute_impl.h"
#include "kernels/cuda/cuda_kernels.h"

namespace gossamer::kernels::cuda {

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

}  // namespace gossamer::kernels::cuda
