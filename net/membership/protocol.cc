// The SWIM protocol (membership.h states it; protocol.h says how it is driven). Every wait is a
// timer of the Environment and every continuation a callback holding a weak reference, so a
// stopped or destroyed protocol ignores whatever still arrives.
#include "net/membership/protocol.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <variant>

#include <asio/error.hpp>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "net/errors.h"

namespace gossamer::net::membership {
namespace {

using Clock = Environment::Clock;
using TimerId = Environment::TimerId;
using std::chrono::milliseconds;

int rank(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return 0;
    case MemberState::suspect:
      return 1;
    case MemberState::dead:
      return 2;
    case MemberState::left:
      return 3;
  }
  return 0;
}

bool isLive(MemberState state) {
  return state == MemberState::alive || state == MemberState::suspect;
}

MemberState fromWire(wire::MemberState state) {
  switch (state) {
    case wire::MemberState::alive:
      return MemberState::alive;
    case wire::MemberState::suspect:
      return MemberState::suspect;
    case wire::MemberState::dead:
      return MemberState::dead;
    case wire::MemberState::left:
      return MemberState::left;
  }
  return MemberState::dead;
}

wire::MemberState toWire(MemberState state) {
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

wire::MemberUpdate toUpdate(const Member& m) {
  return wire::MemberUpdate{m.id, m.address, m.incarnation, toWire(m.state)};
}

// Whether a rumour (incarnation, state) about a member supersedes what this peer holds.
bool supersedes(std::uint64_t incarnation, MemberState state, const Member& current) {
  if (incarnation != current.incarnation) return incarnation > current.incarnation;
  return rank(state) > rank(current.state);
}

// How a rumour entered: piggybacked or gossiped (taken as said), or inside a whole table of
// another peer (a join reply or push-pull), whose `dead` claims are only taken as suspicion, as
// memberlist does: after a partition each side's table calls the other side dead, and a live
// member must get the chance to refute that rather than be declared failed at once.
enum class Source { rumour, table };

}  // namespace

// The protocol state of one peer. Lives in a shared_ptr held by its Protocol; the callbacks it
// leaves with the Environment hold weak references.
class Core final : public std::enable_shared_from_this<Core> {
 public:
  Core(Environment& env, Config config)
      : env_(env),
        config_(std::move(config)),
        options_(config_.options),
        rng_(config_.seed),
        logger_(log::get("membership")) {
    GOSSAMER_ENFORCE(options_.probeInterval.count() > 0 && options_.probeTimeout.count() > 0,
                     "membership probe interval and timeout must be positive");
    GOSSAMER_ENFORCE(options_.probeTimeout <= options_.probeInterval,
                     "membership probe timeout ({} ms) must not exceed the probe interval ({} ms)",
                     options_.probeTimeout.count(), options_.probeInterval.count());
  }

  void onEvent(std::function<void(const Event&)> handler) { handler_ = std::move(handler); }

  void start() {
    GOSSAMER_ENFORCE(!started_, "membership service started twice");
    started_ = true;
    running_ = true;
    self_ = Member{env_.selfId(), env_.selfAddress(), env_.firstIncarnation(), MemberState::alive};
    std::erase(config_.seeds, self_.address);
    const Clock::time_point now = env_.now();
    const bool formed = !config_.members.empty();
    for (const Member& m : config_.members) {
      if (m.id == self_.id || !isLive(m.state)) continue;
      members_.emplace(m.id, Record{m, now, {}});
      probeOrder_.push_back(m.id);
    }
    std::shuffle(probeOrder_.begin(), probeOrder_.end(), rng_);
    config_.members = {};  // in the table now
    refreshView();
    if (config_.seeds.empty() || formed)
      becomeJoined();  // the first member, or one of a formed cluster (its seeds for reconnects)
    else
      joinRound(options_.joinBackoffInitial);
    probeTick();
    tick();
    if (options_.gossipInterval.count() > 0) scheduleGossip();
    schedulePushPull(0);
  }

  void stop() {
    if (!running_) return;
    running_ = false;
    for (TimerId t : timers_) env_.cancel(t);
    timers_.clear();
    waiters_.clear();
  }

