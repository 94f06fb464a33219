// What the two ends of an RDMA link say to each other, as pure functions (no verbs, no I/O), so
// that every parser of remote input is tested on its own.
//
// Bootstrap (over the TCP control connection, one frame each way, then one "ready" frame each
// way): BootstrapInfo, a fixed little-endian record: magic "GRB1", version, QP number, LID, GID,
// PSN, MTU, and the receive side of the sender: where its payload slots are (address, rkey,
// count, size), how many receives it keeps posted for data messages and for credit messages, and
// the size of each receive buffer.
//
// Data path, per direction (the receiver's resources, the sender's accounting):
// - Frame message: SEND_WITH_IMM of the frame's meta = u32 header bytes | u32 payload count |
//   u64 payload bytes, one per payload | header bytes; at most the receiver's receive-buffer size
//   goes in the SEND, the rest of the meta follows in chunks.
// - Chunk: RDMA_WRITE_WITH_IMM of up to one slot into the receiver's next slot (ring order, so
//   the slot is implied). A chunk holds bytes of ONE segment (the meta's overflow, or one
//   payload): segment i of n bytes is ceil(n / slotBytes) chunks, all full but the last.
// - Credit message: a zero-length SEND_WITH_IMM carrying only credits.
// Every message carries in its immediate the sender's cumulative counts of what it has freed of
// the OTHER direction (mod 2^bits): receives freed after a data message (frame or chunk), slots
// freed, and receives freed after a credit message. A sender posts a data message only while the
// receiver has a data receive posted for it (dataWindow), a chunk only into a free slot
// (slotCount), and a credit message only into a credit receive (creditWindow): it never overruns
// the receiver, and waits for credits instead.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "net/frame.h"
#include "net/ibverbs/verbs.h"
#include "net/limits.h"

namespace gossamer::net::ibverbs::protocol {

inline constexpr std::uint32_t kBootstrapMagic = 0x31425247;  // "GRB1"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint32_t kReadyMagic = 0x31445952;  // "RYD1"

// Widths of the immediate's counters; windows stay below half their range, so a counter that
// wrapped is still unambiguous.
inline constexpr int kDataBits = 12;
inline constexpr int kSlotBits = 12;
inline constexpr int kCreditBits = 8;
inline constexpr std::uint32_t kMaxDataWindow = (1u << (kDataBits - 1)) - 1;      // 2047
inline constexpr std::uint32_t kMaxSlotCount = (1u << (kSlotBits - 1)) - 1;       // 2047
inline constexpr std::uint32_t kMaxCreditWindow = (1u << (kCreditBits - 1)) - 1;  // 127
// Bounds on a remote's announced buffers.
inline constexpr std::uint64_t kMinSlotBytes = 4096;
inline constexpr std::uint64_t kMaxSlotBytes = std::uint64_t{1} << 30;
inline constexpr std::uint32_t kMinReceiveBytes = 64;
inline constexpr std::uint32_t kMaxReceiveBytes = 1u << 20;
inline constexpr std::size_t kMetaPrefixBytes = 8;

struct BootstrapInfo {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint16_t lid = 0;
  Gid gid{};
  bool useGid = false;
  std::uint32_t mtu = 1024;
  std::uint64_t slotAddress = 0;
  std::uint32_t slotRkey = 0;
  std::uint32_t slotCount = 0;
  std::uint64_t slotBytes = 0;
  std::uint32_t dataWindow = 0;
  std::uint32_t creditWindow = 0;
  std::uint32_t receiveBytes = 0;
};

inline constexpr std::size_t kBootstrapBytes = 76;

std::array<std::byte, kBootstrapBytes> encodeBootstrap(const BootstrapInfo& info);
// Errc::malformedFrame for a record of the wrong size or magic, or with values out of bounds;
// Errc::versionMismatch for another version.
std::error_code decodeBootstrap(std::span<const std::byte> bytes, BootstrapInfo* info);

// The credits one message carries: cumulative counts mod 2^bits.
struct Credits {
  std::uint32_t dataFreed = 0;
  std::uint32_t slotsFreed = 0;
  std::uint32_t creditsFreed = 0;
};
std::uint32_t packImm(std::uint64_t dataFreed, std::uint64_t slotsFreed,
                      std::uint64_t creditsFreed);
Credits unpackImm(std::uint32_t imm);
// `known` advanced to the cumulative count whose low `bits` bits are `reported` (never backwards:
// a stale report leaves it unchanged).
std::uint64_t advance(std::uint64_t known, std::uint32_t reported, int bits);

// The meta of a frame, as sent: prefix, payload sizes, header.
std::vector<std::byte> encodeMeta(const OutFrame& frame);

struct MetaPrefix {
  std::size_t headerBytes = 0;
  std::size_t payloadCount = 0;
  std::size_t metaBytes = 0;  // prefix + size table + header
};
// Reads the prefix from the first bytes of a frame message and checks it against `limits`
// before anything is allocated: Errc::malformedFrame when shorter than the prefix,
// tooManyPayloads or frameTooLarge beyond the limits.
std::error_code decodeMetaPrefix(std::span<const std::byte> message, const Limits& limits,
                                 MetaPrefix* prefix);
// The payload sizes of a complete meta (prefix already checked), and the frame-shape check.
std::error_code decodeMetaSizes(std::span<const std::byte> meta, const MetaPrefix& prefix,
                                const Limits& limits, std::vector<std::uint64_t>* sizes);

// Chunks of a segment of `bytes` over slots of `slotBytes`.
inline std::size_t chunkCount(std::size_t bytes, std::size_t slotBytes) {
  return bytes / slotBytes + (bytes % slotBytes != 0 ? 1 : 0);
}

}  // namespace gossamer::net::ibverbs::protocol
