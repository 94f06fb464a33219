// The protocol state of one peer (Core) and the helpers its parts share; internal to
// net/membership:
//   protocol.cc        the lifecycle, timers, the member table, dissemination, gossip and push-pull
//   protocol_probe.cc  failure detection: probes, indirect probes, suspicion and its expiry
//   protocol_join.cc   joining through the seeds, and what a seed answers
//   protocol_reach.cc  reachability: dial-backs, and connection reversal
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/base/log.h"
#include "net/membership/protocol.h"

namespace gossamer::net::membership {

inline bool isLive(MemberState state) {
  return state == MemberState::alive || state == MemberState::suspect;
}

inline wire::MemberState toWire(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return wire::MemberState::alive;
    case MemberState::suspect:
      return wire::MemberState::suspect;
    case MemberState::dead:
      return wire::MemberState::dead;
    case MemberState::left:
      return wire::MemberState::left;
  }
  return wire::MemberState::dead;
}

inline wire::MemberUpdate toUpdate(const Member& m) {
  return wire::MemberUpdate{m.id, m.address,     m.incarnation, toWire(m.state),
                            0,    m.identityKey, m.dialOutOnly};
}

// A seed dials joiners back at most this often (Core::dialBack).
inline constexpr std::size_t kMaxDialBacksPerSecond = 8;
// A dial-out-only peer opens links at reversal requests at most this often (Core::on(Reverse)).
inline constexpr std::size_t kMaxReversalsPerSecond = 64;
// A reversal request goes to at most this many members when the requester has no link to the
// target (Core::requestReversal); those linked to the target forward it.
inline constexpr std::size_t kReversalForwarders = 4;

// At most `perSecond` events in any second.
class RateLimit {
 public:
  explicit RateLimit(std::size_t perSecond) : perSecond_(perSecond) {}
  // Whether one more event may happen at `now`; if so it counts.
  bool allow(std::chrono::steady_clock::time_point now) {
    while (!recent_.empty() && now - recent_.front() >= std::chrono::seconds(1))
      recent_.pop_front();
    if (recent_.size() >= perSecond_) return false;
    recent_.push_back(now);
    return true;
  }
  std::size_t recent() const { return recent_.size(); }

 private:
  std::size_t perSecond_;
  std::deque<std::chrono::steady_clock::time_point> recent_;
};

// After a failed hole punch with a member, the next waits this long, doubled at each failure up
// to kMaxPunchBackoff (a NAT that picks ports at random fails every time).
inline constexpr std::chrono::seconds kPunchBackoff{2};
inline constexpr std::chrono::seconds kMaxPunchBackoff{64};

// What reaching members across NATs keeps: the rate limits of dial-backs and of links opened on
// request (reversals and punches alike), the punches running, by (other member, channel), and the
// members punching to failed, with when to try again.
struct Reaching {
  struct Failed {
    unsigned times = 0;
    std::chrono::steady_clock::time_point retryAt;
  };
  RateLimit dialBacks{kMaxDialBacksPerSecond};  // Core::dialBack
  RateLimit links{kMaxReversalsPerSecond};      // links opened at a reversal or punch request
  std::set<std::pair<std::uint64_t, std::uint8_t>> punching;
  std::map<std::uint64_t, Failed> punchFailed;
  std::set<std::uint64_t> relaying;      // members a relayed link is being opened to
  std::set<std::uint64_t> relayRefused;  // members that refused to relay (--relay off)
};

// How a rumour entered: piggybacked or gossiped (taken as said), or inside a whole table of
// another peer (a join reply or push-pull), whose `dead` claims are only taken as suspicion, as
// memberlist does: after a partition each side's table calls the other side dead, and a live
// member must get the chance to refute that rather than be declared failed at once.
enum class Source { rumour, table };

// The protocol state of one peer. Lives in a shared_ptr held by its Protocol; the callbacks it
// leaves with the Environment hold weak references.
class Core final : public std::enable_shared_from_this<Core> {
 public:
  Core(Environment& env, Config config);

  void onEvent(std::function<void(const Event&)> handler) { handler_ = std::move(handler); }
  void start();
  void stop();
  void leave(std::chrono::milliseconds timeout, std::function<void()> done);
  void handle(const Remote& from, wire::MembershipMessage message);
  // Protocol::requestReversal (protocol_reach.cc).
  bool requestReversal(const Endpoint& to, Channel channel);

  View view() const {
    std::lock_guard lock(viewMutex_);
    return view_;
  }
  bool joined() const { return joined_.load(); }
  std::vector<SeedFailure> seedFailures() const;
  std::map<std::uint64_t, std::chrono::microseconds> roundTrips() const;

 private:
  using Clock = Environment::Clock;
  using TimerId = Environment::TimerId;
  using milliseconds = std::chrono::milliseconds;

