// The kernels::Compute conformance suite (compute_conformance.h), part three: the compression
// codecs of kernels/codec.h (fp16/bf16 rounding, int8/int4 blocks, exact and sampled top-k,
// random-k, error feedback, decode modes, agreement with the CPU reference, misuse) on every
// backend.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "kernels/codec.h"
#include "kernels/compute.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/kernels/compute_conformance.h"

namespace gossamer::kernels::conformance {
namespace {

// ---- compression (codec.h) ----

using Bytes = std::vector<std::byte>;

// Every codec, with the block sizes and fractions that reach their corner cases: int8 with an
// odd block (blocks not on a 4-byte boundary), sparse codecs with k well above 1.
const char* const kCodecs[] = {
    "none",   "fp16",      "bf16",     "int8:256",          "int8:7",     "int4:256",
    "int4:6", "topk:0.01", "topk:0.3", "topk:0.05:sampled", "randk:0.01", "randk:0.3"};

// One encode on `compute`: the payload (the bytes encode used) and, with feedback, the residual.
struct Encoded {
  Bytes payload;
  Host residual;
};

Encoded encodeOn(Compute& compute, const Codec& codec, const Host& input, const Host* residual,
                 std::uint64_t seed) {
  Buffer<float> in = toDevice(compute, input);
  Buffer<float> res =
      residual != nullptr ? toDevice(compute, *residual) : compute.allocate<float>(0);
  // Filled with 0xa5 so a byte encode forgot to write shows up in the agreement test.
  Buffer<std::byte> out =
      toDevice(compute, Bytes(encodedBytes(codec, input.size()), std::byte{0xa5}));
  const std::size_t used = compute.encode(codec, in, res, out, seed);
  REQUIRE(used <= out.size());
  Encoded result;
  result.payload = toHost(compute, out);
  result.payload.resize(used);
  if (residual != nullptr) result.residual = toHost(compute, res);
  return result;
}

Host decodeOn(Compute& compute, const Codec& codec, const Bytes& payload, Host initial,
              DecodeMode mode) {
  Buffer<std::byte> in = toDevice(compute, payload);
  Buffer<float> out = toDevice(compute, initial);
  compute.decode(codec, in, out, mode);
  return toHost(compute, out);
}

Host decodeFresh(Compute& compute, const Codec& codec, const Bytes& payload, std::size_t n) {
  return decodeOn(compute, codec, payload, Host(n, kNan), DecodeMode::kOverwrite);
}

// The sparse payload's fields.
struct Sparse {
  std::vector<float> values;
  std::vector<std::uint32_t> indices;
};

Sparse sparseFields(const Bytes& payload) {
  REQUIRE(payload.size() >= 4);
  std::uint32_t count = 0;
  std::memcpy(&count, payload.data(), 4);
  REQUIRE(payload.size() == 4 + 8 * std::size_t{count});
  Sparse sparse{std::vector<float>(count), std::vector<std::uint32_t>(count)};
  std::memcpy(sparse.values.data(), payload.data() + 4, 4 * std::size_t{count});
  std::memcpy(sparse.indices.data(), payload.data() + 4 + 4 * std::size_t{count},
              4 * std::size_t{count});
  return sparse;
}

// x rounded to nearest even at p significant bits, with subnormals below 2^emin and +-inf from
// `overflow` up: the float64 reference of fp16 (11, -14, 65520) and bf16 (8, -126, ...).
double roundReference(double x, int p, int emin, double overflow) {
  if (std::isnan(x) || x == 0.0) return x;
  const double a = std::abs(x);
  if (a >= overflow) return std::copysign(std::numeric_limits<double>::infinity(), x);
  const int e = std::max(std::ilogb(a), emin);
  const double quantum = std::ldexp(1.0, e - (p - 1));
  return std::copysign(std::nearbyint(a / quantum) * quantum, x);
}
const double kHalfOverflow = 65520.0;                                     // (2 - 2^-11) 2^15
const double kBf16Overflow = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);  // (2 - 2^-8) 2^127

// Inputs spanning many binades (sign, exponent in [lo, hi], random mantissa).
Host spreadVector(std::mt19937& rng, std::size_t n, int lo, int hi) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(lo, hi);
  Host v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return v;
}

