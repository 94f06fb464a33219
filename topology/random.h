// Portable seeded draws for topology/ (internal header). std::mt19937_64 is fully specified by
// the standard but std::shuffle and the std:: distributions are not, so a seed would give other
// random graphs and gossip partners with another standard library. These helpers use the engine
// only through operator(). engine/data/random.h has the same helpers for the data layer; the
// include arrows keep topology/ from using it (both could move to engine/base/).
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <utility>

namespace gossamer::topology::detail {

// Uniform in [0, n), unbiased: raw draws above the largest multiple of n are rejected.
// Requires n >= 1.
inline std::uint64_t uniformBelow(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;
  std::uint64_t r = rng();
  while (r > limit) r = rng();
  return r % n;
}

// An engine for stream `stream` of `seed` (splitmix64 finalizer), so nearby seeds and one seed
// used for several purposes give unrelated sequences.
inline std::mt19937_64 seededRng(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return std::mt19937_64(z ^ (z >> 31));
}

// Fisher-Yates.
template <typename T>
void shuffle(std::span<T> values, std::mt19937_64& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    std::swap(values[i - 1], values[uniformBelow(rng, i)]);
  }
}

}  // namespace gossamer::topology::detail
