// Compression codecs of kernels::Compute: what a codec is, how it is written as text, and the byte
// layout of one encoded payload. The encode/decode kernels themselves are Compute methods
// (compute.h); this header is plain host code, usable by the wire layer without a Compute.
//
// Codecs (text form in brackets, parsed by parseCodec and written by formatCodec):
//   none            [none]                     float32 as is
//   fp16            [fp16]                     IEEE binary16, round to nearest even
//   bf16            [bf16]                     bfloat16, round to nearest even
//   int8            [int8 | int8:BLOCK]        blockwise absmax, codes -127..127
//   int4            [int4 | int4:BLOCK]        blockwise absmax, codes -7..7, two per byte
//   top-k           [topk:FRACTION | topk:FRACTION:sampled]  the k largest |v|, values + indices
//   random-k        [randk:FRACTION]           k seeded random positions, values + indices
// BLOCK defaults to 256 (int4: even); FRACTION is in (0, 1]; k = max(1, round(FRACTION * n)) for
// n > 0 (round half away from zero), 0 for n == 0.
//
// Payload layouts: one contiguous little-endian byte buffer of encodedBytes(codec, n) bytes (the
// capacity; sampled top-k may use less, see below), sent on the wire as is. The payload is
// 4-byte aligned when it starts 4-byte aligned: every float32/uint32 field sits at a multiple
// of 4. With nb = ceil(n / BLOCK):
//   none:      n float32
//   fp16/bf16: n uint16 (the half/bfloat16 bit patterns)
//   int8:      nb float32 scales, then n int8 codes
//   int4:      nb float32 scales, then ceil(n / 2) bytes; element 2j is the low nibble of byte j,
//              element 2j + 1 the high nibble, each a two's-complement code in -7..7; the high
//              nibble of the last byte is 0 when n is odd
//   topk/randk: uint32 count c, then c float32 values, then c uint32 indices (strictly
//              increasing, each < n): 4 + 8c bytes. c == k except for sampled top-k (c <= k)
//
// Numerics, the same on every backend (the element-wise math is shared by the CPU and CUDA code,
// kernels/codec_math.h, so a backend agrees with the CPU reference bit for bit on every payload
// and residual, NaN payload bits aside):
// - fp16/bf16: round to nearest even. |x| beyond the largest finite half (65504, rounding up
//   from 65520) becomes +-inf; fp16 keeps subnormals (down to 2^-24) and flushes nothing; NaN
//   stays NaN. Relative error <= 2^-11 (fp16, normal range) and 2^-8 (bf16).
// - int8/int4: per block, scale = absmax / 127 (int4: / 7) in float32; code =
//   round-to-nearest-even(x / scale), clamped to +-127 (+-7); decoded x' = code * scale in
//   float32. Each element is within half a step: |x - x'| <= (scale / 2)(1 + 2^-15) (the factor
//   covers the float32 roundings of x / scale and code * scale) whenever scale is a normal
//   float (absmax >= 2^-126 * 127); blocks of subnormal magnitude lose precision. A zero block
//   has scale 0 and all codes 0. A block holding inf or NaN has a non-finite scale (absmax is
//   taken on the bit patterns, so NaN > inf > any finite value), all codes 0, and decodes to NaN
//   everywhere (0 * inf); nothing crashes, but checkEncoded rejects such a payload.
// - top-k: magnitudes are ordered as the bit patterns of |v| (NaN above inf, -0 == +0). Exact
//   top-k keeps the k largest; among equal magnitudes the lower index wins, so the kept set is
//   unique. Sampled top-k draws m = sampleSize(codec, n) positions with replacement from the
//   seed, takes as threshold T the r-th largest sampled magnitude with
//   r = max(1, round(FRACTION * m)), and keeps the first k positions, in index order, with
//   |v| >= T: c <= k of them (c >= 1 for n > 0, as the sampled maximum qualifies). One pass
//   over the data after the sample, no sort: the fast choice for large n.
// - random-k: [0, n) is split into k strata [floor(j n / k), floor((j + 1) n / k)) and one
//   position is drawn in each from a counter-based hash of (seed, j). So the k indices are
//   distinct and increasing by construction, each element is kept with probability ~k/n, and
//   the set depends only on (seed, n, k): every backend draws the same one.
//
// Error feedback (encode with a residual): v = input + residual (float32) is encoded, and the
// residual becomes v - decode(payload). For every codec this subtraction is exact, so
//   decode(payload) + residual' == fl(input + residual)
// element for element: across rounds, the sum of what was sent plus the final residual equals
// the sum of the inputs up to one float32 rounding of input + residual per element per round
// (none when those sums are exact, e.g. dyadic inputs). Exceptions: fp16/bf16 overflow (the
// residual becomes -+inf), non-finite input, and int8/int4 blocks of subnormal scale.
//
// Threading: everything here is a pure function. Errors: gossamer::Error whose message is the
// sentence alone (a user's flag or a peer's payload).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gossamer::kernels {

