// Codec loops of the CPU reference backend (layouts and numerics: kernels/codec.h). The dense
// codecs stream the data once with loops GCC -O3 vectorises on baseline x86-64: the per-element
// math is codec_math.h's branch-free functions, inlined; int8/int4 take a block's absmax on the
// magnitude bit patterns (an integer max, which vectorises where a float max would need
// -ffast-math) and quantize the block while it is still in L1. With error feedback, v = input +
// residual is recomputed in each pass over a block instead of stored, so the residual is written
// once.
#include "kernels/cpu/cpu_codec.h"
#include "kernels/cpu/dispatch.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/codec_math.h"

namespace gossamer::kernels::cpu {
namespace {

namespace cm = codec_math;

// v of element i: input + residual with feedback, input alone without.
template <bool kFeedback>
inline float valueAt(const float* in, const float* res, std::size_t i) {
  if constexpr (kFeedback) {
    return in[i] + res[i];
  } else {
    (void)res;
    return in[i];
  }
}

// ---- none ----

void encodeNone(const float* in, float* res, float* out, std::size_t n) {
  if (res == nullptr) {
    if (n != 0) std::memcpy(out, in, n * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = in[i] + res[i];
    res[i] = 0.0f;
  }
}

// ---- fp16 / bf16: ToHalf and FromHalf are codec_math's conversions ----

template <bool kFeedback, std::uint16_t (*ToHalf)(float), float (*FromHalf)(std::uint16_t)>
void encodeHalf(const float* in, float* res, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = valueAt<kFeedback>(in, res, i);
    const std::uint16_t h = ToHalf(v);
    out[i] = h;
    if constexpr (kFeedback) res[i] = v - FromHalf(h);
  }
}

template <float (*FromHalf)(std::uint16_t)>
void decodeHalf(const std::uint16_t* in, float* out, std::size_t n, DecodeMode mode) {
  if (mode == DecodeMode::kOverwrite) {
    for (std::size_t i = 0; i < n; ++i) out[i] = FromHalf(in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] += FromHalf(in[i]);
  }
}

// ---- int8 / int4 ----

// Calls fn(b, begin, count) for each quantization block b = [begin, begin + count) of n
// elements (the last one possibly short), in order.
template <typename Fn>
void forEachBlock(std::size_t n, std::size_t blockSize, Fn&& fn) {
  const std::size_t blocks = n / blockSize + (n % blockSize != 0 ? 1 : 0);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * blockSize;
    fn(b, begin, std::min(blockSize, n - begin));
  }
}

// absmax of a block as a float: the largest magnitude bit pattern (NaN > inf > finite).
template <bool kFeedback>
float blockAbsMax(const float* in, const float* res, std::size_t count) {
  std::uint32_t maxBits = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t bits = cm::magnitudeBits(valueAt<kFeedback>(in, res, i));
    maxBits = bits > maxBits ? bits : maxBits;
  }
  return cm::bitsFloat(maxBits);
}

// One int8 block of `count` elements: codes and, with feedback, residual = v - code * scale.
template <bool kFeedback>
void encodeInt8Block(const float* in, float* res, std::int8_t* codes, float scale,
                     std::size_t count) {
  if (!cm::quantizable(scale)) {
    // Zero or non-finite scale: codes 0, decoded 0 * scale (0, or NaN for inf/NaN).
    const float decoded = 0.0f * scale;
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (kFeedback) res[i] = (in[i] + res[i]) - decoded;
      codes[i] = 0;
    }
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const float v = valueAt<kFeedback>(in, res, i);
    const float code = cm::quantize(v, scale, cm::kInt8MaxCode);
    codes[i] = static_cast<std::int8_t>(static_cast<std::int32_t>(code));
    if constexpr (kFeedback) res[i] = v - code * scale;
  }
}

