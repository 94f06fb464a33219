// Network profiles for the shaped transport: what a link between two peers looks like (one-way
// latency, jitter, bandwidth cap, loss and how loss acts), as a matrix between named sites plus
// an assignment of peers to sites. Pure data and parsing: no sockets, no clocks.
//
// Built-ins (NetworkProfile::builtin):
//   lan  one site, no shaping.
//   wan  one site; every pair 25 ms one-way, 1 Gbit/s.
//   geo  four sites (tokyo, london, oregon, ohio) with one-way latencies of half the published
//        AWS inter-region RTTs; the matrix, its source and the bandwidth model are in profile.cc
//        and in net/README.md ("Networks and security").
//
// Text format of a custom profile (NetworkProfile::parse / load); '#' starts a comment, fields
// are separated by blanks:
//   name NAME                       optional; default: the file name without directory/extension
//   sites SITE...                   required, once, before any pair line
//   loss-mode stream|datagram       optional, once, anywhere: how every link of the profile
//                                   treats its loss (LossMode below); default stream
//   FROM TO LATENCY_MS JITTER_MS MBIT LOSS [stream|datagram]
//                                   one line per ordered pair of distinct sites (all required);
//                                   FROM == TO (within a site) is optional, default unshaped.
//                                   MBIT 0 = unlimited; LOSS is a probability in [0, 1]; the
//                                   optional last field sets this pair's loss mode instead of
//                                   the loss-mode line's.
//   peer INDEX SITE                 optional: peer INDEX is at SITE
//   peer HOST:PORT SITE             optional: the peer listening at HOST:PORT is at SITE
// Peers not named by a peer line are assigned round-robin: peer i is at site i % siteCount.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "net/endpoint.h"

namespace gossamer::net::shaped {

// How a link treats its loss rate.
enum class LossMode {
  // A TCP connection: the frame is a byte stream of kSegmentBytes segments, each lost with
  // probability lossRate, independently. A lost segment followed by at least kDupAckThreshold
  // more segments of its frame is resent by fast retransmit, about one round trip later; a loss
  // at the frame's tail, or a retransmission lost again, waits for the link's retransmission
  // timeout (LinkProfile::retransmissionTimeout), doubled for each further loss of the same
  // segment (LinkSchedule has the arithmetic). Nothing is dropped: the frame arrives late, and
  // the frames after it on the link wait for it (head-of-line blocking).
  stream,
  // A datagram (UDP-like) link: each frame is silently dropped whole with probability lossRate.
  // For experiments with message loss; a TCP link never loses a frame whole.
  datagram,
};

// "stream" or "datagram".
const char* name(LossMode mode);
// The mode named `text` ("stream" or "datagram"), or nullopt.
std::optional<LossMode> lossModeNamed(std::string_view text);

// The stream model's constants, Linux's TCP defaults.
// Maximum segment size: a 1500-byte Ethernet MTU less the IPv4 (20), TCP (20) and timestamp
// option (12) headers.
inline constexpr std::size_t kSegmentBytes = 1448;
inline constexpr std::chrono::milliseconds kMinRetransmissionTimeout{200};  // TCP_RTO_MIN
inline constexpr std::chrono::seconds kMaxRetransmissionTimeout{120};       // TCP_RTO_MAX
// Duplicate ACKs that trigger fast retransmit (RFC 5681; Linux's tcp_reordering): a lost segment
// is resent without waiting for the timeout once this many later segments have arrived.
inline constexpr std::size_t kDupAckThreshold = 3;
// Losses of one segment before its next retransmission is taken to get through (tcp_retries2;
// Linux would reset the connection there instead). A stream link with loss 1 therefore delivers
// each frame after about 13 minutes, holding every later frame: cut a link with a partition, or
// lose frames whole in datagram mode.
inline constexpr int kMaxRetransmissions = 15;

// One direction of a link. The sender applies it to each frame: delivered after the
// serialization delay (bytes * 8 / bandwidth, FIFO on the link) plus latency plus a uniform draw
// in [-jitter, +jitter] (never below zero, never overtaking an earlier frame); loss adds
// retransmission delays or drops the frame, by lossMode.
struct LinkProfile {
  std::chrono::microseconds latency{0};
  std::chrono::microseconds jitter{0};
  double bandwidthBitsPerSecond = 0;  // 0 = unlimited
  double lossRate = 0;                // stream: per segment; datagram: per frame; [0, 1]
  LossMode lossMode = LossMode::stream;