TEST_CASE_TEMPLATE("kernels: fp16 and bf16 round to nearest even (float64 reference)", Backend,
                   CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(40);
  const float inf = std::numeric_limits<float>::infinity();
  for (const bool bf16 : {false, true}) {
    const Codec codec = parseCodec(bf16 ? "bf16" : "fp16");
    const int p = bf16 ? 8 : 11;
    const int emin = bf16 ? -126 : -14;
    const double overflow = bf16 ? kBf16Overflow : kHalfOverflow;
    for (std::size_t n : kSizes) {
      // The normal range of the format, where the relative bound holds.
      Host x = spreadVector(rng, n, bf16 ? -100 : -14, bf16 ? 100 : 14);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      REQUIRE(encoded.payload.size() == 2 * n);
      const Host got = decodeFresh(*compute, codec, encoded.payload, n);
      Reference want(n);
      Reference bound(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] = roundReference(x[i], p, emin, overflow);
        bound[i] = std::ldexp(std::abs(static_cast<double>(x[i])), bf16 ? -8 : -11);
      }
      checkNear(got, want, Reference(n, 0.0), label(formatCodec(codec), " rounding n=", n));
      Reference exact(x.begin(), x.end());
      checkNear(got, exact, bound, label(formatCodec(codec), " relative bound n=", n));
    }
    // Corner cases: ties to even, subnormals, overflow, the largest finite values, inf, NaN.
    const Host corners = bf16 ? Host{1.0f + 0x1p-8f,
                                     1.0f + 3 * 0x1p-8f,
                                     -(1.0f + 0x1p-8f),
                                     0x1p-130f,
                                     std::numeric_limits<float>::max(),
                                     0x1.fep127f,
                                     -inf,
                                     inf,
                                     0.0f,
                                     -0.0f}
                              : Host{1.0f + 0x1p-11f,
                                     1.0f + 3 * 0x1p-11f,
                                     0x1p-24f,
                                     0x1p-25f,
                                     3 * 0x1p-26f,
                                     0x1p-14f,
                                     65504.0f,
                                     65519.0f,
                                     65520.0f,
                                     -1e6f,
                                     1e-30f,
                                     inf,
                                     0.0f,
                                     -0.0f};
    const Encoded encoded = encodeOn(*compute, codec, corners, nullptr, 0);
    const Host got = decodeFresh(*compute, codec, encoded.payload, corners.size());
    for (std::size_t i = 0; i < corners.size(); ++i) {
      const double want = roundReference(corners[i], p, emin, overflow);
      CHECK_MESSAGE(static_cast<double>(got[i]) == want,
                    formatCodec(codec) << " of " << corners[i] << ": got " << got[i]);
      CHECK(std::signbit(got[i]) == std::signbit(corners[i]));
    }
    const Host nan{kNan, -kNan};
    const Host gotNan =
        decodeFresh(*compute, codec, encodeOn(*compute, codec, nan, nullptr, 0).payload, 2);
    CHECK(std::isnan(gotNan[0]));
    CHECK(std::isnan(gotNan[1]));
  }
}

TEST_CASE_TEMPLATE("kernels: int8 and int4 are within half a step of their block's scale", Backend,
                   CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(41);
  for (const char* text : {"int8:256", "int8:64", "int8:7", "int4:256", "int4:64", "int4:6"}) {
    const Codec codec = parseCodec(text);
    const bool int4 = codec.kind == CodecKind::kInt4;
    const float maxCode = int4 ? 7.0f : 127.0f;
    for (std::size_t n : kSizes) {
      // Each block at its own magnitude (10^-3 .. 10^3), and one block of zeros.
      Host x = randomVector(rng, n);
      const std::size_t blocks = scaleCount(codec, n);
      for (std::size_t b = 0; b < blocks; ++b) {
        const float magnitude = std::pow(10.0f, randomFloat(rng, -3.0f, 3.0f));
        const std::size_t end = std::min(n, (b + 1) * codec.blockSize);
        for (std::size_t i = b * codec.blockSize; i < end; ++i) {
          x[i] = b == 1 ? 0.0f : x[i] * magnitude;
        }
      }
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      REQUIRE(encoded.payload.size() == encodedBytes(codec, n));
      const Host got = decodeFresh(*compute, codec, encoded.payload, n);
      Reference want(x.begin(), x.end());
      Reference bound(n);
      std::size_t badScales = 0;
      for (std::size_t b = 0; b < blocks; ++b) {
        const std::size_t begin = b * codec.blockSize;
        const std::size_t end = std::min(n, begin + codec.blockSize);
        float absmax = 0.0f;
        for (std::size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::abs(x[i]));
        const float scale = absmax / maxCode;
        float sent = 0.0f;
        std::memcpy(&sent, encoded.payload.data() + 4 * b, 4);
        if (sent != scale) ++badScales;
        // Half a step, plus the two float32 roundings (x / scale and code * scale).
        for (std::size_t i = begin; i < end; ++i) bound[i] = scale / 2.0 * (1.0 + 0x1p-15);
      }
      CHECK_MESSAGE(badScales == 0, text << " n=" << n << ": scales other than absmax/" << maxCode);
      checkNear(got, want, bound, label(text, " n=", n));
      if (int4 && n % 2 != 0) {
        CHECK((encoded.payload.back() & std::byte{0xf0}) == std::byte{0});  // padding nibble
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: int8 and int4 keep a non-finite block to itself", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  for (const char* text : {"int8:4", "int4:4"}) {
    const Codec codec = parseCodec(text);
    Host x{1.0f, -2.0f, 3.0f, 0.5f, kNan, 1.0f, 2.0f, 3.0f, std::numeric_limits<float>::infinity(),
           1.0f, -1.0f, 0.0f};
    Host residual(x.size(), 0.0f);
    const Encoded encoded = encodeOn(*compute, codec, x, &residual, 0);
    const Host got = decodeFresh(*compute, codec, encoded.payload, x.size());
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(got[i] - x[i]) <= 3.0f / 7.0f);
    for (std::size_t i = 4; i < 12; ++i) CHECK_MESSAGE(std::isnan(got[i]), text << " " << i);
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::isfinite(encoded.residual[i]));
    CHECK_THROWS_WITH_AS(checkEncoded(codec, encoded.payload, x.size()),
                         doctest::Contains("not finite"), gossamer::Error);
  }
}

