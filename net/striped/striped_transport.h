// The striped transport: a decorator over a stream transport (tcp, TLS, shaped(tcp)) that carries
// each link over K connections, so that a long path is not held to one connection's window / RTT.
//
// - Set-up. connect opens stream 0 and sends hello(group, 0, K), where `group` is a random
//   64-bit id; with `auto` (K = 0 in the hello) the acceptor answers ack, the connector measures
//   the round trip, chooses K (autoStreams below) and sends plan(K) on stream 0. The connector
//   then opens streams 1..K-1, each sending hello(group, i, K), and returns the link. The
//   accepting end accepts every inbound connection at once and reads its hello (within
//   setupTimeout) on a coroutine of its own, so that one connector's streams never wait for
//   another's set-up; accept returns a link once its K streams are in, or a set-up that failed
//   (the caller accepts again). A group not complete within setupTimeout is dropped. The
//   connector's K wins, up to maxStreams; both ends stripe their sends over the same streams.
//   A fixed K costs no round trip; auto costs one. Hole punching (punch) makes links of one
//   stream.
// - Frames (striped_link.h has the layout). Small frames and control traffic go whole on stream
//   0; a frame whose payloads total at least 2 x stripeBytes is cut into one chunk per stream
//   (at most K, each at least stripeBytes), sent at once, reassembled in order, landing straight
//   in the receiver's PayloadTarget buffers.
// - Failure. A broken stream fails the link as a broken connection does: every stream is closed
//   and every later operation returns the first error.
// - Limits: the inner transport's, less the striping's header bytes (limits()).
// - The group id is the only thing that binds streams 1..K-1 to stream 0: it is drawn from
//   std::random_device, and each stream has the inner transport's own protection (TLS).
// Set-up messages (16 bytes, integers little-endian): "GSTR" | u8 version 1 | u8 kind (1 hello,
// 2 ack, 3 plan) | u8 stream index (hello) | u8 streams (hello: K, or 0 for auto; plan) | u64
// group.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "net/transport.h"

namespace gossamer::net::striped {

// What limits one connection toward a remote, for autoStreams.
struct PathHint {
  std::uint64_t flowWindowBytes = 0;  // one connection's window; 0: unknown or not limiting
  double capacityBitsPerSecond = 0;   // the path's capacity; 0: unknown (kAssumedCapacity)
};

// The capacity assumed for a path that gives none: a 10 Gbit/s interface.
inline constexpr double kAssumedCapacityBitsPerSecond = 10e9;

// `auto` streams: enough connections, each held to window / RTT, to fill the path's capacity:
// ceil(capacity x rtt / (8 x window)), in [1, maxStreams]; 1 when the window does not limit.
std::size_t autoStreams(std::chrono::duration<double> rtt, const PathHint& path,
                        std::size_t maxStreams);

// The throughput of `streams` connections along `path`, each held to window / rtt, within the
// capacity, in bit/s; +infinity when neither limits it.
double pathBitsPerSecond(const PathHint& path, std::chrono::duration<double> rtt,
                         std::size_t streams);

struct Options {
  std::size_t streams = 1;      // K per link; 0: auto (autoStreams at each connect)
  std::size_t maxStreams = 64;  // the most a connector may ask for; more is refused
  std::size_t stripeBytes = std::size_t{1} << 20;  // the smallest chunk
  std::chrono::milliseconds setupTimeout{10000};
  // The path toward a remote listen endpoint, for auto; empty: PathHint{} (one stream).
  std::function<PathHint(const Endpoint&)> pathOf;
  // Told each connector's choice: the remote, its streams and the round trip measured.
  std::function<void(const Endpoint&, std::size_t streams, std::chrono::duration<double> rtt)>
      onConnect;
};

// Wraps `inner` (not used yet); name() is "striped(" + inner's name + ")". Throws
// gossamer::Error when `inner` is null or options.maxStreams is not in [1, 255].
std::unique_ptr<Transport> makeTransport(std::unique_ptr<Transport> inner, Options options);

// The fastest interface's speed from /sys/class/net (loopback aside), in bit/s; 0 when unknown.
double localInterfaceBitsPerSecond();

}  // namespace gossamer::net::striped
