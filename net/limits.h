// Bounds that every transport enforces (bounded everything). Checked before
// any allocation, so a hostile or broken peer cannot make us allocate what it claims.
#pragma once

#include <cstddef>

namespace gossamer::net {

struct Limits {
  std::size_t maxHeaderBytes = 64 * 1024;            // one frame's Cap'n Proto header
  std::size_t maxPayloads = 16;                      // payload buffers per frame
  std::size_t maxFrameBytes = std::size_t{1} << 30;  // header + all payloads
  std::size_t maxInFlightSends = 8;                  // per link; further sends wait
  // Bytes of received payloads a link may hold in its pool that the receiver has not released;
  // at the bound the link stops reading, so a slow receiver slows its senders. A frame whose
  // pooled payloads exceed it fails with frameTooLarge: the largest frame a link takes into its
  // pool is min(maxFrameBytes, maxBufferedBytes); larger ones need a PayloadTarget.
  std::size_t maxBufferedBytes = std::size_t{1} << 30;
  // Inbound links whose handshake has not finished, per listening peer: net/wire's
  // serveHandshakes stops accepting at the bound, and TCP uses it as the listen backlog.
  std::size_t maxPendingHandshakes = 128;
  // Of those, from one source address: a further link from it is closed at once (a scanner or
  // a flood from one host cannot take every slot).
  std::size_t maxPendingHandshakesPerSource = 16;
};

}  // namespace gossamer::net