// Input with distinct magnitudes (a shuffled ramp) and random signs.
Host distinctMagnitudes(std::mt19937& rng, std::size_t n) {
  Host x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1) * 0.001f;
  std::shuffle(x.begin(), x.end(), rng);
  for (float& v : x) v = rng() % 2 ? v : -v;
  return x;
}

TEST_CASE_TEMPLATE("kernels: exact top-k keeps exactly the k largest magnitudes", Backend,
                   CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(42);
  for (const char* text : {"topk:0.01", "topk:0.3", "topk:1"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = distinctMagnitudes(rng, n);
      const std::size_t k = sparseCount(codec, n);
      std::vector<std::uint32_t> order(n);
      for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
      std::sort(order.begin(), order.end(),
                [&](std::uint32_t a, std::uint32_t b) { return std::abs(x[a]) > std::abs(x[b]); });
      std::vector<std::uint32_t> want(order.begin(), order.begin() + static_cast<long>(k));
      std::sort(want.begin(), want.end());

      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 0);
      const Sparse sparse = sparseFields(encoded.payload);
      CHECK_MESSAGE(sparse.indices == want, text << " n=" << n);
      for (std::size_t j = 0; j < sparse.indices.size(); ++j) {
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
      }
      Host dense(n, 0.0f);
      for (std::uint32_t i : want) dense[i] = x[i];
      checkEqual(decodeFresh(*compute, codec, encoded.payload, n), dense, label(text, " n=", n));
    }
  }
  // Equal magnitudes: the lower index wins.
  const Codec codec = parseCodec("topk:0.25");
  const Host same{1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, 0.5f};
  const Sparse sparse = sparseFields(encodeOn(*compute, codec, same, nullptr, 0).payload);
  CHECK(sparse.indices == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE_TEMPLATE("kernels: sampled top-k keeps the first elements above a sampled threshold",
                   Backend, CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(43);
  for (const char* text : {"topk:0.05:sampled", "topk:0.3:sampled"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = distinctMagnitudes(rng, n);
      const std::size_t k = sparseCount(codec, n);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 5);
      const Sparse sparse = sparseFields(encoded.payload);
      const std::size_t c = sparse.indices.size();
      REQUIRE(c >= 1);
      REQUIRE(c <= k);
      float smallestKept = std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < c; ++j) {
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
        if (j > 0) CHECK(sparse.indices[j] > sparse.indices[j - 1]);
        smallestKept = std::min(smallestKept, std::abs(sparse.values[j]));
      }
      // Every element skipped before the last kept one (all of them when c < k) is smaller.
      const std::size_t scanned = c < k ? n : sparse.indices.back() + 1;
      std::size_t j = 0;
      std::size_t larger = 0;
      for (std::size_t i = 0; i < scanned; ++i) {
        if (j < c && sparse.indices[j] == i) {
          ++j;
        } else if (std::abs(x[i]) >= smallestKept) {
          ++larger;
        }
      }
      CHECK_MESSAGE(larger == 0, text << " n=" << n);
      // The sample's estimate lands near k for a large n.
      if (n == 65537) CHECK_MESSAGE(c * 2 >= k, text << ": c=" << c << " k=" << k);
      // Deterministic under the seed.
      CHECK(encodeOn(*compute, codec, x, nullptr, 5).payload == encoded.payload);
    }
  }
}

