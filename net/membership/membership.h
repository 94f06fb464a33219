// Membership by seed list with SWIM-family failure detection (Das, Gupta and Motivala, "SWIM:
// Scalable Weakly-consistent Infection-style Process Group Membership Protocol", DSN 2002), with
// the suspicion mechanism of its section 4.2 and the push-pull anti-entropy and reconnection of
// HashiCorp's memberlist/Serf.
//
// A peer starts a Service with a seed list (any subset of the cluster, possibly empty for the
// first peer, possibly naming itself or dead peers). It joins through the first seed that
// answers (unreachable seeds are skipped with a warning and the list is retried with backoff;
// each seed's last failure, refused or unreachable, is kept as an error value: seedFailures();
// a seed may be a host name, resolved by the transport at each attempt, so a name that does not
// resolve yet is one more unreachable seed; a seed that turns out to be this peer under another
// name is dropped from the list once its handshake says so),
// receives the full member list, and every member learns of it through dissemination. Then:
//   - every probe interval T it probes one member (round-robin over a list reshuffled each
//     round) with a Ping; without an Ack within probeTimeout it asks k other members to PingReq
//     the target; without any Ack by the end of the interval the target becomes SUSPECT, and the
//     suspect itself is told so that it can refute at once;
//   - a suspect that does not refute within the suspicion timeout is declared DEAD (event
//     `failed`); every member that learns of the suspicion runs its own timer. The timeout is
//     Lifeguard's (Dadgar, Phillips and Currey, "Lifeguard: Local Health Awareness for More
//     Accurate Failure Detection", 2018; as HashiCorp's memberlist does it): it starts at
//     suspicionMaxMultiple x the minimum, suspicionMultiplier x log10(N+1) x T (at least 2 T),
//     and shrinks toward the minimum as members other than the first accuser suspect the same
//     incarnation (each suspicion names its accuser, and a member gossips each new accuser on):
//       timeout = max(min, max - (max - min) log(C + 1) / log(K + 1)),
//     C the confirmations so far, K = min(indirectProbes, N - 2) those expected (K < 1: the
//     minimum at once). A dead member fails every prober's probes, so it is confirmed within a
//     few periods and declared dead near the minimum; a live member behind a lossy link is
//     usually suspected by one prober only, and has the long timeout to refute;
//   - a member that hears it is suspected or dead refutes by raising its incarnation number above
//     the rumour's and gossiping `alive` at the new incarnation;
//   - updates ride piggybacked on every Ping/PingReq/Ack (at most maxPiggybackUpdates each, least
//     sent first, each sent about retransmitMultiplier x log10(N+1) times), and every
//     gossipInterval a member pushes pending updates to gossipFanout random members;
//   - every pushPullInterval x max(1, N/8) (so that per-member traffic stays bounded as N grows)
//     a member exchanges its whole table with one random member; every other round it tries a
//     member it believes failed, or a seed that is not in its view, instead, so that a healed
//     partition, a restarted peer or two clusters started apart merge into one view. A dial-out-
//     only member does so every 3 T (scaled the same way): the others reach it only over the
//     links it opened, so it pulls the news itself.
// Precedence for one member id: the higher incarnation wins; at equal incarnation left beats
// dead beats suspect beats alive. An `alive` at a higher incarnation than a dead/left entry is
// the same identity coming back (event `rejoined`); a peer that restarts with its old identity
// learns its tombstone from the member list it joins with and refutes it that way.
//
// The protocol itself is a state machine without I/O (protocol.h's Protocol, also run by the
// simulator in virtual time); makeService runs it on a Mesh and its io_context.
//
// Threading: a Service lives on its Mesh's io_context (the peer's io thread): make, start, leave,
// stop and destroy it there. view(), joined(), traffic() and epoch() are thread-safe. Events are
// delivered on the io thread, in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>

#include "net/endpoint.h"
#include "net/mesh/mesh.h"

namespace gossamer::net::membership {

// SWIM parameters. Defaults suit a LAN or WAN; local() suits loopback and tests.
struct Options {
  std::chrono::milliseconds probeInterval{1000};  // T
  std::chrono::milliseconds probeTimeout{400};    // direct Ack wait before indirect probes
  std::size_t indirectProbes = 3;                 // k
  double suspicionMultiplier = 4.0;               // the minimum suspicion timeout, see above
  double suspicionMaxMultiple = 6.0;              // the timeout before any confirmation
  double retransmitMultiplier = 4.0;              // piggyback copies of each update
  std::size_t maxPiggybackUpdates = 8;            // per protocol message
  std::chrono::milliseconds gossipInterval{200};  // 0 disables the gossip rounds
  std::size_t gossipFanout = 3;
  std::chrono::milliseconds pushPullInterval{30000};  // at 8 members or fewer; scaled with N
  std::chrono::milliseconds connectTimeout{1000};     // opening a link to a member (not probes)
  std::chrono::milliseconds joinBackoffInitial{100};  // seed retry backoff, doubling ...
  std::chrono::milliseconds joinBackoffMax{5000};     // ... up to this
  // Dead and left members are remembered this long (so that stale rumours cannot revive them),
  // then forgotten.
  std::chrono::milliseconds tombstoneRetention{600000};

