// The body of the payload-decoder fuzz target, shared by tests/fuzz/fuzz_payload_decoder.cc
// (libFuzzer) and tests/kernels/codec_corpus_replay_test.cc (doctest, default build). It plays a
// received compressed payload: a descriptor (codec, block size, fraction, element count) and the
// bytes, checked by kernels::checkEncoded and, when accepted, decoded by the CPU reference.
//
// Input: byte 0 the codec kind (mod 7), bytes 1-2 the block size (little-endian), byte 3 the
// fraction ((b + 1) / 256) with bit 7 of byte 0 for sampled top-k, bytes 4-5 the element count
// n, the rest the payload. Returns an empty string, or the property the input broke: only
// gossamer::Error may leave the checks; an accepted payload must decode, twice alike, and
// accumulate onto zeros to the same values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "engine/base/enforce.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::kernels::testing {

// The bytes of a fuzz input that describe `codec` and n (the payload follows them).
inline std::vector<std::uint8_t> codecFuzzHeader(const Codec& codec, std::uint16_t n) {
  const auto fraction = static_cast<std::uint8_t>(
      std::clamp(std::lround(codec.fraction * 256.0) - 1, 0l, 255l));
  const auto block = static_cast<std::uint16_t>(codec.blockSize);
  return {static_cast<std::uint8_t>(static_cast<std::uint8_t>(codec.kind) |
                                    (codec.selection == TopKSelection::kSampled ? 0x80 : 0)),
          static_cast<std::uint8_t>(block & 0xff), static_cast<std::uint8_t>(block >> 8),
          fraction, static_cast<std::uint8_t>(n & 0xff), static_cast<std::uint8_t>(n >> 8)};
}

inline std::string fuzzPayloadDecoder(const std::uint8_t* data, std::size_t size) {
  if (size < 6) return {};
  Codec codec;
  codec.kind = static_cast<CodecKind>((data[0] & 0x7f) % 7);
  codec.selection = (data[0] & 0x80) != 0 ? TopKSelection::kSampled : TopKSelection::kExact;
  codec.blockSize = static_cast<std::size_t>(data[1] | (data[2] << 8));
  codec.fraction = (static_cast<double>(data[3]) + 1.0) / 256.0;
  const std::size_t n = static_cast<std::size_t>(data[4] | (data[5] << 8));
  const auto payload = std::as_bytes(std::span(data + 6, size - 6));
  try {
    validate(codec);
    checkEncoded(codec, payload, n);
  } catch (const Error&) {
    return {};  // refused with a clear error: what a receiver does
  } catch (const std::exception& e) {
    return std::string("the checks threw something other than gossamer::Error: ") + e.what();
  }
  // Accepted: decode from aligned memory, as a receive slot holds it.
  std::vector<float> aligned((payload.size() + 3) / 4);
  if (!payload.empty()) std::memcpy(aligned.data(), payload.data(), payload.size());
  const auto bytes = std::as_bytes(std::span(aligned)).first(payload.size());
  const auto compute = cpu::makeCompute();
  std::vector<float> once(n, 1.0f), twice(n, 2.0f), sum(n, 0.0f);
  try {
    compute->decode(codec, bytes, once, DecodeMode::kOverwrite);
    compute->decode(codec, bytes, twice, DecodeMode::kOverwrite);
    compute->decode(codec, bytes, sum, DecodeMode::kAccumulate);
  } catch (const std::exception& e) {
    return std::string("a payload that passed checkEncoded failed to decode: ") + e.what();
  }
  for (std::size_t i = 0; i < n; ++i) {
    const bool same = std::memcmp(&once[i], &twice[i], sizeof(float)) == 0 ||
                      (std::isnan(once[i]) && std::isnan(twice[i]));
    if (!same) return "decoding the same payload twice gave different values";
    const bool accumulated = sum[i] == once[i] + 0.0f || (std::isnan(sum[i]) && std::isnan(once[i]));
    if (!accumulated) return "accumulating onto zeros differs from overwriting";
  }
  return {};
}

}  // namespace gossamer::kernels::testing
