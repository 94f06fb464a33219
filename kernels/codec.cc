#include "kernels/codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <system_error>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "kernels/codec_math.h"

namespace gossamer::kernels {
namespace {

constexpr const char* kCodecSyntax =
    "none, fp16, bf16, int8[:BLOCK], int4[:BLOCK], topk:FRACTION[:sampled] or randk:FRACTION";

[[noreturn]] void throwBadCodec(std::string_view text, std::string_view why) {
  GOSSAMER_THROW("codec '{}': {} (expected {})", text, why, kCodecSyntax);
}

// Splits "a:b:c" into at most 3 parts; more parts leave `extra` set.
struct Parts {
  std::string_view part[3];
  std::size_t count = 0;
  bool extra = false;
};

Parts split(std::string_view text) {
  Parts parts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t colon = text.find(':', begin);
    const std::string_view piece = text.substr(
        begin, colon == std::string_view::npos ? std::string_view::npos : colon - begin);
    if (parts.count == 3) {
      parts.extra = true;
      return parts;
    }
    parts.part[parts.count++] = piece;
    if (colon == std::string_view::npos) return parts;
    begin = colon + 1;
  }
}

template <typename T>
bool parseNumber(std::string_view text, T* value) {
  const char* end = text.data() + text.size();
  const auto [pointer, error] = std::from_chars(text.data(), end, *value);
  return error == std::errc() && pointer == end && !text.empty();
}

std::uint32_t loadU32(const std::byte* p) {
  std::uint32_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

float loadF32(const std::byte* p) {
  float value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// Checks the scales of an int8/int4 payload: finite and non-negative.
void checkScales(const Codec& codec, std::span<const std::byte> payload, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = loadF32(payload.data() + 4 * b);
    if (!(scale >= 0.0f) || !std::isfinite(scale)) [[unlikely]] {
      GOSSAMER_THROW("{} payload: scale {} of block {} is {}", codecName(codec.kind), scale, b,
                     std::isfinite(scale) ? "negative" : "not finite");
    }
  }
}

}  // namespace

const char* codecName(CodecKind kind) {
  switch (kind) {
    case CodecKind::kNone:
      return "none";
    case CodecKind::kFp16:
      return "fp16";
    case CodecKind::kBf16:
      return "bf16";
    case CodecKind::kInt8:
      return "int8";
    case CodecKind::kInt4:
      return "int4";
    case CodecKind::kTopK:
      return "topk";
    case CodecKind::kRandK:
      return "randk";
  }
  return "?";
}

bool isSparse(CodecKind kind) { return kind == CodecKind::kTopK || kind == CodecKind::kRandK; }

void validate(const Codec& codec) {
  switch (codec.kind) {
    case CodecKind::kNone:
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      return;
    case CodecKind::kInt8:
    case CodecKind::kInt4:
      if (codec.blockSize == 0 || codec.blockSize > kMaxCodecBlockSize) {
        GOSSAMER_THROW("{}: block size {} is outside 1..{}", codecName(codec.kind), codec.blockSize,
                       kMaxCodecBlockSize);
      }
      if (codec.kind == CodecKind::kInt4 && codec.blockSize % 2 != 0) {
        GOSSAMER_THROW("int4: block size {} must be even (a block starts on a byte)",
                       codec.blockSize);
      }
      return;
    case CodecKind::kTopK:
    case CodecKind::kRandK:
      if (!(codec.fraction > 0.0 && codec.fraction <= 1.0)) {
        GOSSAMER_THROW("{}: fraction {} is outside (0, 1]", codecName(codec.kind), codec.fraction);
      }
      return;
  }
  GOSSAMER_THROW("codec kind {} is unknown", static_cast<int>(codec.kind));
}

Codec parseCodec(std::string_view text) {
  const Parts parts = split(text);
  if (parts.extra) throwBadCodec(text, "too many ':' parts");
  const std::string_view name = parts.part[0];
  Codec codec;
  if (name == "none" || name == "fp16" || name == "bf16") {
    codec.kind =
        name == "none" ? CodecKind::kNone : (name == "fp16" ? CodecKind::kFp16 : CodecKind::kBf16);
    if (parts.count != 1) throwBadCodec(text, fmt::format("{} takes no parameter", name));
  } else if (name == "int8" || name == "int4") {
    codec.kind = name == "int8" ? CodecKind::kInt8 : CodecKind::kInt4;
    if (parts.count > 2) throwBadCodec(text, "too many ':' parts");
    if (parts.count == 2 && !parseNumber(parts.part[1], &codec.blockSize)) {
      throwBadCodec(text, fmt::format("block size '{}' is not a number", parts.part[1]));
    }
  } else if (name == "topk" || name == "randk") {
    codec.kind = name == "topk" ? CodecKind::kTopK : CodecKind::kRandK;
    if (parts.count < 2) throwBadCodec(text, fmt::format("{} needs a fraction", name));
    if (!parseNumber(parts.part[1], &codec.fraction)) {
      throwBadCodec(text, fmt::format("fraction '{}' is not a number", parts.part[1]));
    }
    if (parts.count == 3) {
      if (codec.kind != CodecKind::kTopK || parts.part[2] != "sampled") {
        throwBadCodec(text, fmt::format("unknown option '{}'", parts.part[2]));
      }
      codec.selection = TopKSelection::kSampled;
    }
  } else {
    throwBadCodec(text, "unknown codec");
  }
  try {
    validate(codec);
  } catch (const Error& error) {
    throwBadCodec(text, error.what());
  }
  return codec;
}

std::string formatCodec(const Codec& codec) {
  switch (codec.kind) {
    case CodecKind::kInt8:
    case CodecKind::kInt4:
      return fmt::format("{}:{}", codecName(codec.kind), codec.blockSize);
    case CodecKind::kTopK:
      return fmt::format("topk:{}{}", codec.fraction,
                         codec.selection == TopKSelection::kSampled ? ":sampled" : "");
    case CodecKind::kRandK:
      return fmt::format("randk:{}", codec.fraction);
    default:
      return codecName(codec.kind);
  }
}

std::size_t scaleCount(const Codec& codec, std::size_t n) {
  if (codec.kind != CodecKind::kInt8 && codec.kind != CodecKind::kInt4) return 0;
  return n / codec.blockSize + (n % codec.blockSize != 0 ? 1 : 0);
}

std::size_t sparseCount(const Codec& codec, std::size_t n) {
  if (!isSparse(codec.kind) || n == 0) return 0;
  return sampledThresholdRank(codec, n);  // the same max(1, round(fraction * n)) capped at n
}

std::size_t sampleSize(const Codec& codec, std::size_t n) {
  if (codec.kind != CodecKind::kTopK || codec.selection != TopKSelection::kSampled) return 0;
  const double wanted = std::max(4096.0, std::ceil(64.0 / codec.fraction));
  return wanted >= static_cast<double>(n) ? n : static_cast<std::size_t>(wanted);
}

std::size_t encodedBytes(const Codec& codec, std::size_t n) {
  switch (codec.kind) {
    case CodecKind::kNone:
      return 4 * n;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      return 2 * n;
    case CodecKind::kInt8:
      return 4 * scaleCount(codec, n) + n;
    case CodecKind::kInt4:
      return 4 * scaleCount(codec, n) + (n + 1) / 2;
    case CodecKind::kTopK:
    case CodecKind::kRandK:
      return 4 + 8 * sparseCount(codec, n);
  }
  return 0;
}

std::size_t sparsePayloadCount(std::size_t bytes) { return bytes < 4 ? 0 : (bytes - 4) / 8; }

void checkEncoded(const Codec& codec, std::span<const std::byte> payload, std::size_t n) {
  validate(codec);
  const char* name = codecName(codec.kind);
  const std::size_t size = payload.size();
  if (!isSparse(codec.kind)) {
    const std::size_t expected = encodedBytes(codec, n);
    if (size != expected) {
      GOSSAMER_THROW("{} payload: {} bytes, expected {} for {} elements", name, size, expected, n);
    }
    const std::size_t blocks = scaleCount(codec, n);
    if (codec.kind == CodecKind::kInt8) {
      checkScales(codec, payload, blocks);
      const std::byte* codes = payload.data() + 4 * blocks;
      // -128 is the one byte encode never writes (codes are clamped to +-127).
      bool bad = false;
      for (std::size_t i = 0; i < n; ++i) bad |= codes[i] == std::byte{0x80};
      if (bad) {
        const std::size_t at =
            static_cast<std::size_t>(std::find(codes, codes + n, std::byte{0x80}) - codes);
        GOSSAMER_THROW("int8 payload: code -128 at element {} (codes are -127..127)", at);
      }
    } else if (codec.kind == CodecKind::kInt4) {
      checkScales(codec, payload, blocks);
      const std::byte* packed = payload.data() + 4 * blocks;
      const std::size_t bytes = (n + 1) / 2;
      bool bad = false;
      for (std::size_t j = 0; j < bytes; ++j) {
        bad |= (packed[j] & std::byte{0x0f}) == std::byte{0x08};
        bad |= (packed[j] & std::byte{0xf0}) == std::byte{0x80};
      }
      if (bad) {
        for (std::size_t j = 0; j < bytes; ++j) {
          const bool low = (packed[j] & std::byte{0x0f}) == std::byte{0x08};
          const bool high = (packed[j] & std::byte{0xf0}) == std::byte{0x80};
          if (low || high) {
            GOSSAMER_THROW("int4 payload: code -8 at element {} (codes are -7..7)",
                           2 * j + (low ? 0 : 1));
          }
        }
      }
      if (n % 2 != 0 && (packed[bytes - 1] & std::byte{0xf0}) != std::byte{0}) {
        GOSSAMER_THROW("int4 payload: the padding nibble after the last of {} elements is not 0",
                       n);
      }
    }
    return;
  }

  if (size < 4) GOSSAMER_THROW("{} payload: {} bytes, too short for the count", name, size);
  const std::size_t count = loadU32(payload.data());
  const std::size_t k = sparseCount(codec, n);
  const bool exactCount =
      codec.kind == CodecKind::kRandK || codec.selection == TopKSelection::kExact;
  if (exactCount ? count != k : count > k) {
    GOSSAMER_THROW("{} payload: count {} for {} elements, expected {}{}", name, count, n,
                   exactCount ? "" : "at most ", k);
  }
  if (size != 4 + 8 * count) {
    GOSSAMER_THROW("{} payload: {} bytes, expected {} for a count of {}", name, size, 4 + 8 * count,
                   count);
  }
  const std::byte* indices = payload.data() + 4 + 4 * count;
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint32_t index = loadU32(indices + 4 * j);
    if (index >= n) GOSSAMER_THROW("{} payload: index {} at {} is >= n = {}", name, index, j, n);
    if (j > 0) {
      const std::uint32_t previous = loadU32(indices + 4 * (j - 1));
      if (index <= previous) {
        GOSSAMER_THROW("{} payload: index {} at {} does not increase (previous {})", name, index, j,
                       previous);
      }
    }
  }
}

std::size_t sampledThresholdRank(const Codec& codec, std::size_t m) {
  const double wanted = std::round(codec.fraction * static_cast<double>(m));
  return std::clamp(static_cast<std::size_t>(std::max(wanted, 1.0)), std::size_t{1}, m);
}

std::uint32_t sampledThreshold(const Codec& codec, std::span<std::uint32_t> samples) {
  GOSSAMER_ENFORCE(!samples.empty(), "sampledThreshold: empty sample");
  const std::size_t rank = sampledThresholdRank(codec, samples.size());
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   samples.end(), std::greater<>());
  return samples[rank - 1];
}

}  // namespace gossamer::kernels
