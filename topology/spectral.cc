// LAPACK-backed spectra and the spectral gap (definitions and the choice of LAPACK: spectral.h).
#include "topology/spectral.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>

#include "engine/base/enforce.h"

// LAPACK (Fortran symbols in OpenBLAS, 32-bit integers). The trailing arguments are the hidden
// lengths gfortran passes for CHARACTER arguments; leaving them out is undefined behaviour.
extern "C" {
void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
            double* work, const int* lwork, int* info, std::size_t jobzLength,
            std::size_t uploLength);
void dgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, double* a,
             const int* lda, double* s, double* u, const int* ldu, double* vt, const int* ldvt,
             double* work, const int* lwork, int* info, std::size_t jobuLength,
             std::size_t jobvtLength);
void dgeev_(const char* jobvl, const char* jobvr, const int* n, double* a, const int* lda,
            double* wr, double* wi, double* vl, const int* ldvl, double* vr, const int* ldvr,
            double* work, const int* lwork, int* info, std::size_t jobvlLength,
            std::size_t jobvrLength);
}

namespace gossamer::topology {
namespace {

constexpr double kSnapToZero = 1e-12;
// Column sums within this of 1 make W doubly stochastic (Graph accepts row sums within 1e-9).
constexpr double kColumnSumTolerance = 1e-9;

int lapackSize(std::span<const double> matrix, std::size_t n) {
  GOSSAMER_ENFORCE(n >= 1 && n <= static_cast<std::size_t>(INT_MAX), "matrix size {} out of range",
                   n);
  GOSSAMER_ENFORCE_EQ(matrix.size(), n * n, "expected an n x n matrix with n = {}", n);
  return static_cast<int>(n);
}

// Runs a LAPACK routine the usual two-step way: `call(work, lwork, info)` first with lwork = -1
// (the routine writes its optimal workspace size to work[0]), then with that workspace.
template <typename Call>
void runLapack(const char* routine, Call call) {
  int info = 0;
  int lwork = -1;
  double optimal = 0;
  call(&optimal, &lwork, &info);
  GOSSAMER_ENFORCE_EQ(info, 0, "LAPACK {} workspace query failed", routine);
  lwork = std::max(1, static_cast<int>(optimal));
  std::vector<double> work(static_cast<std::size_t>(lwork));
  call(work.data(), &lwork, &info);
  GOSSAMER_ENFORCE_EQ(info, 0, "LAPACK {} failed (info < 0: bad argument, > 0: no convergence)",
                      routine);
}

}  // namespace

std::vector<double> symmetricEigenvalues(std::span<const double> matrix, std::size_t n) {
  const int size = lapackSize(matrix, n);
  // Column-major "L" of the copy is the row-major upper triangle of `matrix`.
  std::vector<double> a(matrix.begin(), matrix.end());
  std::vector<double> eigenvalues(n);
  runLapack("dsyev", [&](double* work, const int* lwork, int* info) {
    dsyev_("N", "L", &size, a.data(), &size, eigenvalues.data(), work, lwork, info, 1, 1);
  });
  return eigenvalues;
}

std::vector<double> singularValues(std::span<const double> matrix, std::size_t n) {
  const int size = lapackSize(matrix, n);
  // LAPACK sees the transpose; it has the same singular values.
  std::vector<double> a(matrix.begin(), matrix.end());
  std::vector<double> values(n);
  double unused = 0;
  const int one = 1;
  runLapack("dgesvd", [&](double* work, const int* lwork, int* info) {
    dgesvd_("N", "N", &size, &size, a.data(), &size, values.data(), &unused, &one, &unused, &one,
            work, lwork, info, 1, 1);
  });
  return values;
}

std::vector<double> eigenvalueModuli(std::span<const double> matrix, std::size_t n) {
  const int size = lapackSize(matrix, n);
  // LAPACK sees the transpose; it has the same eigenvalues.
  std::vector<double> a(matrix.begin(), matrix.end());
  std::vector<double> real(n);
  std::vector<double> imaginary(n);
  double unused = 0;
  const int one = 1;
  runLapack("dgeev", [&](double* work, const int* lwork, int* info) {
    dgeev_("N", "N", &size, a.data(), &size, real.data(), imaginary.data(), &unused, &one, &unused,
           &one, work, lwork, info, 1, 1);
  });
  std::vector<double> moduli(n);
  for (std::size_t k = 0; k < n; ++k) moduli[k] = std::hypot(real[k], imaginary[k]);
  std::sort(moduli.begin(), moduli.end(), std::greater<>());
  return moduli;
}

double consensusRate(std::span<const double> weights, std::size_t n) {
  lapackSize(weights, n);
  bool doublyStochastic = true;
  bool symmetric = true;
  for (std::size_t j = 0; j < n; ++j) {
    double column = 0;
    for (std::size_t i = 0; i < n; ++i) {
      column += weights[i * n + j];
      symmetric = symmetric && weights[i * n + j] == weights[j * n + i];
    }
    doublyStochastic = doublyStochastic && std::abs(column - 1) <= kColumnSumTolerance;
  }
  if (!doublyStochastic) {
    return n == 1 ? 0.0 : eigenvalueModuli(weights, n)[1];
  }
  // W - 11^T/n: exactly symmetric when W is.
  const double average = 1.0 / static_cast<double>(n);
  std::vector<double> centered(weights.begin(), weights.end());
  for (double& w : centered) w -= average;
  if (symmetric) {
    const std::vector<double> eigenvalues = symmetricEigenvalues(centered, n);
    return std::max(std::abs(eigenvalues.front()), std::abs(eigenvalues.back()));
  }
  return singularValues(centered, n).front();
}

double spectralGap(std::span<const double> weights, std::size_t n) {
  const double gap = 1.0 - consensusRate(weights, n);
  return std::abs(gap) < kSnapToZero ? 0.0 : gap;
}

}  // namespace gossamer::topology
