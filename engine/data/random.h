// Portable seeded randomness for the data layer. std::mt19937_64 is fully specified by the
// standard, but std::shuffle and the std:: distributions are not (libstdc++ and libc++ draw
// different values), so shards, synthetic sets and batch orders built on them would change with
// the standard library. These helpers consume the engine only through operator(), so the same
// seed gives the same data everywhere, which checkpoint resume and cross-peer sharding rely on.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <utility>

namespace gossamer::engine::data::detail {

using Rng = std::mt19937_64;

// Independent stream `stream` of `seed` (splitmix64 finalizer over both): nearby seeds and the
// same seed used for different purposes give unrelated engines.
inline std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline Rng makeRng(std::uint64_t seed, std::uint64_t stream) { return Rng(mixSeed(seed, stream)); }

// Uniform in [0, n), unbiased (rejection of the incomplete top range). Requires n >= 1.
inline std::uint64_t uniformBelow(Rng& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;  // largest multiple of n, minus one
  std::uint64_t r = rng();
  while (r > limit) r = rng();
  return r % n;
}

// Uniform in (0, 1]: never 0, so its logarithm is finite.
inline double uniformOpenClosed(Rng& rng) {
  return static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;
}

// Standard normal variate (Marsaglia's polar method; the second variate is dropped so that each
// call depends only on the engine state).
inline double standardNormal(Rng& rng) {
  for (;;) {
    const double u = 2.0 * uniformOpenClosed(rng) - 1.0;
    const double v = 2.0 * uniformOpenClosed(rng) - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

// log of a Gamma(alpha, 1) variate, alpha > 0 (Marsaglia and Tsang 2000; for alpha < 1 the
// boost G(alpha) = G(alpha + 1) * U^(1/alpha)). Returned as a logarithm because for small alpha
// the variate itself underflows to 0, which would make a Dirichlet draw 0/0.
inline double logGammaVariate(Rng& rng, double alpha) {
  double logBoost = 0.0;
  if (alpha < 1.0) {
    logBoost = std::log(uniformOpenClosed(rng)) / alpha;
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = standardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniformOpenClosed(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      return std::log(d * v) + logBoost;
    }
  }
}

// Fisher-Yates shuffle.
template <typename T>
void shuffle(std::span<T> values, Rng& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniformBelow(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace gossamer::engine::data::detail