// One int4 block of `count` elements (count even but for the last block), packed two per byte.
template <bool kFeedback>
void encodeInt4Block(const float* in, float* res, std::uint8_t* packed, float scale,
                     std::size_t count) {
  const std::size_t pairs = count / 2;
  if (!cm::quantizable(scale)) {
    const float decoded = 0.0f * scale;
    if constexpr (kFeedback) {
      for (std::size_t i = 0; i < count; ++i) res[i] = (in[i] + res[i]) - decoded;
    }
    std::memset(packed, 0, (count + 1) / 2);
    return;
  }
  for (std::size_t j = 0; j < pairs; ++j) {
    const float v0 = valueAt<kFeedback>(in, res, 2 * j);
    const float v1 = valueAt<kFeedback>(in, res, 2 * j + 1);
    const float c0 = cm::quantize(v0, scale, cm::kInt4MaxCode);
    const float c1 = cm::quantize(v1, scale, cm::kInt4MaxCode);
    packed[j] = cm::packInt4(c0, c1);
    if constexpr (kFeedback) {
      res[2 * j] = v0 - c0 * scale;
      res[2 * j + 1] = v1 - c1 * scale;
    }
  }
  if (count % 2 != 0) {
    const float v = valueAt<kFeedback>(in, res, count - 1);
    const float c = cm::quantize(v, scale, cm::kInt4MaxCode);
    packed[pairs] = cm::packInt4(c, 0.0f);
    if constexpr (kFeedback) res[count - 1] = v - c * scale;
  }
}

template <bool kFeedback, bool kInt4>
void encodeBlocks(const float* in, float* res, std::byte* out, std::size_t n,
                  std::size_t blockSize) {
  const std::size_t blocks = n / blockSize + (n % blockSize != 0 ? 1 : 0);
  auto* scales = reinterpret_cast<float*>(out);
  auto* codes = reinterpret_cast<std::uint8_t*>(out + 4 * blocks);
  const float maxCode = kInt4 ? cm::kInt4MaxCode : cm::kInt8MaxCode;
  forEachBlock(n, blockSize, [&](std::size_t b, std::size_t begin, std::size_t count) {
    float* blockRes = kFeedback ? res + begin : nullptr;
    const float scale = blockAbsMax<kFeedback>(in + begin, blockRes, count) / maxCode;
    scales[b] = scale;
    if constexpr (kInt4) {
      encodeInt4Block<kFeedback>(in + begin, blockRes, codes + begin / 2, scale, count);
    } else {
      encodeInt8Block<kFeedback>(in + begin, blockRes,
                                 reinterpret_cast<std::int8_t*>(codes) + begin, scale, count);
    }
  });
}

template <bool kAccumulate>
void decodeInt8(const std::byte* payload, float* out, std::size_t n, std::size_t blockSize) {
  const std::size_t blocks = n / blockSize + (n % blockSize != 0 ? 1 : 0);
  const auto* scales = reinterpret_cast<const float*>(payload);
  const auto* codes = reinterpret_cast<const std::int8_t*>(payload + 4 * blocks);
  forEachBlock(n, blockSize, [&](std::size_t b, std::size_t begin, std::size_t count) {
    const float scale = scales[b];
    const std::int8_t* c = codes + begin;
    float* o = out + begin;
    for (std::size_t i = 0; i < count; ++i) {
      const float decoded = static_cast<float>(c[i]) * scale;
      o[i] = kAccumulate ? o[i] + decoded : decoded;
    }
  });
}

template <bool kAccumulate>
void decodeInt4(const std::byte* payload, float* out, std::size_t n, std::size_t blockSize) {
  const std::size_t blocks = n / blockSize + (n % blockSize != 0 ? 1 : 0);
  const auto* scales = reinterpret_cast<const float*>(payload);
  const auto* packed = reinterpret_cast<const std::uint8_t*>(payload + 4 * blocks);
  forEachBlock(n, blockSize, [&](std::size_t b, std::size_t begin, std::size_t count) {
    const float scale = scales[b];
    const std::uint8_t* p = packed + begin / 2;
    float* o = out + begin;
    const std::size_t pairs = count / 2;
    for (std::size_t j = 0; j < pairs; ++j) {
      const float d0 = cm::int4Low(p[j]) * scale;
      const float d1 = cm::int4High(p[j]) * scale;
      o[2 * j] = kAccumulate ? o[2 * j] + d0 : d0;
      o[2 * j + 1] = kAccumulate ? o[2 * j + 1] + d1 : d1;
    }
    if (count % 2 != 0) {
      const float d = cm::int4Low(p[pairs]) * scale;
      o[count - 1] = kAccumulate ? o[count - 1] + d : d;
    }
  });
}

// ---- top-k and random-k ----

// The sparse payload's three fields for a capacity of k.
struct SparseOut {
  std::uint32_t* count;
  float* values;
  std::uint32_t* indices;
};

SparseOut sparseOut(std::byte* out, std::size_t k) {
  return {reinterpret_cast<std::uint32_t*>(out), reinterpret_cast<float*>(out + 4),
          reinterpret_cast<std::uint32_t*>(out + 4 + 4 * k)};
}