  void leave(milliseconds timeout, std::function<void()> done) {
    if (!running_) {
      if (done) done();
      return;
    }
    leaving_ = true;
    self_.state = MemberState::left;
    const wire::Leave message{self_.id, self_.incarnation};
    // Everyone we know hears it directly; the first of them to hear also gossips it on. Ends at
    // the last send's outcome or at the timeout, whichever comes first.
    struct Leaving {
      std::size_t pending = 0;
      std::function<void()> done;
      TimerId timer = 0;
    };
    auto state = std::make_shared<Leaving>();
    state->done = std::move(done);
    const std::weak_ptr<Core> weak = weak_from_this();
    auto finish = [weak, state] {
      if (!state->done) return;
      if (const auto self = weak.lock()) {
        self->env_.cancel(state->timer);
        self->logger_->debug("left the cluster (incarnation {})", self->self_.incarnation);
        self->stop();
      }
      std::exchange(state->done, nullptr)();
    };
    for (const auto& [id, record] : members_) {
      if (!isLive(record.member.state)) continue;
      ++state->pending;
      env_.send(record.member.address, message, timeout, [state, finish](std::error_code) {
        if (--state->pending == 0) finish();
      });
    }
    if (state->pending == 0) {
      // Nobody to tell: stop now, but report it later, as the contract of a callback says.
      state->timer = env_.at(env_.now(), finish);
      return;
    }
    state->timer = env_.at(env_.now() + timeout, finish);
  }

  void handle(const Remote& from, wire::MembershipMessage message) {
    if (!running_) return;
    std::visit([&](auto& m) { on(from, m); }, message);
  }

  View view() const {
    std::lock_guard lock(viewMutex_);
    return view_;
  }
  bool joined() const { return joined_.load(); }

  std::vector<SeedFailure> seedFailures() const {
    std::vector<SeedFailure> out;
    for (const Endpoint& seed : config_.seeds) {
      const auto it = seedFailures_.find(seed);
      out.push_back(it != seedFailures_.end() ? it->second : SeedFailure{seed, {}, {}});
    }
    return out;
  }

 private:
  // ---- timers --------------------------------------------------------------------------------

  // Runs `action` at `when` unless the protocol stopped or was destroyed by then.
  TimerId after(Clock::time_point when, std::function<void()> action) {
    auto id = std::make_shared<TimerId>(0);
    const std::weak_ptr<Core> weak = weak_from_this();
    *id = env_.at(when, [weak, id, action = std::move(action)] {
      const auto self = weak.lock();
      if (!self || !self->running_) return;
      self->timers_.erase(*id);
      action();
    });
    timers_.insert(*id);
    return *id;
  }
  void cancel(TimerId& timer) {
    if (timer == 0) return;
    env_.cancel(timer);
    timers_.erase(timer);
    timer = 0;
  }
  // A callback for the Environment that runs `action` only while this protocol runs.
  template <typename Arg, typename Action>
  std::function<void(Arg)> guarded(Action action) {
    const std::weak_ptr<Core> weak = weak_from_this();
    return [weak, action = std::move(action)](Arg arg) {
      const auto self = weak.lock();
      if (self && self->running_) action(std::move(arg));
    };
  }

  // ---- message handling ----------------------------------------------------------------------

  void on(const Remote& from, wire::JoinRequest& request) {
    if (request.peerId == self_.id) {
      send(from.listen,
           wire::JoinReply{false, fmt::format("peer id {:016x} is the seed's own", self_.id), {}});
      return;
    }
    becomeJoined();  // an unjoined peer that admits another forms a cluster with it
    // A live member asks to join again only from a new life (a restarted process: its incarnation
    // starts from the clock, above its earlier life's; a retry of the same life repeats the
    // same one). The earlier life is over: record it failed before the new one rejoins, so that
    // everyone drops its links and its round state even before the failure detector would.
    if (const auto it = members_.find(request.peerId);
        it != members_.end() && isLive(it->second.member.state) &&
        request.incarnation > it->second.member.incarnation) {
      const Member& earlier = it->second.member;
      apply(wire::MemberUpdate{earlier.id, earlier.address, earlier.incarnation,
                               wire::MemberState::dead},
            Source::rumour);
    }
    apply(wire::MemberUpdate{request.peerId, request.address, request.incarnation,
                             wire::MemberState::alive},
          Source::rumour);
    send(from.listen, wire::JoinReply{true, "", table()});
  }

