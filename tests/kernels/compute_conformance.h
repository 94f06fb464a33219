// The shared part of the conformance suite for kernels::Compute (compute_conformance_*_test.cc):
// the backends under test, the seeded inputs, the host/device copies and the checks. One set of
// cases, instantiated per backend with TEST_CASE_TEMPLATE. Each case draws inputs from a seeded
// std::mt19937, computes a float64 reference here, and compares with a bound relative to the
// magnitude of the terms, so a backend passes by being accurate, not by matching the CPU
// backend's rounding. Data reaches the backend only through allocate/upload/download, so the same
// code runs on device memory.
//
// Output buffers are filled with NaN before an op that overwrites them: a NaN left behind is an
// element the op forgot to write (a short grid, a missing tail), and never passes a bound.
//
// This is the one test header allowed to `#if` on the CUDA backend (GOSSAMER_HAVE_CUDA); every
// other test file reaches the backends through kernels::Compute only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/config.h"
#include "kernels/compute.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/support/guarded_compute.h"
#if GOSSAMER_HAVE_CUDA
#include "kernels/cuda/cuda_compute.h"
#endif

namespace gossamer::kernels::conformance {

// ---- backends under test ----

// Backend tags: `make` returns the Compute to test, or null with the reason to skip.
struct CpuBackend {
  static constexpr const char* kName = "CPU";
  static constexpr Device kDevice = Device::kCpu;
  static std::unique_ptr<Compute> make(std::string* /*skipReason*/) { return cpu::makeCompute(); }
};

struct CudaBackend {
  static constexpr const char* kName = "CUDA";
  static constexpr Device kDevice = Device::kCuda;
  static std::unique_ptr<Compute> make(std::string* skipReason) {
#if GOSSAMER_HAVE_CUDA
    if (!cuda::isViable(skipReason)) return nullptr;
    return cuda::makeCompute();
#else
    *skipReason = "this build has no CUDA backend (GOSSAMER_WITH_CUDA=OFF or nvcc not found)";
    return nullptr;
#endif
  }
};

// The CPU kernels over device-like memory the host cannot touch (tests/support/guarded_compute.h):
// the suite reaches the backend only through allocate/upload/download, and this proves it, on a
// machine without a GPU.
struct GuardedBackend {
  static constexpr const char* kName = "guarded";
  static constexpr Device kDevice = Device::kCuda;
  static std::unique_ptr<Compute> make(std::string* /*skipReason*/) {
    return std::make_unique<test::GuardedCompute>();
  }
};

}  // namespace gossamer::kernels::conformance

TYPE_TO_STRING_AS("CpuBackend", gossamer::kernels::conformance::CpuBackend);
TYPE_TO_STRING_AS("CudaBackend", gossamer::kernels::conformance::CudaBackend);
TYPE_TO_STRING_AS("GuardedBackend", gossamer::kernels::conformance::GuardedBackend);

namespace gossamer::kernels::conformance {

// The Compute of `Backend`, or null after telling the log why this case is skipped (a machine
// without a GPU passes the CUDA instance with a message, it does not fail it).
template <typename Backend>
std::unique_ptr<Compute> makeOrSkip() {
  std::string reason;
  std::unique_ptr<Compute> compute = Backend::make(&reason);
  if (compute == nullptr)
    MESSAGE("skipping " << std::string(Backend::kName) << " conformance: " << reason);
  return compute;
}

// Lengths that catch missing tails and off-by-one grids: one element, less than a vector, a
// round-ish size, and 2^16 + 1 (one past a power of two, so a partial last block of any width).
inline constexpr std::size_t kSizes[] = {1, 3, 1000, 65537};

inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

using Host = std::vector<float>;
using Labels = std::vector<std::int32_t>;
using Reference = std::vector<double>;

inline Host randomVector(std::mt19937& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Host v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline float randomFloat(std::mt19937& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

template <typename T>
Buffer<T> toDevice(Compute& compute, const std::vector<T>& host) {
  Buffer<T> buffer = compute.allocate<T>(host.size());
  compute.upload<T>(buffer, host);
  return buffer;
}

template <typename T>
std::vector<T> toHost(Compute& compute, const Buffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  compute.download<T>(host, buffer);
  return host;
}

inline Buffer<float> nanBuffer(Compute& compute, std::size_t n) {
  return toDevice(compute, Host(n, kNan));
}

// Checks |got[i] - want[i]| <= bound[i] for every i and reports the worst element once, with
// its index and values (one failure per element would bury the log on 65537 elements). NaN in
// `got` always fails.
inline void checkNear(const Host& got, const Reference& want, const Reference& bound,
                      const std::string& what) {
  REQUIRE(got.size() == want.size());
  REQUIRE(bound.size() == want.size());
  std::size_t failures = 0;
  std::size_t worst = 0;
  double worstRatio = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    const bool ok = error <= bound[i];  // false for NaN
    const double ratio =
        ok ? error / (bound[i] > 0.0 ? bound[i] : 1.0) : std::numeric_limits<double>::infinity();
    if (!ok) ++failures;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      worst = i;
    }
  }
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " of " << got.size()
                                    << " elements out of bounds; worst at " << worst << ": got "
                                    << got[worst] << ", want " << want[worst] << " +- "
                                    << bound[worst]);
}

// Bound rtol * (|want| + 1): relative for large values, absolute below 1.
inline Reference relativeBounds(const Reference& want, double rtol) {
  Reference bound(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) bound[i] = rtol * (std::abs(want[i]) + 1.0);
  return bound;
}

inline void checkRelative(const Host& got, const Reference& want, double rtol,
                          const std::string& what) {
  checkNear(got, want, relativeBounds(want, rtol), what);
}

inline void checkEqual(const Host& got, const Host& want, const std::string& what) {
  Reference wantDouble(want.begin(), want.end());
  checkNear(got, wantDouble, Reference(want.size(), 0.0), what);
}

template <typename... Parts>
std::string label(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Element-wise ops are accurate to a few float roundings of the magnitudes involved.
inline constexpr double kElementwiseTolerance = 1e-5;

}  // namespace gossamer::kernels::conformance
