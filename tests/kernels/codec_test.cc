// Unit tests of kernels/codec.h: the text form of a codec, payload sizes, and checkEncoded, the
// validator the wire layer runs on a peer's payload before decoding it. Valid payloads come from
// the CPU backend's encode; malformed ones are valid ones with one field broken.
#include "kernels/codec.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "kernels/compute.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::kernels {
namespace {

using Bytes = std::vector<std::byte>;

// The CPU encoding of `input` (no residual), all of the bytes encode used.
Bytes encodeOnCpu(const Codec& codec, const std::vector<float>& input, std::uint64_t seed = 7) {
  const std::unique_ptr<Compute> compute = cpu::makeCompute();
  Buffer<std::byte> out = compute->allocate<std::byte>(encodedBytes(codec, input.size()));
  const std::size_t used = compute->encode(codec, input, {}, out, seed);
  return Bytes(out.data(), out.data() + used);
}

std::vector<float> randomInput(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename T>
void store(Bytes& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

TEST_CASE("codec: text form round trip and defaults") {
  CHECK(parseCodec("none").kind == CodecKind::kNone);
  CHECK(parseCodec("fp16").kind == CodecKind::kFp16);
  CHECK(parseCodec("bf16").kind == CodecKind::kBf16);
  const Codec int8 = parseCodec("int8");
  CHECK(int8.kind == CodecKind::kInt8);
  CHECK(int8.blockSize == 256);
  CHECK(parseCodec("int8:64").blockSize == 64);
  CHECK(parseCodec("int4:128").kind == CodecKind::kInt4);
  const Codec topk = parseCodec("topk:0.01");
  CHECK(topk.kind == CodecKind::kTopK);
  CHECK(topk.fraction == 0.01);
  CHECK(topk.selection == TopKSelection::kExact);
  CHECK(parseCodec("topk:0.25:sampled").selection == TopKSelection::kSampled);
  CHECK(parseCodec("randk:1").fraction == 1.0);
  for (const char* text : {"none", "fp16", "bf16", "int8:256", "int4:32", "topk:0.01",
                           "topk:0.003:sampled", "randk:0.5"}) {
    CHECK_MESSAGE(formatCodec(parseCodec(text)) == text, text);
    CHECK(parseCodec(formatCodec(parseCodec(text))) == parseCodec(text));
  }
}

TEST_CASE("codec: bad text and parameters are rejected with a sentence naming the problem") {
  CHECK_THROWS_WITH_AS(parseCodec("zip"), doctest::Contains("unknown codec"), Error);
  CHECK_THROWS_WITH_AS(parseCodec(""), doctest::Contains("unknown codec"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("fp16:3"), doctest::Contains("takes no parameter"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("int8:x"), doctest::Contains("not a number"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("int8:0"), doctest::Contains("outside 1.."), Error);
  CHECK_THROWS_WITH_AS(parseCodec("int4:7"), doctest::Contains("must be even"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("topk"), doctest::Contains("needs a fraction"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("topk:0"), doctest::Contains("outside (0, 1]"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("topk:1.5"), doctest::Contains("outside (0, 1]"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("randk:nan"), doctest::Contains("outside (0, 1]"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("randk:0.1:sampled"), doctest::Contains("unknown option"), Error);
  CHECK_THROWS_WITH_AS(parseCodec("topk:0.1:sampled:x"), doctest::Contains("too many"), Error);
  // The message lists what is accepted.
  CHECK_THROWS_WITH_AS(parseCodec("zip"), doctest::Contains("int8[:BLOCK]"), Error);
  Codec codec{CodecKind::kInt4};
  codec.blockSize = 3;
  CHECK_THROWS_AS(validate(codec), Error);
}

TEST_CASE("codec: payload sizes follow the documented layouts") {
  const Codec int8 = parseCodec("int8:4");
  CHECK(scaleCount(int8, 9) == 3);
  CHECK(encodedBytes(int8, 9) == 3 * 4 + 9);
  CHECK(encodedBytes(parseCodec("int4:4"), 9) == 3 * 4 + 5);
  CHECK(encodedBytes(parseCodec("fp16"), 9) == 18);
  CHECK(encodedBytes(parseCodec("bf16"), 9) == 18);
  CHECK(encodedBytes(parseCodec("none"), 9) == 36);
  const Codec topk = parseCodec("topk:0.1");
  CHECK(sparseCount(topk, 0) == 0);
  CHECK(sparseCount(topk, 1) == 1);   // max(1, round(0.1))
  CHECK(sparseCount(topk, 25) == 3);  // round(2.5) = 3, half away from zero
  CHECK(sparseCount(topk, 1000) == 100);
  CHECK(encodedBytes(topk, 1000) == 4 + 8 * 100);
  CHECK(encodedBytes(topk, 0) == 4);
  CHECK(sparsePayloadCount(4 + 8 * 100) == 100);
  CHECK(sampleSize(parseCodec("topk:0.1:sampled"), 100) == 100);
  CHECK(sampleSize(parseCodec("topk:0.1:sampled"), 1000000) == 4096);
  CHECK(sampleSize(parseCodec("topk:0.001:sampled"), 1000000) == 64000);
  CHECK(sampleSize(topk, 1000000) == 0);
  for (const char* text : {"none", "fp16", "int8", "int4"})
    CHECK(encodedBytes(parseCodec(text), 0) == 0);
}

TEST_CASE("codec: checkEncoded accepts what encode writes") {
  const std::vector<float> input = randomInput(1001, 1);
  for (const char* text : {"none", "fp16", "bf16", "int8:64", "int8:7", "int4:64", "topk:0.01",
                           "topk:0.05:sampled", "randk:0.02"}) {
    const Codec codec = parseCodec(text);
    const Bytes payload = encodeOnCpu(codec, input);
    CHECK_NOTHROW_MESSAGE(checkEncoded(codec, payload, input.size()), text);
    // The validator does not care about alignment (it reads with memcpy).
    Bytes shifted(payload.size() + 1);
    std::memcpy(shifted.data() + 1, payload.data(), payload.size());
    CHECK_NOTHROW(checkEncoded(codec, std::span(shifted).subspan(1), input.size()));
  }
  CHECK_NOTHROW(checkEncoded(parseCodec("topk:0.5"), encodeOnCpu(parseCodec("topk:0.5"), {}), 0));
}

TEST_CASE("codec: checkEncoded rejects each kind of malformed dense payload") {
  const std::vector<float> input = randomInput(9, 2);  // 3 blocks of 4, the last one short
  const Codec int8 = parseCodec("int8:4");
  const Bytes good8 = encodeOnCpu(int8, input);
  CHECK_THROWS_WITH_AS(checkEncoded(int8, std::span(good8).first(good8.size() - 1), 9),
                       doctest::Contains("bytes, expected"), Error);
  CHECK_THROWS_WITH_AS(checkEncoded(int8, good8, 10), doctest::Contains("bytes, expected"), Error);
  CHECK_THROWS_WITH_AS(checkEncoded(parseCodec("fp16"), Bytes(17), 9),
                       doctest::Contains("bytes, expected 18"), Error);

  Bytes bad = good8;
  store(bad, 4, -1.0f);
  CHECK_THROWS_WITH_AS(checkEncoded(int8, bad, 9), doctest::Contains("block 1 is negative"), Error);
  store(bad, 4, std::numeric_limits<float>::quiet_NaN());
  CHECK_THROWS_WITH_AS(checkEncoded(int8, bad, 9), doctest::Contains("not finite"), Error);
  store(bad, 4, std::numeric_limits<float>::infinity());
  CHECK_THROWS_WITH_AS(checkEncoded(int8, bad, 9), doctest::Contains("not finite"), Error);
  bad = good8;
  bad[12 + 5] = std::byte{0x80};
  CHECK_THROWS_WITH_AS(checkEncoded(int8, bad, 9), doctest::Contains("code -128 at element 5"),
                       Error);

  const Codec int4 = parseCodec("int4:4");
  const Bytes good4 = encodeOnCpu(int4, input);
  CHECK_NOTHROW(checkEncoded(int4, good4, 9));
  bad = good4;
  bad[12 + 1] = (bad[12 + 1] & std::byte{0x0f}) | std::byte{0x80};  // element 3
  CHECK_THROWS_WITH_AS(checkEncoded(int4, bad, 9), doctest::Contains("code -8 at element 3"),
                       Error);
  bad = good4;
  bad[12 + 4] |= std::byte{0x10};  // the padding nibble after element 8
  CHECK_THROWS_WITH_AS(checkEncoded(int4, bad, 9), doctest::Contains("padding nibble"), Error);
  bad = good4;
  store(bad, 0, -0.5f);
  CHECK_THROWS_WITH_AS(checkEncoded(int4, bad, 9), doctest::Contains("block 0 is negative"), Error);
}

TEST_CASE("codec: checkEncoded rejects each kind of malformed sparse payload") {
  const std::vector<float> input = randomInput(100, 3);
  const Codec topk = parseCodec("topk:0.05");  // k = 5
  const Bytes good = encodeOnCpu(topk, input);
  REQUIRE(good.size() == 4 + 8 * 5);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, Bytes(3), 100), doctest::Contains("too short"), Error);

  Bytes bad = good;
  store<std::uint32_t>(bad, 0, 6);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, bad, 100), doctest::Contains("count 6"), Error);
  store<std::uint32_t>(bad, 0, 4);  // exact top-k sends exactly k
  CHECK_THROWS_WITH_AS(checkEncoded(topk, bad, 100), doctest::Contains("expected 5"), Error);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, std::span(good).first(good.size() - 8), 100),
                       doctest::Contains("expected 44"), Error);

  const std::size_t indices = 4 + 4 * 5;
  bad = good;
  store<std::uint32_t>(bad, indices + 4 * 4, 100);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, bad, 100), doctest::Contains("index 100 at 4 is >= n"),
                       Error);
  bad = good;
  std::uint32_t first;
  std::memcpy(&first, bad.data() + indices, 4);
  store<std::uint32_t>(bad, indices + 4, first);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, bad, 100), doctest::Contains("does not increase"), Error);
  store<std::uint32_t>(bad, indices + 4, 0);
  store<std::uint32_t>(bad, indices, 1);
  CHECK_THROWS_WITH_AS(checkEncoded(topk, bad, 100), doctest::Contains("does not increase"), Error);

  // Sampled top-k may send fewer than k, not more; the length must match the count.
  const Codec sampled = parseCodec("topk:0.05:sampled");
  Bytes fewer(4 + 8 * 2);
  store<std::uint32_t>(fewer, 0, 2);
  store<std::uint32_t>(fewer, 12, 3);
  store<std::uint32_t>(fewer, 16, 9);
  CHECK_NOTHROW(checkEncoded(sampled, fewer, 100));
  store<std::uint32_t>(fewer, 0, 3);
  CHECK_THROWS_WITH_AS(checkEncoded(sampled, fewer, 100), doctest::Contains("for a count of 3"),
                       Error);
  Bytes tooMany(4 + 8 * 6);
  store<std::uint32_t>(tooMany, 0, 6);
  CHECK_THROWS_WITH_AS(checkEncoded(sampled, tooMany, 100), doctest::Contains("at most 5"), Error);

  const Codec randk = parseCodec("randk:0.05");
  CHECK_NOTHROW(checkEncoded(randk, encodeOnCpu(randk, input), 100));
  CHECK_THROWS_WITH_AS(checkEncoded(randk, good, 50), doctest::Contains("expected 3"), Error);
}

}  // namespace
}  // namespace gossamer::kernels