  void on(const Remote& from, wire::JoinReply& reply) {
    if (!reply.accepted) {
      logger_->warn("seed {} refused to admit this peer: {}", from.listen.str(), reply.reason);
      if (joining_ && !joined_) {
        noteFailure(*joining_, Errc::joinRefused, reply.reason);
        joining_.reset();  // answered
      }
      endJoinWait();
      return;
    }
    const bool first = !joined_;
    becomeJoined();
    merge(reply.members, Source::table);
    if (first)
      logger_->info("joined through {} ({} members)", from.listen.str(), view().members.size());
    endJoinWait();
  }

  void on(const Remote& from, wire::Ping& ping) {
    merge(ping.updates, Source::rumour);
    send(from.listen, wire::Ack{self_.id, ping.sequence, piggyback()}, options_.probeTimeout);
  }

  void on(const Remote& from, wire::PingReq& request) {
    merge(request.updates, Source::rumour);
    relayProbe(from.listen, request.sequence, request.target, request.targetAddress);
  }

  void on(const Remote&, wire::Ack& ack) {
    merge(ack.updates, Source::rumour);
    const auto it = waiters_.find(ack.sequence);
    if (it == waiters_.end() || it->second.target != ack.sender || it->second.acked) return;
    it->second.acked = true;
    if (it->second.then) {
      // The wait ends now rather than at its deadline.
      cancel(it->second.timer);
      std::exchange(it->second.then, nullptr)(true);
    }
  }

  void on(const Remote&, wire::Gossip& gossip) { merge(gossip.updates, Source::rumour); }

  void on(const Remote& from, wire::Leave& leave) {
    const auto it = members_.find(leave.peerId);
    const Endpoint address = it != members_.end() ? it->second.member.address : from.listen;
    apply(wire::MemberUpdate{leave.peerId, address, leave.incarnation, wire::MemberState::left},
          Source::rumour);
  }

  void on(const Remote& from, wire::PushPull& pushPull) {
    merge(pushPull.members, Source::table);
    if (!pushPull.reply) send(from.listen, wire::PushPull{self_.id, true, table()});
  }

  // ---- the member table --------------------------------------------------------------------

  struct Record {
    Member member;
    Clock::time_point since;  // when the current state began here
    // Suspect: the members that suspect this incarnation (the first and its confirmations).
    std::set<std::uint64_t> accusers;
  };

  void merge(const std::vector<wire::MemberUpdate>& updates, Source source) {
    for (const wire::MemberUpdate& update : updates) apply(update, source);
  }