  // Loopback: T = 200 ms, probe timeout 80 ms, suspicion multiplier 3, gossip every 50 ms,
  // push-pull every 2.5 s (at 8 members), connect timeout 500 ms.
  static Options local();
  // "local" or "lan" (the defaults); throws gossamer::Error naming them otherwise.
  static Options named(const std::string& name);
  // These options stretched for a network whose round trips take up to `roundTrip`: the probe
  // timeout covers two round trips (a direct probe on an open link needs one), T at least 2.5
  // probe timeouts, and opening a link (connect + a four-message handshake) at least three.
  // Unchanged when they already allow for it.
  Options forRoundTrip(std::chrono::microseconds roundTrip) const;
  // The minimum suspicion timeout for a view of `members` members.
  std::chrono::milliseconds suspicionTimeout(std::size_t members) const;
  // The suspicion timeout for a view of `members` members after `confirmations` accusers beyond
  // the first (see above).
  std::chrono::milliseconds suspicionTimeout(std::size_t members, std::size_t confirmations) const;
};

enum class MemberState { alive, suspect, dead, left };
const char* name(MemberState state);

struct Member {
  std::uint64_t id = 0;
  Endpoint address;  // where it listens
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::alive;
  // Its Ed25519 identity key (net/wire/identity.h) as the member records carry it; empty where
  // it is not known (the simulator keeps none).
  std::vector<std::byte> identityKey;
  // It says others cannot dial it (--no-inbound, or a member's dial-back to its advertised
  // address failed): it reaches them on the links it opens. Only the member states this.
  bool dialOutOnly = false;
  friend bool operator==(const Member&, const Member&) = default;
};

// The members this peer considers in the cluster (alive or suspect, self included), sorted by
// id, and the epoch: the number of membership events this peer has delivered.
struct View {
  std::uint64_t epoch = 0;
  std::vector<Member> members;
  std::vector<std::uint64_t> ids() const;
  bool contains(std::uint64_t id) const;
  // The member with `id`, or null.
  const Member* find(std::uint64_t id) const;
};

enum class EventKind { joined, left, failed, rejoined };
const char* name(EventKind kind);

// One change of the view. Epochs of successive events are 1, 2, 3, ... on each peer; the first
// event of every peer is its own `joined` (when it is admitted, or at once for the first peer).
struct Event {
  EventKind kind = EventKind::joined;
  Member member;
  std::uint64_t epoch = 0;
};

struct Config {
  // May be empty (the first peer), may contain self (by any name), dead peers or host names.
  std::vector<Endpoint> seeds;
  Options options;
  std::uint64_t seed = 1;  // probe order, indirect-probe and gossip choices
  // Members known from the start, as if a seed's join reply had listed them: a cluster formed
  // before this service started (the simulator's initial peers). They are in the view from the
  // first event (this peer's `joined`, at once) on, without events of their own; the seeds then
  // serve the reconnect rounds only.
  std::vector<Member> members;
  // This peer cannot be dialed (--no-inbound): its member record says so from the start and
  // seeds do not dial it back. Otherwise the seed it joins through dials its advertised address
  // back once admitted, and a failure marks it dial-out only (Reachability).
  bool noInbound = false;
};

// Membership frames and bytes this peer sent and received (from its mesh's counters).
using Traffic = TrafficCounters;

// The last failed attempt to join through one seed. `error`: opening a link to it failed (the
// connect error, e.g. asio::error::timed_out for a closed port, or a refused handshake:
// Errc::authenticationFailed, versionMismatch, clusterMismatch, modelMismatch), or sending the
// join request did, or the seed refused to admit this peer (Errc::joinRefused), or no reply came
// within the connect timeout (asio::error::timed_out). `reason`: the handshake's reason or the
// seed's refusal, in words, when there is one (else empty).
struct SeedFailure {
  Endpoint seed;
  std::error_code error;
  std::string reason;
};

class Service {
 public:
  virtual ~Service() = default;

  // Starts probing and joins through the seeds (in the background: the join retries with backoff
  // until some seed answers; with no seeds the peer is the first member at once). The mesh must
  // be listening.
  virtual void start() = 0;

  // Announces a graceful leave to the members (they record `left`, not `failed`), waits up to
  // `timeout` for the announcements to go out, then stops.
  virtual asio::awaitable<void> leave(std::chrono::milliseconds timeout) = 0;

  // Stops at once without telling anyone (as a crash would, seen from outside). Idempotent. The
  // service never touches the mesh afterwards.
  virtual void stop() = 0;

  // Any thread.
  virtual View view() const = 0;
  virtual bool joined() const = 0;  // admitted by a member (or the first member)
  virtual Traffic traffic() const = 0;

  // Io thread: each seed this peer joins through (its own address left out), in the order of the
  // seed list, with the last failed attempt through it (an empty error: none failed yet). Nothing
  // changes once joined.
  virtual std::vector<SeedFailure> seedFailures() const = 0;
  // Io thread: Protocol::roundTrips, the measured round trip to each member.
  virtual std::map<std::uint64_t, std::chrono::microseconds> roundTrips() const = 0;

  // Called on the io thread, in order, for every event. Set before start().
  virtual void onEvent(std::function<void(const Event&)> handler) = 0;
};

// Registers itself as `mesh`'s membership handler. `mesh` (whose handshake names this peer) must
// outlive the service.
std::unique_ptr<Service> makeService(asio::io_context& io, Mesh& mesh, Config config);

}  // namespace gossamer::net::membership
