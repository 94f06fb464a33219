#include "net/ibverbs/protocol.h"

#include <cstring>

#include "net/errors.h"
#include "net/link_support.h"

namespace gossamer::net::ibverbs::protocol {
namespace {

using detail::loadLe;
using detail::storeLe;

bool validMtu(std::uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

std::uint32_t low(std::uint64_t value, int bits) {
  return static_cast<std::uint32_t>(value & ((std::uint64_t{1} << bits) - 1));
}

}  // namespace

std::array<std::byte, kBootstrapBytes> encodeBootstrap(const BootstrapInfo& info) {
  std::array<std::byte, kBootstrapBytes> out{};
  std::byte* p = out.data();
  storeLe(p + 0, kBootstrapMagic, 4);
  storeLe(p + 4, kVersion, 4);
  storeLe(p + 8, info.qpn, 4);
  storeLe(p + 12, info.psn, 4);
  storeLe(p + 16, info.lid, 2);
  storeLe(p + 18, info.useGid ? 1 : 0, 2);
  std::memcpy(p + 20, info.gid.data(), info.gid.size());
  storeLe(p + 36, info.mtu, 4);
  storeLe(p + 40, info.slotAddress, 8);
  storeLe(p + 48, info.slotRkey, 4);
  storeLe(p + 52, info.slotCount, 4);
  storeLe(p + 56, info.slotBytes, 8);
  storeLe(p + 64, info.dataWindow, 4);
  storeLe(p + 68, info.creditWindow, 4);
  storeLe(p + 72, info.receiveBytes, 4);
  return out;
}

std::error_code decodeBootstrap(std::span<const std::byte> bytes, BootstrapInfo* info) {
  if (bytes.size() != kBootstrapBytes) return Errc::malformedFrame;
  const std::byte* p = bytes.data();
  if (loadLe(p, 4) != kBootstrapMagic) return Errc::malformedFrame;
  if (loadLe(p + 4, 4) != kVersion) return Errc::versionMismatch;
  BootstrapInfo got;
  got.qpn = static_cast<std::uint32_t>(loadLe(p + 8, 4));
  got.psn = static_cast<std::uint32_t>(loadLe(p + 12, 4));
  got.lid = static_cast<std::uint16_t>(loadLe(p + 16, 2));
  const std::uint64_t flags = loadLe(p + 18, 2);
  got.useGid = flags == 1;
  std::memcpy(got.gid.data(), p + 20, got.gid.size());
  got.mtu = static_cast<std::uint32_t>(loadLe(p + 36, 4));
  got.slotAddress = loadLe(p + 40, 8);
  got.slotRkey = static_cast<std::uint32_t>(loadLe(p + 48, 4));
  got.slotCount = static_cast<std::uint32_t>(loadLe(p + 52, 4));
  got.slotBytes = loadLe(p + 56, 8);
  got.dataWindow = static_cast<std::uint32_t>(loadLe(p + 64, 4));
  got.creditWindow = static_cast<std::uint32_t>(loadLe(p + 68, 4));
  got.receiveBytes = static_cast<std::uint32_t>(loadLe(p + 72, 4));
  const bool ok = flags <= 1 && got.qpn < (1u << 24) && got.psn < (1u << 24) && validMtu(got.mtu) &&
                  got.slotCount >= 1 && got.slotCount <= kMaxSlotCount &&
                  got.slotBytes >= kMinSlotBytes && got.slotBytes <= kMaxSlotBytes &&
                  got.slotAddress <= UINT64_MAX - got.slotBytes * got.slotCount &&
                  got.dataWindow >= 1 && got.dataWindow <= kMaxDataWindow &&
                  got.creditWindow >= 1 && got.creditWindow <= kMaxCreditWindow &&
                  got.receiveBytes >= kMinReceiveBytes && got.receiveBytes <= kMaxReceiveBytes;
  if (!ok) return Errc::malformedFrame;
  *info = got;
  return {};
}

std::uint32_t packImm(std::uint64_t dataFreed, std::uint64_t slotsFreed,
                      std::uint64_t creditsFreed) {
  return low(dataFreed, kDataBits) << (kSlotBits + kCreditBits) |
         low(slotsFreed, kSlotBits) << kCreditBits | low(creditsFreed, kCreditBits);
}

Credits unpackImm(std::uint32_t imm) {
  return Credits{.dataFreed = imm >> (kSlotBits + kCreditBits),
                 .slotsFreed = (imm >> kCreditBits) & ((1u << kSlotBits) - 1),
                 .creditsFreed = imm & ((1u << kCreditBits) - 1)};
}

std::uint64_t advance(std::uint64_t known, std::uint32_t reported, int bits) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  const std::uint64_t delta = (reported - known) & mask;
  // A delta in the upper half is a report older than what we know (reordered or repeated).
  if (delta > mask / 2) return known;
  return known + delta;
}

std::vector<std::byte> encodeMeta(const OutFrame& frame) {
  std::vector<std::byte> meta(kMetaPrefixBytes + 8 * frame.payloads.size() + frame.header.size());
  storeLe(meta.data(), frame.header.size(), 4);
  storeLe(meta.data() + 4, frame.payloads.size(), 4);
  for (std::size_t i = 0; i < frame.payloads.size(); ++i)
    storeLe(meta.data() + kMetaPrefixBytes + 8 * i, frame.payloads[i].size(), 8);
  if (!frame.header.empty())
    std::memcpy(meta.data() + kMetaPrefixBytes + 8 * frame.payloads.size(), frame.header.data(),
                frame.header.size());
  return meta;
}

std::error_code decodeMetaPrefix(std::span<const std::byte> message, const Limits& limits,
                                 MetaPrefix* prefix) {
  if (message.size() < kMetaPrefixBytes) return Errc::malformedFrame;
  const std::size_t headerBytes = loadLe(message.data(), 4);
  const std::size_t count = loadLe(message.data() + 4, 4);
  if (count > limits.maxPayloads) return Errc::tooManyPayloads;
  if (headerBytes > limits.maxHeaderBytes || headerBytes > limits.maxFrameBytes)
    return Errc::frameTooLarge;
  *prefix = MetaPrefix{.headerBytes = headerBytes,
                       .payloadCount = count,
                       .metaBytes = kMetaPrefixBytes + 8 * count + headerBytes};
  // A message longer than its meta is not one of ours.
  if (message.size() > prefix->metaBytes) return Errc::malformedFrame;
  return {};
}

std::error_code decodeMetaSizes(std::span<const std::byte> meta, const MetaPrefix& prefix,
                                const Limits& limits, std::vector<std::uint64_t>* sizes) {
  if (meta.size() != prefix.metaBytes) return Errc::malformedFrame;
  sizes->resize(prefix.payloadCount);
  for (std::size_t i = 0; i < prefix.payloadCount; ++i)
    (*sizes)[i] = loadLe(meta.data() + kMetaPrefixBytes + 8 * i, 8);
  return detail::checkFrameShape(
      prefix.headerBytes, prefix.payloadCount, [&](std::size_t i) { return (*sizes)[i]; }, limits);
}

}  // namespace gossamer::net::ibverbs::protocol