  struct Record {
    Member member;
    Clock::time_point since;  // when the current state began here
    // The round trip of this peer's direct probes to it (a moving average; zero: none yet).
    std::chrono::microseconds roundTrip{0};
    // Suspect: the members that suspect this incarnation (the first and its confirmations).
    std::set<std::uint64_t> accusers;
  };

  // An outstanding probe: the Ack of `target` with our sequence number ends it.
  struct AckWaiter {
    std::uint64_t target = 0;
    Clock::time_point sent;  // a direct probe's ping (its Ack measures the round trip)
    bool acked = false;
    TimerId timer = 0;
    std::function<void(bool)> then;  // the current wait's continuation, if one is waiting
  };

  struct Broadcast {
    wire::MemberUpdate update;
    std::size_t transmits = 0;
  };

  // The probe rounds' order and the outstanding probes.
  struct Probing {
    std::vector<std::uint64_t> order;  // this round's, reshuffled every round
    std::size_t cursor = 0;
    std::uint64_t sequence = 0;
    std::map<std::uint64_t, AckWaiter> waiters;
  };

  // Joining through the seeds.
  struct Joining {
    TimerId timer = 0;
    std::function<void()> waitOver;
    std::optional<Endpoint> awaited;  // the seed whose reply to a join request is awaited
    std::map<Endpoint, int> failures;
    std::map<Endpoint, SeedFailure> seedFailures;  // at most one per seed
    std::map<Endpoint, std::uint64_t> seedIds;     // who answered at a seed (learnSeed)
  };

  // ---- timers (protocol.cc) ---------------------------------------------------------------------

  // Runs `action` at `when` unless the protocol stopped or was destroyed by then.
  TimerId after(Clock::time_point when, std::function<void()> action);
  void cancel(TimerId& timer);
  // A callback for the Environment that runs `action` only while this protocol runs.
  template <typename Arg, typename Action>
  std::function<void(Arg)> guarded(Action action) {
    const std::weak_ptr<Core> weak = weak_from_this();
    return [weak, action = std::move(action)](Arg arg) {
      const auto self = weak.lock();
      if (self && self->running_) action(std::move(arg));
    };
  }

  // ---- message handling (each with its part) ----------------------------------------------------

  void on(const Remote& from, wire::JoinRequest& request);  // protocol_join.cc
  void on(const Remote& from, wire::JoinReply& reply);      // protocol_join.cc
  void on(const Remote& from, wire::Ping& ping);            // protocol_probe.cc
  void on(const Remote& from, wire::PingReq& request);      // protocol_probe.cc
  void on(const Remote& from, wire::Ack& ack);              // protocol_probe.cc
  void on(const Remote& from, wire::Gossip& gossip);        // protocol.cc
  void on(const Remote& from, wire::Leave& leave);          // protocol.cc
  void on(const Remote& from, wire::PushPull& pushPull);    // protocol.cc
  void on(const Remote& from, wire::Reachability& answer);  // protocol_reach.cc
  void on(const Remote& from, wire::Reverse& request);      // protocol_reach.cc
  void on(const Remote& from, wire::Punch& punch);          // protocol_punch.cc
  // Hole punching: asks members this peer reaches to introduce it to `target` (both dial-out
  // only). Returns whether any was asked.
  bool requestPunch(const Member& target, Channel channel);  // protocol_punch.cc
  // A rendezvous passes a punch request on to both ends, with the hosts it sees them at.
  void introduce(const Remote& from, wire::Punch& punch);  // protocol_punch.cc
  // An end of an introduced pair connects to the other.
  void punchTo(const Remote& from, const wire::Punch& punch);  // protocol_punch.cc
  // Whether punching to `peer` failed lately (then it waits: kPunchBackoff).
  bool punchBackingOff(std::uint64_t peer) const;                              // protocol_punch.cc
  void punched(const Member& peer, Channel channel, const LinkOutcome& link);  // protocol_punch.cc
  // Relays: opens the link to `target` (both dial-out only; punching failed) through the live
  // members that can be dialed, nearest (by probe round trip) first, the next when one fails or
  // refuses. Returns whether it tries (protocol_relay.cc).
  bool requestRelay(const Member& target, Channel channel);
  void relayThrough(const Member& target, Channel channel,
                    std::shared_ptr<const std::vector<Member>> relays, std::size_t next);
  // The members that may relay to `target`, nearest first.
  std::vector<Member> relayCandidates(std::uint64_t target) const;
  // Dials a joiner's advertised address back and tells it the outcome (rate limited).
  void dialBack(const Remote& from, const Endpoint& address);  // protocol_reach.cc

  // ---- the member table (protocol.cc) -----------------------------------------------------------