  void apply(wire::MemberUpdate update, Source source) {
    MemberState state = fromWire(update.state);
    if (update.peerId == self_.id) {
      aboutSelf(update.incarnation, state);
      return;
    }
    const Clock::time_point now = env_.now();
    auto it = members_.find(update.peerId);
    if (it == members_.end()) {
      // A stranger: remember it; a dead or left one only as a tombstone, without an event.
      Record record{Member{update.peerId, update.address, update.incarnation, state}, now, {}};
      members_.emplace(update.peerId, record);
      enqueue(update);
      if (isLive(state)) {
        addToProbeOrder(update.peerId);
        deliver(EventKind::joined, record.member);
      }
      return;
    }
    Member& member = it->second.member;
    if (source == Source::table && state == MemberState::dead && isLive(member.state))
      state = MemberState::suspect;
    if (state == MemberState::suspect && member.state == MemberState::suspect &&
        update.incarnation == member.incarnation) {
      // Another accuser of the same suspicion: a confirmation (shortens the timeout), passed on.
      if (it->second.accusers.insert(update.accuser).second) enqueue(update);
      return;
    }
    if (!supersedes(update.incarnation, state, member)) return;
    MemberState old = member.state;
    if (isLive(old) && isLive(state) && !update.address.host.empty() &&
        update.address != member.address) {
      // The member came back at another address (restarted): its earlier life failed.
      member.state = old = MemberState::dead;
      deliver(EventKind::failed, member);
      env_.disconnect(member.address);
    }
    member.incarnation = update.incarnation;
    member.state = state;
    if (!update.address.host.empty()) member.address = update.address;
    if (old != state) it->second.since = now;
    it->second.accusers.clear();
    wire::MemberUpdate passed = toUpdate(member);
    if (state == MemberState::suspect) {
      it->second.accusers.insert(update.accuser);
      passed.accuser = update.accuser;
    }
    enqueue(passed);
    if (!isLive(old) && isLive(state)) {
      addToProbeOrder(member.id);
      deliver(EventKind::rejoined, member);
    } else if (isLive(old) && state == MemberState::dead) {
      deliver(EventKind::failed, member);
      env_.disconnect(member.address);
    } else if (isLive(old) && state == MemberState::left) {
      deliver(EventKind::left, member);
      env_.disconnect(member.address);
    } else {
      refreshView();  // alive <-> suspect, or a new incarnation
    }
  }

  // A rumour about this peer: refute suspicion or death by outbidding its incarnation.
  void aboutSelf(std::uint64_t incarnation, MemberState state) {
    if (leaving_) return;
    if (state == MemberState::alive) {
      // Our own alive from an earlier life of this identity: continue above it.
      self_.incarnation = std::max(self_.incarnation, incarnation);
      return;
    }
    if (incarnation < self_.incarnation) return;
    self_.incarnation = incarnation + 1;
    logger_->debug("refuting '{}' about this peer: now incarnation {}", name(state),
                   self_.incarnation);
    enqueue(toUpdate(self_));
    refreshView();
  }

  void becomeJoined() {
    if (joined_) return;
    joined_ = true;
    deliver(EventKind::joined, self_);
  }

  void deliver(EventKind kind, const Member& member) {
    ++epoch_;
    refreshView();
    logger_->debug("epoch {}: {:016x} at {} {}", epoch_, member.id, member.address.str(),
                   name(kind));
    if (handler_) handler_(Event{kind, member, epoch_});
  }

  void refreshView() {
    View view;
    view.epoch = epoch_;
    view.members.reserve(members_.size() + 1);
    view.members.push_back(self_);
    for (const auto& [id, record] : members_) {
      if (isLive(record.member.state)) view.members.push_back(record.member);
    }
    std::sort(view.members.begin(), view.members.end(),
              [](const Member& a, const Member& b) { return a.id < b.id; });
    clusterSize_ = view.members.size();
    std::lock_guard lock(viewMutex_);
    view_ = std::move(view);
  }

  std::vector<wire::MemberUpdate> table() const {
    std::vector<wire::MemberUpdate> out;
    out.reserve(members_.size() + 1);
    out.push_back(toUpdate(self_));
    for (const auto& [id, record] : members_) out.push_back(toUpdate(record.member));
    return out;
  }

  std::vector<const Member*> liveMembers() const {
    std::vector<const Member*> out;
    for (const auto& [id, record] : members_) {
      if (isLive(record.member.state)) out.push_back(&record.member);
    }
    return out;
  }

  // Self and the live members (the view's size; kept by refreshView).
  std::size_t clusterSize() const { return clusterSize_; }

  // ---- dissemination -----------------------------------------------------------------------

  void enqueue(const wire::MemberUpdate& update) {
    std::erase_if(broadcasts_,
                  [&](const Broadcast& b) { return b.update.peerId == update.peerId; });
    broadcasts_.push_back(Broadcast{update, 0});
  }

