#include "engine/runtime/payload_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/data/random.h"

namespace gossamer::engine::runtime {
namespace {

using WireCodec = net::wire::PayloadEncoding::Codec;

// Encoded payloads start at multiples of 4 bytes in the scratch (their float32/uint32 fields).
constexpr std::size_t kAlignment = 4;

std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The wire's codec values are kernels::CodecKind's, in the same order (messages.capnp appends
// new codecs at the end, as CodecKind must).
static_assert(static_cast<int>(WireCodec::none) == static_cast<int>(kernels::CodecKind::kNone) &&
              static_cast<int>(WireCodec::fp16) == static_cast<int>(kernels::CodecKind::kFp16) &&
              static_cast<int>(WireCodec::bf16) == static_cast<int>(kernels::CodecKind::kBf16) &&
              static_cast<int>(WireCodec::int8) == static_cast<int>(kernels::CodecKind::kInt8) &&
              static_cast<int>(WireCodec::int4) == static_cast<int>(kernels::CodecKind::kInt4) &&
              static_cast<int>(WireCodec::topk) == static_cast<int>(kernels::CodecKind::kTopK) &&
              static_cast<int>(WireCodec::randk) == static_cast<int>(kernels::CodecKind::kRandK));

}  // namespace

net::wire::PayloadEncoding encodingOf(const kernels::Codec& codec) {
  net::wire::PayloadEncoding encoding;
  encoding.codec = static_cast<WireCodec>(codec.kind);
  switch (codec.kind) {
    case kernels::CodecKind::kInt8:
    case kernels::CodecKind::kInt4:
      encoding.blockSize = static_cast<std::uint32_t>(codec.blockSize);
      break;
    case kernels::CodecKind::kTopK:
    case kernels::CodecKind::kRandK:
      encoding.fraction = codec.fraction;
      encoding.sampled = codec.selection == kernels::TopKSelection::kSampled;
      break;
    default:
      break;
  }
  return encoding;
}

kernels::Codec codecOf(const net::wire::PayloadEncoding& encoding) {
  kernels::Codec codec;
  codec.kind = static_cast<kernels::CodecKind>(encoding.codec);  // in range: the wire decoder checked
  if (codec.kind == kernels::CodecKind::kInt8 || codec.kind == kernels::CodecKind::kInt4)
    codec.blockSize = encoding.blockSize;
  if (kernels::isSparse(codec.kind)) {
    codec.fraction = encoding.fraction;
    codec.selection =
        encoding.sampled ? kernels::TopKSelection::kSampled : kernels::TopKSelection::kExact;
  }
  kernels::validate(codec);
  return codec;
}

PayloadCodec::PayloadCodec(kernels::Compute& compute, kernels::Compute& hostCompute,
                           PayloadCompression compression, std::uint64_t seed,
                           std::function<net::Payload(std::size_t)> slot,
                           std::size_t maxDecodedBytes)
    : compute_(compute),
      hostCompute_(hostCompute),
      compression_(compression),
      seed_(seed),
      slot_(std::move(slot)),
      maxDecodedBytes_(maxDecodedBytes) {
  kernels::validate(compression_.codec);
}

std::span<std::byte> PayloadCodec::scratch(kernels::Compute& compute,
                                           kernels::Buffer<std::byte>& buffer, std::size_t bytes) {
  // Grown, never shrunk. Freeing the old buffer waits for the device (cudaFree), so a copy still
  // reading it has ended.
  if (buffer.size() < bytes) buffer = compute.allocate<std::byte>(bytes);
  return buffer.span().first(bytes);
}

WirePayloads rawPayloads(const Message& message) {
  WirePayloads out{OutgoingBytes::of(message), {}};
  out.descriptors.reserve(message.payloads.size());
  for (const auto& payload : message.payloads)
    out.descriptors.push_back({payload.size_bytes(), net::wire::Dtype::f32, payload.size(), {}});
  return out;
}

WirePayloads PayloadCodec::encode(const Message& message) {
  return encodeWith(compute_, scratch_, message);
}

WirePayloads PayloadCodec::encodeReply(const Message& message) {
  return encodeWith(hostCompute_, replyScratch_, message);
}

WirePayloads PayloadCodec::encodeWith(kernels::Compute& compute,
                                      kernels::Buffer<std::byte>& buffer, const Message& message) {
  WirePayloads out = rawPayloads(message);
  if (!compression_.enabled() || message.compressible.empty()) return out;

  // Where each marked payload goes in the scratch (and how much room it has), then one encode
  // per payload.
  std::vector<std::size_t> offsets(message.compressible.size());
  std::vector<std::size_t> capacities(message.compressible.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < message.compressible.size(); ++i) {
    const Compressible& mark = message.compressible[i];
    GOSSAMER_ENFORCE_LT(mark.payload, message.payloads.size(),
                        "a compressible mark names a payload the message does not have");
    GOSSAMER_ENFORCE(mark.residual.empty() ||
                         mark.residual.size() == message.payloads[mark.payload].size(),
                     "the residual of payload {} has {} elements, the payload {}", mark.payload,
                     mark.residual.size(), message.payloads[mark.payload].size());
    GOSSAMER_ENFORCE(mark.sent.empty() || mark.sent.size() == message.payloads[mark.payload].size(),
                     "the decoded copy of payload {} has {} elements, the payload {}", mark.payload,
                     mark.sent.size(), message.payloads[mark.payload].size());
    offsets[i] = total;
    capacities[i] = kernels::encodedBytes(compression_.codec, message.payloads[mark.payload].size());
    total = aligned(total + capacities[i]);
  }
  const std::span<std::byte> space = scratch(compute, buffer, total);
  for (std::size_t i = 0; i < message.compressible.size(); ++i) {
    const Compressible& mark = message.compressible[i];
    const std::span<const float> input = message.payloads[mark.payload];
    const std::span<std::byte> target = space.subspan(offsets[i], capacities[i]);
    const std::span<float> residual =
        compression_.errorFeedback ? mark.residual : std::span<float>();
    const std::size_t used =
        compute.encode(compression_.codec, input, residual, target,
                       data::detail::mixSeed(seed_, draws_++));
    if (!mark.sent.empty())
      compute.decode(compression_.codec, target.first(used), mark.sent,
                     kernels::DecodeMode::kOverwrite);
    out.bytes.spans[mark.payload] = target.first(used);
    out.descriptors[mark.payload] = {used, net::wire::Dtype::bytes, input.size(),
                                     encodingOf(compression_.codec)};
    ++encodedPayloads_;
    rawBytes_ += input.size_bytes();
    wireBytes_ += used;
  }
  // Encoded payloads live in the scratch, which the next encode() overwrites: they are staged by
  // copy, whatever the message's owner promised about its float32 payloads.
  out.bytes.owner = nullptr;
  return out;
}

DecodedPayload PayloadCodec::decode(const net::wire::PayloadDescriptor& descriptor,
                                    net::Payload& payload) {
  const std::span<std::byte> bytes = payload.bytes();
  if (descriptor.encoding.codec == WireCodec::none) {
    if (bytes.size() % sizeof(float) != 0 ||
        reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(float) != 0) {
      return {.error = fmt::format("a payload of {} bytes is not float32 data", bytes.size())};
    }
    return {std::span<const float>(reinterpret_cast<const float*>(bytes.data()),
                                   bytes.size() / sizeof(float)),
            payload.releaseOwner(), ""};
  }
  kernels::Codec codec;
  try {
    codec = codecOf(descriptor.encoding);
  } catch (const Error& e) {
    return {.error = fmt::format("a payload's encoding is invalid: {}", e.what())};
  }
  const std::uint64_t n = descriptor.elements;
  if (n > maxDecodedBytes_ / sizeof(float)) {
    return {.error = fmt::format(
                "a {} payload claims {} elements, more than the {} this peer takes",
                kernels::formatCodec(codec), n, maxDecodedBytes_ / sizeof(float))};
  }
  try {
    kernels::checkEncoded(codec, bytes, n);
  } catch (const Error& e) {
    return {.error = fmt::format("a malformed {} payload: {}", kernels::formatCodec(codec), e.what())};
  }
  // Decode reads float32/uint32 fields: an unaligned payload (never one of ours: receive slots and
  // the link's pool are aligned) is copied first.
  std::vector<std::byte> alignedCopy;
  std::span<const std::byte> source = bytes;
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(float) != 0) {
    alignedCopy.assign(bytes.begin(), bytes.end());
    source = alignedCopy;
  }
  net::Payload slot = slot_(n * sizeof(float));
  std::span<float> floats;
  std::shared_ptr<const void> owner;
  if (slot.size() >= n * sizeof(float) && n > 0) {
    floats = std::span<float>(reinterpret_cast<float*>(slot.bytes().data()), n);
    owner = slot.releaseOwner();
  } else {
    auto own = std::make_shared<std::vector<float>>(n);
    floats = *own;
    owner = std::move(own);
  }
  hostCompute_.decode(codec, source, floats, kernels::DecodeMode::kOverwrite);
  return {floats, std::move(owner), ""};
}

}  // namespace gossamer::engine::runtime
