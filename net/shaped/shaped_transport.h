// The shaped transport: a decorator over any net::Transport that makes its links behave like the
// links of a NetworkProfile (latency, jitter, bandwidth cap, loss) and honours run-time
// partitions. This kernel has no `tc netem`, so WAN experiments and fault tests run through it.
//
// Semantics (the SENDER side shapes; a peer's own shaped layer shapes what it sends):
// - Each frame gets a slot from a LinkSchedule (link_schedule.h) for the profile from this peer's
//   site to the remote's: it occupies the pair's pipe for bytes * 8 / bandwidth after the
//   previous frame (FIFO; this peer's links to one remote share one pipe, so a second connection
//   gains nothing), or, on a profile with a per-flow window, is held to window / RTT per link
//   with the links sharing the pipe's capacity; it is handed to the inner link latency + jitter
//   after its serialization ends. The
//   send completes when the frame STARTS serializing (once the earlier frames are through): a
//   sender is held to the link's rate, yet back-to-back sends keep the link busy, like a
//   transmit queue one frame deep. Latency is pipelined: many frames are in flight at once.
//   Order per link is preserved, jitter included.
// - Loss acts by the link's LossMode (profile.h). stream (the default, what a TCP link does):
//   each kSegmentBytes segment of a frame is lost with probability lossRate and retransmitted:
//   by fast retransmit, about one round trip later, when at least 3 more segments of the frame
//   follow it; otherwise (a loss at the frame's tail), or when the retransmission is lost too,
//   after the link's retransmission timeout, max(200 ms, RTT + 4 RTTVAR), doubled on each
//   further loss of the same segment. The frame arrives when its last segment does, and the
//   frames after it on the link wait for it (in order, nothing dropped). datagram: a frame is
//   silently dropped whole with probability lossRate (message loss, for datagram-like
//   experiments; the link stays open and the send succeeds). Partitions' run-time loss
//   (Partitions::setLoss) adds to the profile's, in the link's mode.
// - While the pair is partitioned (Partitions) frames are dropped, whatever the loss mode, at
//   send time and again at delivery time (a cut also loses the frames on the wire), and connect
//   to the pair fails with Errc::partitioned once its timeout has passed (it succeeds if the
//   partition heals in time).
// - A delayed frame is COPIED (header and payloads into one pooled buffer per frame) when its
//   send is admitted, so the caller's buffers are free once send completes, as the Link contract
//   promises, while latency stays pipelined. Keeping the sender waiting until the inner send
//   instead would serialize every frame behind the full latency. The pool keeps up to 16 freed
//   buffers per link. A link whose profile shapes nothing (`lan`) copies nothing: its sends go
//   straight to the inner link (zero-copy), only partitions apply, until run-time loss is set
//   on it; from its first send under run-time loss on, it is shaped like any other link.
// - Bounds: at most Limits::maxInFlightSends sends outstanding per link and at most
//   Options::maxDelayedBytes of copied frames waiting out their latency (a frame larger than that
//   is admitted alone); further sends wait, in order. A slow inner link (slow receiver) holds the
//   delay line, so it slows the senders instead of growing memory.
// - Peers: connect sends one small preface frame on the inner link carrying this peer's index
//   and site; accept reads it before returning the link, so the accepting side knows which
//   profile and partition pair its own sends use, and the inner transport stays unaware. A
//   connector that sends no valid preface within Options::prefaceTimeout makes accept return
//   Errc::handshakeTimeout or Errc::malformedFrame (the caller accepts again).
// - A remote whose index is unknown (indexOf empty or nullopt) is never partitioned, and is not
//   shaped unless the profile assigns its endpoint a site.
// - Timing: frames are never delivered early; delivery timers fire Options::timerLead early and
//   the link yields to its io loop until the exact time. Closing (or destroying) a link discards
//   the frames still waiting out their latency, as a reset connection would.
// Receives pass through unchanged. Threading, errors and lifetimes are those of net/transport.h:
// the inner transport and the shaped one live on the same io_context; its timers run there.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "net/endpoint.h"
#include "net/shaped/link_schedule.h"
#include "net/shaped/profile.h"
#include "net/transport.h"

namespace gossamer::net::shaped {

struct Options {
  NetworkProfile profile;
  // This peer's index: its site (unless its listen endpoint is assigned one) and its side of
  // partition pairs.
  std::size_t selfIndex = 0;
  // Remote listen endpoint -> peer index, used by connect. Empty, or nullopt for an endpoint:
  // the remote is unknown (see above).
  std::function<std::optional<std::size_t>(const Endpoint&)> indexOf;
  std::uint64_t seed = 1;  // jitter and loss draws; each link derives its own seed from it
  // Per link, see Bounds above: 64 MiB holds 1 Gbit/s for 500 ms; raise it for faster links
  // with long latencies, or the sender waits for deliveries before the link is full.
  std::size_t maxDelayedBytes = std::size_t{64} << 20;
  std::chrono::milliseconds prefaceTimeout{5000};  // accept's wait for the preface
  // A delivery timer fires this much before a frame is due, and the link then yields to its io
  // loop until the exact time: timer wake-ups are late by ~60 us on a loaded VM, which would be
  // 6% of a 1 ms latency. Costs at most this much polling per delivery; 0 = timers only.
  std::chrono::microseconds timerLead{100};
};

// The set of peer pairs that cannot talk, shared by all shaped transports of a test and changed
// while they run. Pairs are unordered: cut(a, b) stops a -> b and b -> a. All methods are
// thread-safe.
class Partitions {
 public:
  void cut(std::size_t a, std::size_t b);
  void heal(std::size_t a, std::size_t b);
  // Cuts (heals) every pair with one peer in `groupA` and the other in `groupB`.
  void cut(std::span<const std::size_t> groupA, std::span<const std::size_t> groupB);
  void heal(std::span<const std::size_t> groupA, std::span<const std::size_t> groupB);
  void healAll();
  bool blocked(std::size_t a, std::size_t b) const;
  std::size_t size() const;

  // Run-time loss on top of the profile's, in each link's loss mode (stream: segments of the
  // frames `from` sends to `to` are lost with probability `rate` and retransmitted; datagram:
  // those frames are dropped with probability `rate`); 0 removes it. For fault injection
  // (gossamer-bench chaos). Throws gossamer::Error when `rate` is outside [0, 1].
  void setLoss(std::size_t from, std::size_t to, double rate);
  void clearLoss();
  double loss(std::size_t from, std::size_t to) const;

 private:
  mutable std::mutex mutex_;
  std::set<std::pair<std::size_t, std::size_t>> cut_;           // (min, max)
  std::map<std::pair<std::size_t, std::size_t>, double> loss_;  // (from, to) -> rate
};

// Wraps `inner` (which must not have been used yet). name() is "shaped(" + inner's name + ")".
// Throws gossamer::Error when `inner` is null or the profile has an invalid link.
std::unique_ptr<Transport> makeTransport(std::unique_ptr<Transport> inner, Options options,
                                         std::shared_ptr<Partitions> partitions = nullptr);

}  // namespace gossamer::net::shaped