  // Up to maxPiggybackUpdates pending updates, least sent (then newest) first; each goes out
  // about retransmitMultiplier x log10(N+1) times in all.
  std::vector<wire::MemberUpdate> piggyback() {
    const auto limit = static_cast<std::size_t>(
        std::max(1.0, std::ceil(options_.retransmitMultiplier *
                                std::log10(static_cast<double>(clusterSize()) + 1.0))));
    std::stable_sort(
        broadcasts_.begin(), broadcasts_.end(),
        [](const Broadcast& a, const Broadcast& b) { return a.transmits < b.transmits; });
    std::vector<wire::MemberUpdate> out;
    for (Broadcast& b : broadcasts_) {
      if (out.size() >= options_.maxPiggybackUpdates) break;
      out.push_back(b.update);
      ++b.transmits;
    }
    std::erase_if(broadcasts_, [&](const Broadcast& b) { return b.transmits >= limit; });
    return out;
  }

  void send(const Endpoint& to, wire::MembershipMessage message) {
    send(to, std::move(message), options_.connectTimeout);
  }
  void send(const Endpoint& to, wire::MembershipMessage message, milliseconds connectTimeout) {
    if (!running_) return;
    env_.send(to, std::move(message), connectTimeout, nullptr);
  }

  // ---- probing -----------------------------------------------------------------------------

  // An outstanding probe: the Ack of `target` with our sequence number ends it.
  struct AckWaiter {
    std::uint64_t target = 0;
    bool acked = false;
    TimerId timer = 0;
    std::function<void(bool)> then;  // the current wait's continuation, if one is waiting
  };

  void addToProbeOrder(std::uint64_t id) {
    // At a random place after the cursor, so that a newcomer is probed within this round.
    std::uniform_int_distribution<std::size_t> at(probeCursor_, probeOrder_.size());
    probeOrder_.insert(probeOrder_.begin() + static_cast<std::ptrdiff_t>(at(rng_)), id);
  }

  // The next live member to probe, round-robin over an order reshuffled every round.
  const Member* nextProbeTarget() {
    for (int pass = 0; pass < 2; ++pass) {
      while (probeCursor_ < probeOrder_.size()) {
        const auto it = members_.find(probeOrder_[probeCursor_++]);
        if (it != members_.end() && isLive(it->second.member.state)) return &it->second.member;
      }
      probeOrder_.clear();
      for (const Member* m : liveMembers()) probeOrder_.push_back(m->id);
      std::shuffle(probeOrder_.begin(), probeOrder_.end(), rng_);
      probeCursor_ = 0;
    }
    return nullptr;
  }

  // Waits for the Ack of probe `sequence` until `deadline`; `then(acked)` runs at the Ack or at
  // the deadline (at once when it came already).
  void awaitAck(std::uint64_t sequence, Clock::time_point deadline,
                std::function<void(bool)> then) {
    AckWaiter& waiter = waiters_.at(sequence);
    if (waiter.acked) {
      waiter.timer = after(env_.now(), [then = std::move(then)] { then(true); });
      return;
    }
    waiter.then = std::move(then);
    waiter.timer = after(deadline, [this, sequence] {
      const auto it = waiters_.find(sequence);
      if (it != waiters_.end() && it->second.then) std::exchange(it->second.then, nullptr)(false);
    });
  }

  // One probe period: probe the next target, then the next period at start + T.
  void probeTick() {
    const Clock::time_point start = env_.now();
    const Member* target = nextProbeTarget();
    if (target == nullptr) {
      after(start + options_.probeInterval, [this] { probeTick(); });
      return;
    }
    probe(*target, start,
          [this, start] { after(start + options_.probeInterval, [this] { probeTick(); }); });
  }

  void probe(const Member& target, Clock::time_point start, std::function<void()> done) {
    const std::uint64_t sequence = ++sequence_;
    const std::uint64_t targetId = target.id;
    const Endpoint targetAddress = target.address;
    waiters_[sequence] = AckWaiter{targetId};
    send(targetAddress, wire::Ping{self_.id, sequence, piggyback()}, options_.probeTimeout);
    awaitAck(sequence, start + options_.probeTimeout, [=, this](bool acked) {
      auto conclude = [this, sequence, targetId, done](bool acked) {
        waiters_.erase(sequence);
        if (!acked) suspect(targetId);
        done();
      };
      if (acked) return conclude(true);
      std::vector<const Member*> helpers;
      for (const Member* m : liveMembers()) {
        if (m->id != targetId) helpers.push_back(m);
      }
      std::shuffle(helpers.begin(), helpers.end(), rng_);
      helpers.resize(std::min(helpers.size(), options_.indirectProbes));
      for (const Member* helper : helpers) {
        send(helper->address,
             wire::PingReq{self_.id, sequence, targetId, targetAddress, piggyback()},
             options_.probeTimeout);
      }
      awaitAck(sequence, start + options_.probeInterval, conclude);
    });
  }