  // False for a profile that adds no delay and no loss, which the shaped transport passes
  // straight through (the loss mode alone shapes nothing).
  bool shapes() const {
    return latency.count() != 0 || jitter.count() != 0 || bandwidthBitsPerSecond != 0 ||
           lossRate != 0;
  }
  // The stream mode's timeout before the first retransmission of a lost segment, as TCP computes
  // it (RFC 6298): max(kMinRetransmissionTimeout, RTT + 4 RTTVAR), where RTT = 2 x latency and
  // RTTVAR, the mean deviation of the RTT when each direction adds U[-jitter, +jitter], is
  // 2/3 x jitter. The reverse direction is taken to look like this one.
  std::chrono::microseconds retransmissionTimeout() const;
  friend bool operator==(const LinkProfile&, const LinkProfile&) = default;
};

// A named matrix of LinkProfiles between sites, plus which peer is at which site. Immutable
// after setup in practice; copies are cheap enough to put one in every peer's options. All
// methods are const-safe to call from any thread; the mutators are for setup only.
class NetworkProfile {
 public:
  // The `lan` profile: one site, no shaping.
  NetworkProfile();

  // `links` is row-major, links[from * sites.size() + to]. Throws gossamer::Error when the sites
  // are empty or repeated, a site name is not a single blank-free word, the matrix has the wrong
  // size, or a profile is invalid (negative latency or jitter, bandwidth < 0 or not finite, loss
  // outside [0, 1], a loss mode that is neither stream nor datagram).
  NetworkProfile(std::string name, std::vector<std::string> sites, std::vector<LinkProfile> links);

  static NetworkProfile lan();
  static NetworkProfile wan();
  static NetworkProfile geo();
  // One site whose every pair of peers has `link`.
  static NetworkProfile uniform(std::string name, const LinkProfile& link);

  // "lan", "wan" or "geo"; throws gossamer::Error naming the built-ins otherwise.
  static NetworkProfile builtin(std::string_view name);
  static std::vector<std::string> builtinNames();

  // Parses the text format above. `source` names the text in errors ("my.net", a path): every
  // error is a gossamer::Error reading "SOURCE:LINE: what is wrong" (line 0 for whole-file
  // problems such as a missing pair, which also names the pair).
  static NetworkProfile parse(std::string_view text, const std::string& source);
  // Reads and parses the file at `path`; throws gossamer::Error when it cannot be read.
  static NetworkProfile load(const std::string& path);
  // A built-in name, or else a path to a profile file.
  static NetworkProfile fromSpec(const std::string& nameOrPath);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& sites() const { return sites_; }
  std::size_t siteCount() const { return sites_.size(); }
  std::optional<std::size_t> siteIndex(std::string_view site) const;

  // The profile from `fromSite` to `toSite`; throws gossamer::Error when out of range.
  const LinkProfile& link(std::size_t fromSite, std::size_t toSite) const;
  void setLink(std::size_t fromSite, std::size_t toSite, const LinkProfile& link);

  // Pins a peer (by index or by listen endpoint) to a site; throws on an unknown site.
  void assignPeer(std::size_t peerIndex, std::string_view site);
  void assignEndpoint(const Endpoint& endpoint, std::string_view site);

  // The site of peer `peerIndex`: its assignment, else peerIndex % siteCount().
  std::size_t siteOfPeer(std::size_t peerIndex) const;
  // The site an endpoint was assigned to, if any.
  std::optional<std::size_t> siteOfEndpoint(const Endpoint& endpoint) const;
  // The profile from peer `from` to peer `to`, through their sites.
  const LinkProfile& between(std::size_t fromPeer, std::size_t toPeer) const {
    return link(siteOfPeer(fromPeer), siteOfPeer(toPeer));
  }
  // The longest round trip between any two sites (latency + jitter, both ways): what timeouts of
  // protocols over this network must allow for.
  std::chrono::microseconds maxRoundTrip() const;

  // The profile in the text format; parse(str(), ...) gives an equal profile (latencies are
  // kept to the microsecond, bandwidths to the rounding of a double). Its loss-mode line names
  // the mode of most links; pair lines name theirs where it differs.
  std::string str() const;

  friend bool operator==(const NetworkProfile&, const NetworkProfile&) = default;