TEST_CASE_TEMPLATE("kernels: random-k sends k distinct seeded positions", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(44);
  for (const char* text : {"randk:0.01", "randk:0.3", "randk:1"}) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = randomVector(rng, n);
      const std::size_t k = sparseCount(codec, n);
      const Encoded encoded = encodeOn(*compute, codec, x, nullptr, 11);
      const Sparse sparse = sparseFields(encoded.payload);
      REQUIRE(sparse.indices.size() == k);
      for (std::size_t j = 0; j < k; ++j) {
        REQUIRE(sparse.indices[j] < n);
        if (j > 0) CHECK(sparse.indices[j] > sparse.indices[j - 1]);
        CHECK(sparse.values[j] == x[sparse.indices[j]]);
      }
      CHECK(encodeOn(*compute, codec, x, nullptr, 11).payload == encoded.payload);
      if (n >= 1000 && k < n) {
        CHECK_MESSAGE(sparseFields(encodeOn(*compute, codec, x, nullptr, 12).payload).indices !=
                          sparse.indices,
                      text << " n=" << n << ": seeds 11 and 12 drew the same set");
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: error feedback conserves mass", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(45);
  constexpr int kRounds = 5;
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    // The quantizers get arbitrary floats; the codecs that send values as they are get dyadic
    // inputs (multiples of 2^-10 below 4), whose sums over the rounds are exact in float32, so
    // their mass is conserved exactly.
    const bool exactValues = codec.kind == CodecKind::kNone || isSparse(codec.kind);
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
      Host residual(n, 0.0f);
      Reference inputs(n, 0.0);
      Reference sent(n, 0.0);
      Reference bound(n, 0.0);
      std::size_t inexact = 0;
      for (int round = 0; round < kRounds; ++round) {
        Host x = randomVector(rng, n, -4.0f, 4.0f);
        if (exactValues) {
          for (float& v : x) v = std::round(v * 1024.0f) / 1024.0f;
        }
        const Encoded encoded = encodeOn(*compute, codec, x, &residual, 100 + round);
        const Host decoded = decodeFresh(*compute, codec, encoded.payload, n);
        for (std::size_t i = 0; i < n; ++i) {
          // decode + residual' is exactly fl(input + residual), each round.
          const float v = x[i] + residual[i];
          if (static_cast<double>(decoded[i]) + encoded.residual[i] != static_cast<double>(v)) {
            ++inexact;
          }
          inputs[i] += x[i];
          sent[i] += decoded[i];
          // One float32 rounding of input + residual per element per round.
          bound[i] += exactValues
                          ? 0.0
                          : 0x1p-24 * (std::abs(x[i]) + std::abs(residual[i])) * (1.0 + 0x1p-23);
        }
        residual = encoded.residual;
      }
      CHECK_MESSAGE(inexact == 0, text << " n=" << n << ": " << inexact
                                       << " elements where decode + residual != input + residual");
      Reference got(n);
      for (std::size_t i = 0; i < n; ++i) got[i] = sent[i] + residual[i];
      std::size_t failures = 0;
      for (std::size_t i = 0; i < n; ++i) failures += std::abs(got[i] - inputs[i]) > bound[i];
      CHECK_MESSAGE(failures == 0,
                    text << " n=" << n << ": mass not conserved at " << failures << " elements");
    }
  }
}

TEST_CASE_TEMPLATE("kernels: decode kAccumulate adds the decoded payload", Backend, CpuBackend,
                   CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  std::mt19937 rng(46);
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = randomVector(rng, n);
      const Host previous = randomVector(rng, n);
      const Bytes payload = encodeOn(*compute, codec, x, nullptr, 3).payload;
      const Host decoded = decodeFresh(*compute, codec, payload, n);
      Host want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = previous[i] + decoded[i];
      checkEqual(decodeOn(*compute, codec, payload, previous, DecodeMode::kAccumulate), want,
                 label(text, " accumulate n=", n));
    }
  }
}

