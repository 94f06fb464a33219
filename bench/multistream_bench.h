// The multistream part of `gossamer-bench shaped`: a long path's throughput over several tcp
// connections per link (net/striped) against one connection, on the emulated `geo-cap` path
// Tokyo-London, and the cost of striping on loopback without emulation.
#pragma once

#include <cstddef>

namespace gossamer::bench {

struct MultistreamFigures {
  std::size_t autoStreams = 0;           // the striped transport's auto choice Tokyo-London
  double multistreamBitsPerSecond = 0;   // with them
  double singleBitsPerSecond = 0;        // with one connection
  double capacityBitsPerSecond = 0;      // the path's capacity
  double autoModelBitsPerSecond = 0;     // min(K x window / RTT, capacity)
  double singleModelBitsPerSecond = 0;   // window / RTT
  double loopbackOneBitsPerSecond = 0;   // plain tcp on loopback
  double loopbackFourBitsPerSecond = 0;  // striped over 4 connections on loopback
};

// Transfers `autoMiB` over `auto` streams and `singleMiB` over one on geo-cap Tokyo-London, and
// `loopbackMiB` over plain tcp and over 4 striped connections on loopback; all plaintext, in
// frames of 64 MiB, sender and receiver on their own io threads. Throughput = the bytes / the
// time from the first send to the last frame's arrival less the path's one-way latency.
MultistreamFigures measureMultistream(std::size_t autoMiB, std::size_t singleMiB,
                                      std::size_t loopbackMiB);

}  // namespace gossamer::bench
