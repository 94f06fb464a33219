// The codec loops of the CPU backend (internal to kernels/cpu): CpuCompute::encode and decode
// check their arguments (checks::encode / checks::decode) and call these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/codec.h"

namespace gossamer::kernels::cpu {

// Working memory of top-k, kept by the Compute between calls so a steady-state encode does not
// allocate: magnitude keys for the exact selection (n) or the sample (m).
struct CodecScratch {
  std::vector<std::uint32_t> keys;
};

// Arguments already checked: out is encodedBytes(codec, n) bytes, 4-byte aligned; residual is
// empty or n long. Returns the payload bytes used (see Compute::encode).
std::size_t encode(const Codec& codec, std::span<const float> input, std::span<float> residual,
                   std::span<std::byte> out, std::uint64_t seed, CodecScratch& scratch);

// Arguments already checked; `count` is the sparse payload's element count from checks::decode.
void decode(const Codec& codec, std::span<const std::byte> payload, std::size_t count,
            std::span<float> out, DecodeMode mode);

}  // namespace gossamer::kernels::cpu