  // Probes `targetId` for a member that asked us to (PingReq) and relays the Ack.
  void relayProbe(Endpoint requester, std::uint64_t requestSequence, std::uint64_t targetId,
                  Endpoint targetAddress) {
    const std::uint64_t sequence = ++sequence_;
    waiters_[sequence] = AckWaiter{targetId};
    send(targetAddress, wire::Ping{self_.id, sequence, piggyback()}, options_.probeTimeout);
    awaitAck(sequence, env_.now() + options_.probeTimeout, [=, this](bool acked) {
      waiters_.erase(sequence);
      if (acked)
        send(requester, wire::Ack{targetId, requestSequence, piggyback()}, options_.probeTimeout);
    });
  }

  void suspect(std::uint64_t id) {
    const auto it = members_.find(id);
    // A member already suspect is suspected again by this one: a confirmation (see Lifeguard).
    if (it == members_.end() || !isLive(it->second.member.state)) return;
    Member rumour = it->second.member;
    rumour.state = MemberState::suspect;
    wire::MemberUpdate update = toUpdate(rumour);
    update.accuser = self_.id;
    apply(update, Source::rumour);
    // Tell the suspect itself, so that a live one refutes at once.
    send(rumour.address, wire::Gossip{self_.id, {update}}, options_.probeTimeout);
  }

  // Declares suspects whose timeout ran out dead, and forgets old tombstones.
  void expire() {
    const Clock::time_point now = env_.now();
    std::vector<Member> expired;
    for (const auto& [id, record] : members_) {
      if (record.member.state != MemberState::suspect) continue;
      const std::size_t confirmations = record.accusers.empty() ? 0 : record.accusers.size() - 1;
      if (now - record.since >= options_.suspicionTimeout(clusterSize(), confirmations))
        expired.push_back(record.member);
    }
    for (Member m : expired) {
      m.state = MemberState::dead;
      apply(toUpdate(m), Source::rumour);
    }
    std::erase_if(members_, [&](const auto& entry) {
      return !isLive(entry.second.member.state) &&
             now - entry.second.since > options_.tombstoneRetention;
    });
  }

  // ---- the periodic rounds -------------------------------------------------------------------

  void tick() {
    expire();
    const milliseconds period = std::max(milliseconds(5), options_.probeInterval / 10);
    after(env_.now() + period, [this] { tick(); });
  }

  void scheduleGossip() {
    after(env_.now() + options_.gossipInterval, [this] {
      gossip();
      scheduleGossip();
    });
  }

  void gossip() {
    if (broadcasts_.empty()) return;
    std::vector<const Member*> targets = liveMembers();
    std::shuffle(targets.begin(), targets.end(), rng_);
    targets.resize(std::min(targets.size(), options_.gossipFanout));
    for (const Member* target : targets) {
      std::vector<wire::MemberUpdate> updates = piggyback();
      if (updates.empty()) break;
      send(target->address, wire::Gossip{self_.id, std::move(updates)});
    }
  }

  void schedulePushPull(std::uint64_t round) {
    const double scale = std::max(1.0, static_cast<double>(clusterSize()) / 8.0);
    after(env_.now() + std::chrono::duration_cast<milliseconds>(options_.pushPullInterval * scale),
          [this, round] {
            pushPull(round);
            schedulePushPull(round + 1);
          });
  }

