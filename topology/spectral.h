// Spectra of mixing matrices, through LAPACK.
//
// Method: LAPACK from the OpenBLAS the build already links (Debian's libopenblas ships the
// Fortran LAPACK symbols dsyev_, dgesvd_ and dgeev_; there is no LAPACKE header, so spectral.cc
// declares the prototypes itself). A hand-written solver was not needed: these are the
// reference routines, robust for the repeated and clustered eigenvalues every symmetric
// topology has.
//
// The spectral gap of a mixing matrix W (n x n, rows summing to 1) is 1 - sigma:
//   - W doubly stochastic (every built-in but uniform mixing on an irregular graph):
//     sigma = sigma_2(W), the second largest singular value, computed as the largest singular
//     value of W - 11^T/n (equal, because 1 is a singular vector of W for the value 1). It is
//     the factor by which one step x <- W x shrinks the worst disagreement ||x - mean(x) 1||;
//     for a symmetric W it is the second largest eigenvalue modulus. dsyev for symmetric W,
//     dgesvd otherwise.
//   - W only row stochastic: singular values can exceed 1 although x <- W x converges (to a
//     degree-weighted consensus, not the average), so sigma is instead |lambda_2|, the second
//     largest eigenvalue modulus, which is the asymptotic rate of that convergence (dgeev).
// Conventions: n = 1 gives gap 1 (one peer is always at consensus), W = 11^T/n gives 1, a
// disconnected graph gives 0; results within 1e-12 of 0 are returned as 0.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gossamer::topology {

// Eigenvalues of the symmetric n x n matrix `matrix` (row-major; only its upper triangle in
// row-major terms is read), ascending. LAPACK dsyev. Throws gossamer::Error on a size mismatch
// or when LAPACK fails.
std::vector<double> symmetricEigenvalues(std::span<const double> matrix, std::size_t n);

// Singular values of the n x n matrix `matrix` (row-major), descending. LAPACK dgesvd.
std::vector<double> singularValues(std::span<const double> matrix, std::size_t n);

// Moduli of the (complex) eigenvalues of the n x n matrix `matrix` (row-major), descending.
// LAPACK dgeev.
std::vector<double> eigenvalueModuli(std::span<const double> matrix, std::size_t n);

// sigma above, for a W with unit row sums; columns summing to 1 within 1e-9 count as doubly
// stochastic. O(n^3).
double consensusRate(std::span<const double> weights, std::size_t n);

// 1 - consensusRate (snapped to 0 within 1e-12).
double spectralGap(std::span<const double> weights, std::size_t n);

}  // namespace gossamer::topology
