// Network profiles for the shaped transport: what a link between two peers looks like (one-way
// latency, jitter, bandwidth cap, loss and how loss acts), as a matrix between named sites plus
// an assignment of peers to sites. Pure data and parsing: no sockets, no clocks.
//
// Built-ins (NetworkProfile::builtin):
//   lan  one site, no shaping.
//   wan  one site; every pair 25 ms one-way, 1 Gbit/s.
//   geo  four sites (tokyo, london, oregon, ohio) with one-way latencies of half the published
//        AWS inter-region RTTs; the matrix, its source and the bandwidth model are in profile.cc
//        and in net/README.md ("Networks and security"). Each pair's bandwidth is what one TCP
//        connection with an 8 MiB window reaches, and extra connections share it.
//   geo-cap  geo's sites, latencies and jitter, with 10 Gbit/s capacities and 8 MiB per-flow
//        windows: one connection Tokyo-London reaches 317 Mbit/s, 32 fill the link.
//
// Text format of a custom profile (NetworkProfile::parse / load); '#' starts a comment, fields
// are separated by blanks:
//   name NAME                       optional; default: the file name without directory/extension
//   sites SITE...                   required, once, before any pair line
//   loss-mode stream|datagram       optional, once, anywhere: how every link of the profile
//                                   treats its loss (LossMode below); default stream
//   flow-window MIB                 optional, once, anywhere: every link's per-flow window in MiB
//                                   (LinkProfile::flowWindowBytes); default 0, none
//   FROM TO LATENCY_MS JITTER_MS MBIT LOSS [stream|datagram] [window=MIB]
//                                   one line per ordered pair of distinct sites (all required);
//                                   FROM == TO (within a site) is optional, default unshaped.
//                                   MBIT (the pair's capacity) 0 = unlimited; LOSS is a
//                                   probability in [0, 1]; the optional fields set this pair's
//                                   loss mode and per-flow window instead of the profile's.
//   peer INDEX SITE                 optional: peer INDEX is at SITE
//   peer HOST:PORT SITE             optional: the peer listening at HOST:PORT is at SITE
// Peers not named by a peer line are assigned round-robin: peer i is at site i % siteCount.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
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

// One direction of a link between two sites. The sender applies it to each frame: delivered
// after the serialization delay (bytes * 8 / bandwidth, FIFO on the pair's pipe, or held to
// flowWindowBytes / RTT per connection; link_schedule.h has the arithmetic) plus latency plus a
// uniform draw in [-jitter, +jitter] (never below zero, never overtaking an earlier frame); loss
// adds retransmission delays or drops the frame, by lossMode.
struct LinkProfile {
  std::chrono::microseconds latency{0};
  std::chrono::microseconds jitter{0};
  // The pair's capacity, shared by all its connections; 0 = unlimited.
  double bandwidthBitsPerSecond = 0;
  double lossRate = 0;  // stream: per segment; datagram: per frame; [0, 1]
  LossMode lossMode = LossMode::stream;
  // TCP's window of one connection: each is held to flowWindowBytes * 8 / (2 x latency) bit/s,
  // so a long path needs several connections to fill its capacity. 0 = no per-flow limit (a
  // connection alone fills the pair's pipe, and more connections gain nothing).
  std::uint64_t flowWindowBytes = 0;

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
  // One connection's limit, flowWindowBytes * 8 / RTT with RTT = 2 x latency; 0 = none (no window,
  // or no latency).
  double flowBitsPerSecond() const;
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
  static NetworkProfile geoCap();
  // One site whose every pair of peers has `link`.
  static NetworkProfile uniform(std::string name, const LinkProfile& link);

  // "lan", "wan", "geo" or "geo-cap"; throws gossamer::Error naming the built-ins otherwise.
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

// splitmix64: the seed mixer used to derive per-link seeds from one experiment seed.
std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t value);

// Throws gossamer::Error when `link` is invalid (see the NetworkProfile constructor); `what`
// prefixes the message.
void validateLinkProfile(const LinkProfile& link, std::string_view what);

}  // namespace gossamer::net::shaped