  void pushPull(std::uint64_t round) {
    if (!joined_) return;
    const std::optional<Endpoint> target = pushPullTarget(round % 2 == 1);
    if (!target) return;
    if (isSeed(*target) && seedIds_.count(*target) == 0) {
      // A seed never reached (a host name, say): who answers there first; it may be this peer.
      const Endpoint seed = *target;
      env_.open(seed, options_.connectTimeout, guarded<LinkOutcome>([this, seed](LinkOutcome link) {
                  if (!link.ok() || learnSeed(seed, link)) return;
                  send(seed, wire::PushPull{self_.id, false, table()});
                }));
      return;
    }
    send(*target, wire::PushPull{self_.id, false, table()});
  }

  // A random live member; or, for a reconnect round, a random member believed failed or a seed
  // not in the view (falling back to a live member when there is none).
  std::optional<Endpoint> pushPullTarget(bool reconnect) {
    std::vector<Endpoint> candidates;
    if (reconnect) {
      for (const auto& [id, record] : members_) {
        if (record.member.state == MemberState::dead) candidates.push_back(record.member.address);
      }
      for (const Endpoint& seed : config_.seeds) {
        const auto id = seedIds_.find(seed);
        const bool known = std::any_of(members_.begin(), members_.end(), [&](const auto& entry) {
          const Member& m = entry.second.member;
          return isLive(m.state) &&
                 (m.address == seed || (id != seedIds_.end() && m.id == id->second));
        });
        if (!known) candidates.push_back(seed);
      }
    }
    if (candidates.empty()) {
      for (const Member* m : liveMembers()) candidates.push_back(m->address);
    }
    if (candidates.empty()) return std::nullopt;
    std::uniform_int_distribution<std::size_t> pick(0, candidates.size() - 1);
    return candidates[pick(rng_)];
  }

  bool isSeed(const Endpoint& to) const {
    return std::find(config_.seeds.begin(), config_.seeds.end(), to) != config_.seeds.end();
  }

  // Records who the handshake on an open link to `seed` authenticated. A seed that turns out to be
  // this peer under another name (a host name or another of its addresses; its own advertised
  // address was dropped at start) is dropped from the seed list: returns true then. This peer is
  // the one with its id that advertises its address; another process with its id elsewhere is a
  // twin, which the seed's join reply refuses as before.
  bool learnSeed(const Endpoint& seed, const LinkOutcome& link) {
    if (link.remote.peerId != self_.id || link.remote.listen != self_.address) {
      seedIds_[seed] = link.remote.peerId;
      return false;
    }
    logger_->debug("seed {} is this peer itself; dropping it from the seed list", seed.str());
    std::erase(config_.seeds, seed);
    seedFailures_.erase(seed);
    env_.disconnect(seed);
    return true;
  }

  // A failed join attempt through `seed`, remembered until the next one replaces it.
  void noteFailure(const Endpoint& seed, std::error_code error, std::string reason) {
    seedFailures_[seed] = SeedFailure{seed, error, std::move(reason)};
  }

  // ---- joining -------------------------------------------------------------------------------

  // One pass over the seeds, then `backoff` and the next (doubled, up to the maximum), until
  // joined.
  void joinRound(milliseconds backoff) {
    if (joined_) return;
    // A copy, shared by the pass: learnSeed may drop one from the list meanwhile.
    joinThrough(std::make_shared<const std::vector<Endpoint>>(config_.seeds), 0, backoff);
  }

  void joinThrough(std::shared_ptr<const std::vector<Endpoint>> seeds, std::size_t index,
                   milliseconds backoff) {
    if (joined_) return;
    if (index == seeds->size()) {
      logger_->debug("no seed admitted this peer yet; retrying in {} ms", backoff.count());
      joinTimer_ = after(env_.now() + backoff, [this, backoff] {
        joinTimer_ = 0;
        joinRound(std::min(backoff * 2, options_.joinBackoffMax));
      });
      return;
    }
    const Endpoint seed = (*seeds)[index];
    auto next = [this, seeds, index, backoff] { joinThrough(seeds, index + 1, backoff); };
    // The link first, for the reason of a refused handshake; then the request on it.
    env_.open(seed, options_.connectTimeout,
              guarded<LinkOutcome>([this, seed, next](LinkOutcome link) {
                if (joined_) return;
                if (link.ok() && learnSeed(seed, link)) {
                  if (config_.seeds.empty()) {  // its only seed: the first member, as at start
                    becomeJoined();
                    return;
                  }
                  return next();
                }
                if (!link.ok()) return joinFailed(seed, link.error, link.reason, next);
                wire::MembershipMessage request =
                    wire::JoinRequest{self_.id, self_.address, self_.incarnation};
                env_.send(seed, std::move(request), options_.connectTimeout,
                          guarded<std::error_code>([this, seed, next](std::error_code error) {
                            if (joined_) return;
                            if (error) return joinFailed(seed, error, "", next);
                            awaitJoinReply(seed, next);
                          }));
              }));
  }