  void merge(const std::vector<wire::MemberUpdate>& updates, Source source);
  void apply(wire::MemberUpdate update, Source source);
  // A rumour about this peer: refute suspicion or death by outbidding its incarnation.
  void aboutSelf(std::uint64_t incarnation, MemberState state);
  void becomeJoined();
  void deliver(EventKind kind, const Member& member);
  void refreshView();
  std::vector<wire::MemberUpdate> table() const;
  std::vector<const Member*> liveMembers() const;
  // Up to kReversalForwarders live members that can be dialed, other than `target`, at random:
  // those asked to pass a request on to it (protocol_reach.cc).
  std::vector<Endpoint> goBetweens(std::uint64_t target);
  // The live member listening at `address`, or null.
  const Member* liveMemberAt(const Endpoint& address) const;  // protocol_reach.cc
  // Self and the live members (the view's size; kept by refreshView).
  std::size_t clusterSize() const { return clusterSize_; }

  // ---- dissemination (protocol.cc) --------------------------------------------------------------

  void enqueue(const wire::MemberUpdate& update);
  // Up to maxPiggybackUpdates pending updates, least sent (then newest) first; each goes out
  // about retransmitMultiplier x log10(N+1) times in all.
  std::vector<wire::MemberUpdate> piggyback();
  // How many copies of each update go out (retransmitMultiplier x log10(N + 1), at least 1).
  std::size_t retransmitLimit() const;
  // The updates of a gossip that was never sent (no link): each gets its copy back.
  void refund(const std::vector<wire::MemberUpdate>& updates);
  void send(const Endpoint& to, wire::MembershipMessage message);
  void send(const Endpoint& to, wire::MembershipMessage message, milliseconds connectTimeout);

  // ---- probing (protocol_probe.cc) --------------------------------------------------------------

  void addToProbeOrder(std::uint64_t id);
  // The next live member to probe, round-robin over an order reshuffled every round.
  const Member* nextProbeTarget();
  // Waits for the Ack of probe `sequence` until `deadline`; `then(acked)` runs at the Ack or at
  // the deadline (at once when it came already).
  void awaitAck(std::uint64_t sequence, Clock::time_point deadline, std::function<void(bool)> then);
  // One probe period: probe the next target, then the next period at start + T.
  void probeTick();
  void probe(const Member& target, Clock::time_point start, std::function<void()> done);
  // Probes `targetId` for a member that asked us to (PingReq) and relays the Ack.
  void relayProbe(Endpoint requester, std::uint64_t requestSequence, std::uint64_t targetId,
                  Endpoint targetAddress);
  void suspect(std::uint64_t id);
  // Declares suspects whose timeout ran out dead, and forgets old tombstones.
  void expire();
  void tick();

  // ---- the periodic gossip and push-pull rounds (protocol.cc) -----------------------------------

  void scheduleGossip();
  void gossip();
  // A dial-out-only peer exchanges its table every this many probe periods (schedulePushPull).
  static constexpr int kDialOutOnlyPushPullPeriods = 3;
  void schedulePushPull(std::uint64_t tick);
  void pushPull(std::uint64_t round);
  // A random live member; or, for a reconnect round, a random member believed failed or a seed
  // not in the view (falling back to a live member when there is none).
  std::optional<Endpoint> pushPullTarget(bool reconnect);

  // ---- seeds and joining (protocol_join.cc) -----------------------------------------------------

  bool isSeed(const Endpoint& to) const;
  // Records who the handshake on an open link to `seed` authenticated. A seed that turns out to be
  // this peer under another name (a host name or another of its addresses; its own advertised
  // address was dropped at start) is dropped from the seed list: returns true then. This peer is
  // the one with its id that advertises its address; another process with its id elsewhere is a
  // twin, which the seed's join reply refuses as before.
  bool learnSeed(const Endpoint& seed, const LinkOutcome& link);
  // A failed join attempt through `seed`, remembered until the next one replaces it.
  void noteFailure(const Endpoint& seed, std::error_code error, std::string reason);
  // One pass over the seeds, then `backoff` and the next (doubled, up to the maximum), until
  // joined.
  void joinRound(milliseconds backoff);
  void joinThrough(std::shared_ptr<const std::vector<Endpoint>> seeds, std::size_t index,
                   milliseconds backoff);
  void joinFailed(const Endpoint& seed, std::error_code error, const std::string& reason,
                  const std::function<void()>& next);
  // Waits up to the connect timeout for the seed's reply; then the next seed, unless joined.
  void awaitJoinReply(const Endpoint& seed, std::function<void()> next);
  // A join reply (or refusal) arrived: the wait for it is over.
  void endJoinWait();

  Environment& env_;
  Config config_;
  const Options options_;
  std::mt19937_64 rng_;
  std::function<void(const Event&)> handler_;

  bool started_ = false;
  bool running_ = false;
  bool leaving_ = false;
  std::atomic<bool> joined_{false};
  Member self_;
  std::map<std::uint64_t, Record> members_;  // every other member we know of, tombstones too
  std::size_t clusterSize_ = 1;
  std::uint64_t epoch_ = 0;
  std::vector<Broadcast> broadcasts_;
  Probing probing_;
  std::set<TimerId> timers_;  // pending, cancelled by stop()
  Joining join_;
  Reaching reach_;
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex viewMutex_;
  View view_;
};

}  // namespace gossamer::net::membership
