// Element-wise math of the compression codecs (codec.h), shared verbatim by the CPU reference
// (kernels/cpu/cpu_codec.cc, g++) and the CUDA kernels (kernels/cuda/cuda_kernels.cu, nvcc), so
// that both backends round alike bit for bit. Rules that keep it so:
// - plain C++17, no library calls but memcpy, so nvcc (C++17) and GCC's vectoriser accept it;
// - no branches on data: selects only, which both compilers turn into masks / predicates;
// - float arithmetic in float32 with IEEE rounding, no contraction into FMA (the CUDA target is
//   built with --fmad=false; GCC in ISO C++ mode does not contract), no fast-math.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GOSSAMER_CODEC_FN __host__ __device__ __forceinline__
#else
#define GOSSAMER_CODEC_FN inline
#endif

namespace gossamer::kernels::codec_math {

GOSSAMER_CODEC_FN std::uint32_t floatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

GOSSAMER_CODEC_FN float bitsFloat(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// Bit pattern of |x|. As unsigned integers these order like the magnitudes for every non-NaN x,
// with +-0 equal, +inf above every finite value and NaN above +inf: a total order that integer
// max/compare/radix sort share on every backend.
GOSSAMER_CODEC_FN std::uint32_t magnitudeBits(float x) { return floatBits(x) & 0x7fffffffu; }

// ---- fp16 (IEEE binary16), after M. Dukhan's FP16 library: branch-free, exact ----

// Round to nearest even; overflow to +-inf, subnormal halves kept, NaN -> quiet NaN (0x7e00).
GOSSAMER_CODEC_FN std::uint16_t floatToHalf(float x) {
  // |x| * 2^112 * 2^-110: saturates to inf past the half range and lets the addition below do
  // the rounding at the half's precision.
  const float scaleToInf = 0x1.0p+112f;
  const float scaleToZero = 0x1.0p-110f;
  float base = (bitsFloat(magnitudeBits(x)) * scaleToInf) * scaleToZero;
  const std::uint32_t w = floatBits(x);
  const std::uint32_t shl1 = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  std::uint32_t bias = shl1 & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = bitsFloat((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t bits = floatBits(base);
  const std::uint32_t expBits = (bits >> 13) & 0x00007c00u;
  const std::uint32_t mantissaBits = bits & 0x00000fffu;
  const std::uint32_t nonsign = expBits + mantissaBits;
  return static_cast<std::uint16_t>((sign >> 16) | (shl1 > 0xff000000u ? 0x7e00u : nonsign));
}

// Exact.
GOSSAMER_CODEC_FN float halfToFloat(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t twoW = w + w;
  const std::uint32_t expOffset = 0xe0u << 23;
  const float expScale = 0x1.0p-112f;
  const float normalized = bitsFloat((twoW >> 4) + expOffset) * expScale;
  const std::uint32_t magicMask = 126u << 23;
  const float denormalized = bitsFloat((twoW >> 17) | magicMask) - 0.5f;
  const std::uint32_t denormalizedCutoff = 1u << 27;
  const std::uint32_t result =
      sign | (twoW < denormalizedCutoff ? floatBits(denormalized) : floatBits(normalized));
  return bitsFloat(result);
}

// ---- bfloat16 ----

// Round to nearest even on the upper 16 bits; overflow to +-inf; NaN -> a quiet NaN.
GOSSAMER_CODEC_FN std::uint16_t floatToBf16(float x) {
  const std::uint32_t bits = floatBits(x);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quietNan = (bits >> 16) | 0x40u;
  return static_cast<std::uint16_t>(magnitudeBits(x) > 0x7f800000u ? quietNan : rounded);
}

// Exact.
GOSSAMER_CODEC_FN float bf16ToFloat(std::uint16_t h) {
  return bitsFloat(static_cast<std::uint32_t>(h) << 16);
}

// ---- blockwise absmax quantization ----

// Largest code of int8 (127) and int4 (7).
inline constexpr float kInt8MaxCode = 127.0f;
inline constexpr float kInt4MaxCode = 7.0f;

// True when a block with this scale is quantized (codes x / scale); false for 0, inf and NaN,
// whose blocks get all codes 0.
GOSSAMER_CODEC_FN bool quantizable(float scale) {
  return scale > 0.0f && magnitudeBits(scale) < 0x7f800000u;
}

// The code of x as a float integer in [-maxCode, maxCode]: round-to-nearest-even(x / scale),
// clamped. Adding and subtracting 1.5 * 2^23 rounds any |q| < 2^22 to an integer under the
// default rounding mode, which GCC vectorises on baseline x86-64 (no roundps) and nvcc keeps as
// written; a larger |q| (only in blocks of subnormal scale) still lands beyond maxCode and is
// clamped. The clamp comes after the rounding and is written `bound > r ? bound : r`: GCC
// 12 if-converts that form here, not `r < bound ? ...` before the rounding. Needs
// quantizable(scale) and finite x.
GOSSAMER_CODEC_FN float quantize(float x, float scale, float maxCode) {
  const float kRound = 12582912.0f;  // 1.5 * 2^23
  float r = (x / scale + kRound) - kRound;
  r = -maxCode > r ? -maxCode : r;
  r = maxCode < r ? maxCode : r;
  return r;
}

// Packs two int4 codes (float integers in -7..7) into one byte: `low` in bits 0-3.
GOSSAMER_CODEC_FN std::uint8_t packInt4(float low, float high) {
  const auto lo = static_cast<std::uint32_t>(static_cast<std::int32_t>(low)) & 0xfu;
  const auto hi = static_cast<std::uint32_t>(static_cast<std::int32_t>(high)) & 0xfu;
  return static_cast<std::uint8_t>(lo | (hi << 4));
}

// The signed codes of a packed byte.
GOSSAMER_CODEC_FN float int4Low(std::uint8_t byte) {
  return static_cast<float>(static_cast<std::int8_t>(static_cast<std::uint8_t>(byte << 4)) >> 4);
}
GOSSAMER_CODEC_FN float int4High(std::uint8_t byte) {
  return static_cast<float>(static_cast<std::int8_t>(byte) >> 4);
}

// ---- seeded positions (random-k strata, sampled top-k sample) ----

// SplitMix64's finaliser: a bijective 64-bit mix.
GOSSAMER_CODEC_FN std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A counter-based hash: the `counter`-th draw of the stream (seed, salt).
GOSSAMER_CODEC_FN std::uint64_t counterHash(std::uint64_t seed, std::uint64_t salt,
                                            std::uint64_t counter) {
  return mix64(mix64(seed ^ mix64(salt)) + counter);
}

inline constexpr std::uint64_t kRandKSalt = 0x72616e646bull;   // "randk"
inline constexpr std::uint64_t kSampleSalt = 0x746f706b73ull;  // "topks"

// The j-th index of random-k (0 <= j < k <= n < 2^32): one draw in the stratum
// [floor(j n / k), floor((j + 1) n / k)), which is never empty since k <= n.
GOSSAMER_CODEC_FN std::uint32_t randomKIndex(std::uint64_t seed, std::uint64_t j, std::uint64_t n,
                                             std::uint64_t k) {
  const std::uint64_t begin = j * n / k;
  const std::uint64_t end = (j + 1) * n / k;
  return static_cast<std::uint32_t>(begin + counterHash(seed, kRandKSalt, j) % (end - begin));
}

// The j-th sampled position of sampled top-k, uniform in [0, n) (with replacement).
GOSSAMER_CODEC_FN std::uint32_t samplePosition(std::uint64_t seed, std::uint64_t j,
                                               std::uint64_t n) {
  return static_cast<std::uint32_t>(counterHash(seed, kSampleSalt, j) % n);
}

}  // namespace gossamer::kernels::codec_math