enum class CodecKind { kNone, kFp16, kBf16, kInt8, kInt4, kTopK, kRandK };

// How top-k finds its k largest magnitudes: kExact selects them exactly (a selection over all n
// magnitudes); kSampled estimates a threshold from a seeded sample (see above).
enum class TopKSelection { kExact, kSampled };

struct Codec {
  CodecKind kind = CodecKind::kNone;
  // Elements per scale (int8, int4; int4 needs an even size). Ignored by the other codecs.
  std::size_t blockSize = 256;
  // Share of the elements sent (topk, randk), in (0, 1]. Ignored by the other codecs.
  double fraction = 0.01;
  // topk only.
  TopKSelection selection = TopKSelection::kExact;

  friend bool operator==(const Codec&, const Codec&) = default;
};

// What decode does with the output buffer.
enum class DecodeMode {
  kOverwrite,   // out = decoded (sparse codecs write 0 where nothing was sent)
  kAccumulate,  // out += decoded, in float32 (what a reduction of received payloads needs)
};

// Largest accepted blockSize (2^24): a block's element count fits every backend's int math.
inline constexpr std::size_t kMaxCodecBlockSize = std::size_t{1} << 24;

// "none", "fp16", "bf16", "int8", "int8:64", "int4:128", "topk:0.01", "topk:0.01:sampled",
// "randk:0.05". Throws gossamer::Error naming the text and what was expected.
Codec parseCodec(std::string_view text);
// Canonical text, which parseCodec reads back to an equal Codec ("int8:256", "topk:0.01").
std::string formatCodec(const Codec& codec);
// Codec name without parameters ("int8").
const char* codecName(CodecKind kind);
// Throws gossamer::Error when a parameter is out of range: blockSize in [1, kMaxCodecBlockSize]
// (int8, int4) and even (int4); fraction finite in (0, 1] (topk, randk).
void validate(const Codec& codec);

// True for topk and randk (values + indices payloads).
bool isSparse(CodecKind kind);
// Number of scales of an int8/int4 payload: ceil(n / blockSize) (0 for other codecs).
std::size_t scaleCount(const Codec& codec, std::size_t n);
// k of a sparse codec: max(1, round(fraction * n)) capped at n, 0 for n == 0 (0 for dense codecs).
std::size_t sparseCount(const Codec& codec, std::size_t n);
// m, the number of sampled positions of sampled top-k: min(n, max(4096, ceil(64 / fraction))),
// so that the sample holds about 64 elements above the threshold (0 for other codecs).
std::size_t sampleSize(const Codec& codec, std::size_t n);
// Bytes of an encoded payload of n elements (the layout above); for sparse codecs the capacity
// 4 + 8k, which every payload but a sampled top-k one fills exactly.
std::size_t encodedBytes(const Codec& codec, std::size_t n);
// Elements that a sparse payload of `bytes` bytes carries: (bytes - 4) / 8. Assumes the length
// passed checkEncoded or checks::decode.
std::size_t sparsePayloadCount(std::size_t bytes);

// Checks that `payload` (HOST memory) is a well-formed encoding of n elements under `codec`, as
// the wire layer must before handing a peer's bytes to decode, which trusts its input. Throws
// gossamer::Error naming the first problem: a length that does not match the layout; an int8
// code of -128 or an int4 nibble of -8 (never produced by encode), or a set padding nibble; a
// negative or non-finite scale; a sparse count above k (or, for exact top-k and random-k, other
// than k), or not matching the length; an index >= n or not strictly above the one before.
// Values (fp16, bf16, none, sparse values) are not checked: any bit pattern decodes. Reads the
// payload once, allocates nothing; unaligned payloads are fine.
void checkEncoded(const Codec& codec, std::span<const std::byte> payload, std::size_t n);

// r, the rank of sampled top-k's threshold among m sampled magnitudes:
// max(1, round(fraction * m)) capped at m.
std::size_t sampledThresholdRank(const Codec& codec, std::size_t m);
// Sampled top-k's threshold from the sampled magnitudes (bit patterns of |v|, see codec_math.h):
// the r-th largest (r = sampledThresholdRank(codec, samples.size())). Reorders `samples`. The
// CPU reference's definition; CUDA sorts the sample and takes the same rank. Needs a non-empty
// sample.
std::uint32_t sampledThreshold(const Codec& codec, std::span<std::uint32_t> samples);

}  // namespace gossamer::kernels