 private:
  std::string name_;
  std::vector<std::string> sites_;
  std::vector<LinkProfile> links_;  // row-major, sites_.size()^2
  std::map<std::size_t, std::size_t> peerSites_;
  std::map<Endpoint, std::size_t> endpointSites_;
};

// The timing arithmetic of one shaped link direction, separate from clocks and timers so that it
// can be checked exactly: the shaped transport asks it, for each frame in send order, when the
// frame starts and ends serializing and when it reaches the receiver. Not thread-safe (one per
// link, used on the link's io thread).
//
//   start      = max(now, serialized of the previous frame)          (FIFO on the link)
//   serialized = start + bytes * 8 / bandwidth
//   delay      = latency + U[-jitter, +jitter], clamped to >= 0
//   arrival    = serialized + delay
//   deliverAt  = max(arrival, previous deliverAt)                     (order is preserved)
// Loss, with probability p = the profile's lossRate combined with admit's extra rate
// (1 - (1 - lossRate)(1 - extra)):
//   stream     the frame is n = ceil(bytes / kSegmentBytes) segments (at least one). Segment i
//              is lost k times with probability p^k (1 - p) (k capped at kMaxRetransmissions);
//              unlost, it arrives at start + sent(i) + delay, where sent(i) is the serialization
//              time of the frame's first (i + 1) x kSegmentBytes bytes. A lost one arrives later
//              by
//                fast retransmit, when i < n - kDupAckThreshold and fast < RTO:
//                  fast + timeouts(k - 1), where fast = sent(i + kDupAckThreshold) - sent(i) +
//                  2 x delay (the third duplicate ACK leaves the receiver when segment i + 3
//                  arrives and takes `delay` back, the reverse direction taken to look like this
//                  one, and the retransmission takes `delay` again), and a retransmission lost
//                  again waits for the timeout;
//                otherwise (a tail loss: too few segments follow it for duplicate ACKs):
//                  timeouts(k) = RTO + 2 RTO + ... + 2^(k-1) RTO, each term capped at
//                  kMaxRetransmissionTimeout (RTO = LinkProfile::retransmissionTimeout(),
//                  >= 200 ms).
//              The frame's arrival is the latest arrival of its segments; never dropped.
//              Retransmissions add no serialization time, and a loss does not slow the link's
//              later frames (no congestion window): what the model adds is TCP's waiting for
//              duplicate ACKs and for its timer. Two simplifications, both on the slow side: a
//              tail loss waits for the full RTO, not a tail loss probe (~2 RTT, RFC 8985), and
//              the frames queued behind a frame do not trigger fast retransmit of its tail.
//   datagram   dropped with probability p; a lost frame still occupied the link while it was
//              serialized, as on a real wire, and does not hold the frames after it.
// Serialization times are kept to fractions of a nanosecond across frames, so many small frames
// add up to the same time as one large one. Draws come from a seeded std::mt19937_64, so a seed
// and a sequence of (now, bytes, extra) calls give the same slots on every machine.
class LinkSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  struct Slot {
    bool dropped = false;             // datagram mode only
    std::size_t segmentLosses = 0;    // stream mode: losses of the frame's segments (all resent)
    std::size_t fastRetransmits = 0;  // stream mode: segments of those resent by fast retransmit
    Clock::time_point start;          // serialization starts: the sender's send completes here
    Clock::time_point serialized;     // serialization ends
    Clock::time_point deliverAt;      // the receiver gets the frame (meaningless if dropped)
  };

  // Throws gossamer::Error when `profile` is invalid.
  LinkSchedule(const LinkProfile& profile, std::uint64_t seed);

  // The slot of the next frame of `bytes` bytes, whose send starts at `now` (non-decreasing
  // from call to call). `extraLossRate` in [0, 1] (checked) is lost on top of the profile's, in
  // the profile's loss mode (the shaped transport's run-time loss, Partitions::setLoss).
  Slot admit(Clock::time_point now, std::size_t bytes, double extraLossRate = 0);

  // timeouts(losses) above: the sum of the backed-off retransmission timeouts of a segment whose
  // `losses` losses are all recovered by the timer (0 for none), the extra delay of a tail
  // segment. `losses` in [0, kMaxRetransmissions] (checked).
  Clock::duration retransmissionDelay(int losses) const;

  // Exact serialization time of `bytes` bytes (zero when unlimited).
  std::chrono::duration<double> serializationTime(std::size_t bytes) const;

  const LinkProfile& profile() const { return profile_; }

 private:
  double uniform();  // [0, 1)
  // Stream mode: the latest arrival of the segments of a frame of `bytes` bytes that started
  // serializing at `start` and arrives whole at `arrival` unless a segment is lost; `delay` is
  // its one-way delay.
  Clock::time_point streamArrival(Clock::time_point start, Clock::time_point arrival,
                                  Clock::duration delay, std::size_t bytes, double lossRate,
                                  Slot& slot);

  LinkProfile profile_;
  std::mt19937_64 rng_;
  // retransmissionDelay(k) for k = 0 .. kMaxRetransmissions.
  std::vector<Clock::duration> backoff_;
  Clock::time_point busyUntil_{};     // end of the last frame's serialization
  double busyFractionNs_ = 0;         // sub-nanosecond remainder of busyUntil_, [0, 1)
  Clock::time_point lastDelivery_{};  // deliverAt of the last frame not dropped
};

// splitmix64: the seed mixer used to derive per-link seeds from one experiment seed.
std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t value);

// Throws gossamer::Error when `link` is invalid (see the NetworkProfile constructor); `what`
// prefixes the message.
void validateLinkProfile(const LinkProfile& link, std::string_view what);

}  // namespace gossamer::net::shaped