// Exact top-k. With feedback the first pass folds the input into the residual (v), which is
// then the source of the values, and the sent entries are zeroed.
void encodeTopKExact(const float* in, float* res, std::byte* out, std::size_t n, std::size_t k,
                     CodecScratch& scratch) {
  const SparseOut o = sparseOut(out, k);
  *o.count = static_cast<std::uint32_t>(k);
  if (n == 0) return;
  std::vector<std::uint32_t>& keys = scratch.keys;
  if (keys.size() < n) keys.resize(n);
  const float* src = in;
  if (res != nullptr) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = in[i] + res[i];
      res[i] = v;
      keys[i] = cm::magnitudeBits(v);
    }
    src = res;
  } else {
    for (std::size_t i = 0; i < n; ++i) keys[i] = cm::magnitudeBits(in[i]);
  }
  // threshold = the k-th largest magnitude; keys[0, k-1) are >= it, the rest <= it, so the
  // elements strictly above it are all among the first k - 1.
  const auto kth = keys.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(keys.begin(), kth, keys.begin() + static_cast<std::ptrdiff_t>(n),
                   std::greater<>());
  const std::uint32_t threshold = *kth;
  const auto above = static_cast<std::size_t>(
      std::count_if(keys.begin(), kth, [threshold](std::uint32_t key) { return key > threshold; }));
  // Of the elements equal to the threshold, the first (k - above) in index order are kept.
  std::size_t ties = k - above;
  std::size_t c = 0;
  for (std::size_t i = 0; i < n && c < k; ++i) {
    const std::uint32_t key = cm::magnitudeBits(src[i]);
    if (key < threshold) continue;
    if (key == threshold) {
      if (ties == 0) continue;
      --ties;
    }
    o.values[c] = src[i];
    o.indices[c] = static_cast<std::uint32_t>(i);
    ++c;
    if (res != nullptr) res[i] = 0.0f;
  }
}

// Sampled top-k: threshold from the seeded sample, then one pass that folds the input into the
// residual and keeps the first k elements at or above the threshold. Returns the count.
std::size_t encodeTopKSampled(const Codec& codec, const float* in, float* res, std::byte* out,
                              std::size_t n, std::size_t k, std::uint64_t seed,
                              CodecScratch& scratch) {
  auto* count = reinterpret_cast<std::uint32_t*>(out);
  *count = 0;
  if (n == 0) return 0;
  const std::size_t m = sampleSize(codec, n);
  std::vector<std::uint32_t>& keys = scratch.keys;
  if (keys.size() < m) keys.resize(m);
  for (std::size_t j = 0; j < m; ++j) {
    const std::size_t p = cm::samplePosition(seed, j, n);
    keys[j] = cm::magnitudeBits(res != nullptr ? in[p] + res[p] : in[p]);
  }
  const std::uint32_t threshold = sampledThreshold(codec, std::span(keys.data(), m));
  const SparseOut o = sparseOut(out, k);
  std::size_t c = 0;
  std::size_t i = 0;
  for (; i < n && c < k; ++i) {
    const float v = res != nullptr ? in[i] + res[i] : in[i];
    const bool keep = cm::magnitudeBits(v) >= threshold;
    if (res != nullptr) res[i] = keep ? 0.0f : v;
    if (keep) {
      o.values[c] = v;
      o.indices[c] = static_cast<std::uint32_t>(i);
      ++c;
    }
  }
  if (res != nullptr) {
    for (; i < n; ++i) res[i] += in[i];
  }
  // The indices were written for a capacity of k: move them up behind the c values.
  if (c < k) std::memmove(o.values + c, o.indices, c * sizeof(std::uint32_t));
  *count = static_cast<std::uint32_t>(c);
  return c;
}

void encodeRandK(const float* in, float* res, std::byte* out, std::size_t n, std::size_t k,
                 std::uint64_t seed) {
  const SparseOut o = sparseOut(out, k);
  *o.count = static_cast<std::uint32_t>(k);
  const float* src = in;
  if (res != nullptr) {
    for (std::size_t i = 0; i < n; ++i) res[i] += in[i];
    src = res;
  }
  for (std::size_t j = 0; j < k; ++j) {
    const std::uint32_t i = cm::randomKIndex(seed, j, n, k);
    o.values[j] = src[i];
    o.indices[j] = i;
    if (res != nullptr) res[i] = 0.0f;
  }
}

}  // namespace

