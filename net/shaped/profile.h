// Network profiles for the shaped transport: what a link between two peers looks like (one-way
// latency, jitter, bandwidth cap, loss), as a matrix between named sites plus an assignment of
// peers to sites. Pure data and parsing: no sockets, no clocks.
//
// Built-ins (NetworkProfile::builtin):
//   lan  one site, no shaping.
//   wan  one site; every pair 25 ms one-way, 1 Gbit/s.
//   geo  four sites (tokyo, london, oregon, ohio) with one-way latencies of half the published
//        AWS inter-region RTTs; the matrix, its source and the bandwidth model are in profile.cc
//        and in the README ("Networks and security").
//
// Text format of a custom profile (NetworkProfile::parse / load); '#' starts a comment, fields
// are separated by blanks:
//   name NAME                       optional; default: the file name without directory/extension
//   sites SITE...                   required, once, before any pair line
//   FROM TO LATENCY_MS JITTER_MS MBIT LOSS
//                                   one line per ordered pair of distinct sites (all required);
//                                   FROM == TO (within a site) is optional, default unshaped.
//                                   MBIT 0 = unlimited; LOSS is a probability in [0, 1].
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

// One direction of a link. The sender applies it to each frame: delivered after the
// serialization delay (bytes * 8 / bandwidth, FIFO on the link) plus latency plus a uniform draw
// in [-jitter, +jitter] (never below zero, never overtaking an earlier frame), unless dropped
// with probability lossRate.
struct LinkProfile {
  std::chrono::microseconds latency{0};
  std::chrono::microseconds jitter{0};
  double bandwidthBitsPerSecond = 0;  // 0 = unlimited
  double lossRate = 0;                // probability that a frame is silently dropped, [0, 1]

  // False for the all-zero profile, which the shaped transport passes straight through.
  bool shapes() const {
    return latency.count() != 0 || jitter.count() != 0 || bandwidthBitsPerSecond != 0 ||
           lossRate != 0;
  }
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
  // outside [0, 1]).
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
  // kept to the microsecond, bandwidths to the rounding of a double).
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
//   deliverAt  = max(serialized + latency + U[-jitter, +jitter] clamped to >= serialized,
//                    previous deliverAt)                             (order is preserved)
//   dropped    with probability lossRate; a lost frame still occupied the link while it was
//              serialized, as on a real wire.
// Serialization times are kept to fractions of a nanosecond across frames, so many small frames
// add up to the same time as one large one. Draws come from a seeded std::mt19937_64, so a seed
// and a sequence of (now, bytes) calls give the same slots on every machine.
class LinkSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  struct Slot {
    bool dropped = false;
    Clock::time_point start;       // serialization starts: the sender's send completes here
    Clock::time_point serialized;  // serialization ends
    Clock::time_point deliverAt;   // the receiver gets the frame (meaningless if dropped)
  };

  // Throws gossamer::Error when `profile` is invalid.
  LinkSchedule(const LinkProfile& profile, std::uint64_t seed);

  // The slot of the next frame of `bytes` bytes, whose send starts at `now` (non-decreasing
  // from call to call).
  Slot admit(Clock::time_point now, std::size_t bytes);

  // Exact serialization time of `bytes` bytes (zero when unlimited).
  std::chrono::duration<double> serializationTime(std::size_t bytes) const;

  const LinkProfile& profile() const { return profile_; }

 private:
  double uniform();  // [0, 1)

  LinkProfile profile_;
  std::mt19937_64 rng_;
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
