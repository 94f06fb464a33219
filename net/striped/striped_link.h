// One logical link over K streams (K inner links to the same remote), for the striped transport
// (striped_transport.h has the whole design). Internal to net/striped.
//
// Data frames, after the streams' set-up, as inner frames (integers little-endian):
//   whole  stream 0: u8 1 | the frame's header                     payloads: the frame's
//   lead   stream 0: u8 2 | u8 streams U | u8 payload count n | u8 0 | u64 sequence
//                    | u64 payload size x n | the frame's header    payloads: none
//   chunk  stream i < U: u8 3 | u8 i | u16 0 | u32 0 | u64 sequence
//                    payloads: the pieces of the frame's payloads in byte range
//                    [i c, min((i + 1) c, T)) of their concatenation, T their total, c = ceil(T /
//                    U)
// A frame whose payloads total at least 2 x Options::stripeBytes goes as a lead and U =
// min(K, T / stripeBytes) chunks, one per stream (stream 0's after the lead); any other goes
// whole on stream 0. Every stream carries its inner frames in send order, and a receiver reads
// stream 0 first, so frames arrive in order. Chunks land straight in the receiver's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "net/transport.h"

namespace gossamer::net::striped {

inline constexpr std::byte kWholeFrame{1};
inline constexpr std::byte kLeadFrame{2};
inline constexpr std::byte kChunkFrame{3};
inline constexpr std::size_t kLeadFixedBytes = 12;
inline constexpr std::size_t kChunkHeaderBytes = 16;

// One piece of a chunk: part of payload `payload` at `offset`.
struct Piece {
  std::size_t payload = 0;
  std::size_t offset = 0;
  std::size_t size = 0;
};

// The pieces of chunk `index` of `streams` over payloads of `sizes` (the layout above).
std::vector<Piece> chunkPieces(std::span<const std::uint64_t> sizes, std::size_t streams,
                               std::size_t index);

// The number of streams a frame of `totalBytes` payload bytes goes over with `streams` open:
// 1 (whole) below 2 x stripeBytes, else min(streams, totalBytes / stripeBytes).
std::size_t streamsFor(std::uint64_t totalBytes, std::size_t streams, std::size_t stripeBytes);

// The logical link over `streams` (at least one, all open and set up). Its limits are the inner
// links'; payloads no PayloadTarget claims land in a pool of limits.maxBufferedBytes. A failure
// of any stream closes every stream and fails the link with that error.
std::unique_ptr<Link> makeStripedLink(asio::any_io_executor executor,
                                      std::vector<std::unique_ptr<Link>> streams,
                                      const Limits& limits, std::size_t stripeBytes);

}  // namespace gossamer::net::striped