// Both entry points are compiled per vector ISA (dispatch.h) with every helper inlined into each
// clone (flatten), so the conversion, quantization and selection loops use AVX2/AVX-512 where
// the machine has them.
[[gnu::flatten]] GOSSAMER_CPU_CLONES std::size_t encode(const Codec& codec,
                                                        std::span<const float> input,
                                                        std::span<float> residual,
                                                        std::span<std::byte> out,
                                                        std::uint64_t seed, CodecScratch& scratch) {
  const std::size_t n = input.size();
  const float* in = input.data();
  float* res = residual.empty() ? nullptr : residual.data();
  const bool feedback = res != nullptr;
  std::byte* o = out.data();
  switch (codec.kind) {
    case CodecKind::kNone:
      encodeNone(in, res, reinterpret_cast<float*>(o), n);
      break;
    case CodecKind::kFp16: {
      auto* h = reinterpret_cast<std::uint16_t*>(o);
      feedback ? encodeHalf<true, cm::floatToHalf, cm::halfToFloat>(in, res, h, n)
               : encodeHalf<false, cm::floatToHalf, cm::halfToFloat>(in, res, h, n);
      break;
    }
    case CodecKind::kBf16: {
      auto* h = reinterpret_cast<std::uint16_t*>(o);
      feedback ? encodeHalf<true, cm::floatToBf16, cm::bf16ToFloat>(in, res, h, n)
               : encodeHalf<false, cm::floatToBf16, cm::bf16ToFloat>(in, res, h, n);
      break;
    }
    case CodecKind::kInt8:
      feedback ? encodeBlocks<true, false>(in, res, o, n, codec.blockSize)
               : encodeBlocks<false, false>(in, res, o, n, codec.blockSize);
      break;
    case CodecKind::kInt4:
      feedback ? encodeBlocks<true, true>(in, res, o, n, codec.blockSize)
               : encodeBlocks<false, true>(in, res, o, n, codec.blockSize);
      break;
    case CodecKind::kTopK:
      if (codec.selection == TopKSelection::kSampled) {
        return 4 +
               8 * encodeTopKSampled(codec, in, res, o, n, sparseCount(codec, n), seed, scratch);
      }
      encodeTopKExact(in, res, o, n, sparseCount(codec, n), scratch);
      break;
    case CodecKind::kRandK:
      encodeRandK(in, res, o, n, sparseCount(codec, n), seed);
      break;
  }
  return out.size();
}

[[gnu::flatten]] GOSSAMER_CPU_CLONES void decode(const Codec& codec,
                                                 std::span<const std::byte> payload,
                                                 std::size_t count, std::span<float> out,
                                                 DecodeMode mode) {
  const std::size_t n = out.size();
  const bool accumulate = mode == DecodeMode::kAccumulate;
  const std::byte* p = payload.data();
  float* o = out.data();
  switch (codec.kind) {
    case CodecKind::kNone: {
      const auto* in = reinterpret_cast<const float*>(p);
      if (!accumulate) {
        if (n != 0) std::memcpy(o, in, n * sizeof(float));
      } else {
        for (std::size_t i = 0; i < n; ++i) o[i] += in[i];
      }
      return;
    }
    case CodecKind::kFp16:
      return decodeHalf<cm::halfToFloat>(reinterpret_cast<const std::uint16_t*>(p), o, n, mode);
    case CodecKind::kBf16:
      return decodeHalf<cm::bf16ToFloat>(reinterpret_cast<const std::uint16_t*>(p), o, n, mode);
    case CodecKind::kInt8:
      return accumulate ? decodeInt8<true>(p, o, n, codec.blockSize)
                        : decodeInt8<false>(p, o, n, codec.blockSize);
    case CodecKind::kInt4:
      return accumulate ? decodeInt4<true>(p, o, n, codec.blockSize)
                        : decodeInt4<false>(p, o, n, codec.blockSize);
    case CodecKind::kTopK:
    case CodecKind::kRandK: {
      const auto* values = reinterpret_cast<const float*>(p + 4);
      const auto* indices = reinterpret_cast<const std::uint32_t*>(p + 4 + 4 * count);
      if (accumulate) {
        for (std::size_t j = 0; j < count; ++j) o[indices[j]] += values[j];
      } else {
        std::fill(o, o + n, 0.0f);
        for (std::size_t j = 0; j < count; ++j) o[indices[j]] = values[j];
      }
      return;
    }
  }
}

}  // namespace gossamer::kernels::cpu