  void joinFailed(const Endpoint& seed, std::error_code error, const std::string& reason,
                  const std::function<void()>& next) {
    noteFailure(seed, error, reason);
    // The first failure of each seed is a warning; the retries are not worth one each.
    if (joinFailures_[seed]++ == 0) {
      if (isRefusal(error))
        logger_->warn("seed {} refused this peer ({}); will retry", seed.str(),
                      reason.empty() ? error.message() : reason);
      else
        logger_->warn("seed {} is unreachable ({}); skipping it, will retry", seed.str(),
                      error.message());
    }
    next();
  }

  // Waits up to the connect timeout for the seed's reply; then the next seed, unless joined.
  void awaitJoinReply(const Endpoint& seed, std::function<void()> next) {
    joining_ = seed;
    joinWaitOver_ = [this, seed, next] {
      if (joined_) return;
      if (joining_) {  // no reply, neither admitted nor refused
        noteFailure(seed, asio::error::timed_out,
                    fmt::format("no reply to the join request within {} ms",
                                options_.connectTimeout.count()));
        joining_.reset();
      }
      next();
    };
    joinTimer_ = after(env_.now() + options_.connectTimeout, [this] {
      joinTimer_ = 0;
      if (joinWaitOver_) std::exchange(joinWaitOver_, nullptr)();
    });
  }

  // A join reply (or refusal) arrived: the wait for it is over.
  void endJoinWait() {
    if (!joinWaitOver_) return;
    cancel(joinTimer_);
    // Later, as the coroutine this replaces resumed after the handler returned.
    auto over = std::exchange(joinWaitOver_, nullptr);
    joinTimer_ = after(env_.now(), [this, over] {
      joinTimer_ = 0;
      over();
    });
  }

  struct Broadcast {
    wire::MemberUpdate update;
    std::size_t transmits = 0;
  };

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
  std::vector<std::uint64_t> probeOrder_;
  std::size_t probeCursor_ = 0;
  std::uint64_t sequence_ = 0;
  std::map<std::uint64_t, AckWaiter> waiters_;
  std::set<TimerId> timers_;  // pending, cancelled by stop()
  TimerId joinTimer_ = 0;
  std::function<void()> joinWaitOver_;
  std::optional<Endpoint> joining_;  // the seed whose reply to a join request is awaited
  std::map<Endpoint, int> joinFailures_;
  std::map<Endpoint, SeedFailure> seedFailures_;  // at most one per seed
  std::map<Endpoint, std::uint64_t> seedIds_;     // who answered at a seed (learnSeed)
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex viewMutex_;
  View view_;
};

Protocol::Protocol(Environment& environment, Config config)
    : core_(std::make_shared<Core>(environment, std::move(config))) {}
Protocol::~Protocol() { core_->stop(); }

void Protocol::onEvent(std::function<void(const Event&)> handler) {
  core_->onEvent(std::move(handler));
}
void Protocol::start() { core_->start(); }
void Protocol::handle(const Remote& from, wire::MembershipMessage message) {
  core_->handle(from, std::move(message));
}
void Protocol::leave(milliseconds timeout, std::function<void()> done) {
  core_->leave(timeout, std::move(done));
}
void Protocol::stop() { core_->stop(); }
View Protocol::view() const { return core_->view(); }
bool Protocol::joined() const { return core_->joined(); }
std::vector<SeedFailure> Protocol::seedFailures() const { return core_->seedFailures(); }

}  // namespace gossamer::net::membership