TEST_CASE_TEMPLATE("kernels: every codec agrees with the CPU reference bit for bit", Backend,
                   CpuBackend, CudaBackend, GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const std::unique_ptr<Compute> reference = cpu::makeCompute();
  std::mt19937 rng(47);
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    for (std::size_t n : kSizes) {
      const Host x = spreadVector(rng, n, -20, 10);
      const Host residual = randomVector(rng, n, -1e-3f, 1e-3f);
      for (const bool feedback : {false, true}) {
        const Encoded want = encodeOn(*reference, codec, x, feedback ? &residual : nullptr, 9);
        const Encoded got = encodeOn(*compute, codec, x, feedback ? &residual : nullptr, 9);
        CHECK_MESSAGE(got.payload == want.payload,
                      text << " n=" << n << " feedback=" << feedback << ": payloads differ");
        if (feedback) checkEqual(got.residual, want.residual, label(text, " residual n=", n));
        checkEqual(decodeFresh(*compute, codec, want.payload, n),
                   decodeFresh(*reference, codec, want.payload, n), label(text, " decode n=", n));
      }
    }
  }
}

TEST_CASE_TEMPLATE("kernels: codecs on empty input", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  for (const char* text : kCodecs) {
    const Codec codec = parseCodec(text);
    const Host none;
    const Encoded encoded = encodeOn(*compute, codec, none, &none, 1);
    CHECK(encoded.payload.size() == (isSparse(codec.kind) ? 4u : 0u));
    CHECK_NOTHROW(checkEncoded(codec, encoded.payload, 0));
    CHECK(decodeOn(*compute, codec, encoded.payload, {}, DecodeMode::kAccumulate).empty());
  }
}

TEST_CASE_TEMPLATE("kernels: codec misuse throws gossamer::Error", Backend, CpuBackend, CudaBackend,
                   GuardedBackend) {
  const std::unique_ptr<Compute> compute = makeOrSkip<Backend>();
  if (!compute) return;
  const Codec int8 = parseCodec("int8:4");
  const Codec topk = parseCodec("topk:0.25");
  Buffer<float> x = toDevice(*compute, Host(8, 1.0f));
  Buffer<float> residual = toDevice(*compute, Host(8, 0.0f));
  Buffer<float> shorter = toDevice(*compute, Host(7, 0.0f));
  Buffer<std::byte> out8 = compute->allocate<std::byte>(encodedBytes(int8, 8) + 4);
  const std::span<std::byte> exact8 = out8.span().first(encodedBytes(int8, 8));
  CHECK_NOTHROW(compute->encode(int8, x, residual, exact8, 0));
  CHECK_THROWS_AS(compute->encode(int8, x, shorter, exact8, 0), gossamer::Error);
  CHECK_THROWS_AS(compute->encode(int8, x, residual, out8, 0), gossamer::Error);
  CHECK_THROWS_AS(compute->encode(int8, x, residual, out8.span().subspan(1, exact8.size()), 0),
                  gossamer::Error);
  CHECK_THROWS_AS(compute->encode(parseCodec("int8:4"), x, x, exact8, 0), gossamer::Error);
  Codec bad = topk;
  bad.fraction = 0.0;
  CHECK_THROWS_AS(compute->encode(bad, x, residual, exact8, 0), gossamer::Error);

  CHECK_NOTHROW(compute->decode(int8, exact8, x, DecodeMode::kOverwrite));
  CHECK_THROWS_AS(compute->decode(int8, exact8, shorter, DecodeMode::kOverwrite), gossamer::Error);
  CHECK_THROWS_AS(compute->decode(int8, out8, x, DecodeMode::kOverwrite), gossamer::Error);
  Buffer<std::byte> sparse = compute->allocate<std::byte>(encodedBytes(topk, 8) + 8);
  CHECK_NOTHROW(compute->encode(topk, x, {}, sparse.span().first(encodedBytes(topk, 8)), 0));
  // 8 elements at 0.25 are 2 values: 20 bytes; 28 bytes would be 3, 19 is no count at all.
  CHECK_NOTHROW(compute->decode(topk, sparse.span().first(20), x, DecodeMode::kAccumulate));
  CHECK_THROWS_AS(compute->decode(topk, sparse.span().first(28), x, DecodeMode::kAccumulate),
                  gossamer::Error);
  CHECK_THROWS_AS(compute->decode(topk, sparse.span().first(19), x, DecodeMode::kAccumulate),
                  gossamer::Error);
}

}  // namespace
}  // namespace gossamer::kernels::conformance
