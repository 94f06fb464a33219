// The SWIM protocol (membership.h states it; protocol.h says how it is driven). Every wait is a
// timer of the Environment and every continuation a callback holding a weak reference, so a
// stopped or destroyed protocol ignores whatever still arrives.
// This file holds the lifecycle, the timers, the member table and its dissemination (gossip and
// push-pull); protocol_probe.cc the failure detection, protocol_join.cc joining through the seeds.
#include "net/membership/protocol.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <variant>

#include "engine/base/enforce.h"
#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {
namespace {

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

// Whether a rumour (incarnation, state) about a member supersedes what this peer holds.
bool supersedes(std::uint64_t incarnation, MemberState state, const Member& current) {
  if (incarnation != current.incarnation) return incarnation > current.incarnation;
  return rank(state) > rank(current.state);
}

}  // namespace

Core::Core(Environment& env, Config config)
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

void Core::start() {
  GOSSAMER_ENFORCE(!started_, "membership service started twice");
  started_ = true;
  running_ = true;
  self_ = Member{env_.selfId(),
                 env_.selfAddress(),
                 env_.firstIncarnation(),
                 MemberState::alive,
                 env_.identityKeyOf(env_.selfId()),
                 config_.noInbound};
  std::erase(config_.seeds, self_.address);
  const Clock::time_point now = env_.now();
  const bool formed = !config_.members.empty();
  for (const Member& m : config_.members) {
    if (m.id == self_.id || !isLive(m.state)) continue;
    members_.emplace(m.id, Record{m, now, {}});
    probing_.order.push_back(m.id);
  }
  std::shuffle(probing_.order.begin(), probing_.order.end(), rng_);
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

void Core::stop() {
  if (!running_) return;
  running_ = false;
  for (TimerId t : timers_) env_.cancel(t);
  timers_.clear();
  probing_.waiters.clear();
}

void Core::leave(milliseconds timeout, std::function<void()> done) {
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

void Core::handle(const Remote& from, wire::MembershipMessage message) {
  if (!running_) return;
  std::visit([&](auto& m) { on(from, m); }, message);
}

std::map<std::uint64_t, std::chrono::microseconds> Core::roundTrips() const {
  std::map<std::uint64_t, std::chrono::microseconds> out;
  for (const auto& [id, record] : members_) {
    if (record.roundTrip.count() > 0) out.emplace(id, record.roundTrip);
  }
  return out;
}

std::vector<SeedFailure> Core::seedFailures() const {
  std::vector<SeedFailure> out;
  for (const Endpoint& seed : config_.seeds) {
    const auto it = join_.seedFailures.find(seed);
    out.push_back(it != join_.seedFailures.end() ? it->second : SeedFailure{seed, {}, {}});
  }
  return out;
}

// ---- timers -------------------------------------------------------------------------------------

Environment::TimerId Core::after(Clock::time_point when, std::function<void()> action) {
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
void Core::cancel(TimerId& timer) {
  if (timer == 0) return;
  env_.cancel(timer);
  timers_.erase(timer);
  timer = 0;
}

// ---- messages about the table -------------------------------------------------------------------

void Core::on(const Remote&, wire::Gossip& gossip) { merge(gossip.updates, Source::rumour); }

void Core::on(const Remote& from, wire::Leave& leave) {
  const auto it = members_.find(leave.peerId);
  const Endpoint address = it != members_.end() ? it->second.member.address : from.listen;
  apply(wire::MemberUpdate{leave.peerId, address, leave.incarnation, wire::MemberState::left},
        Source::rumour);
}

void Core::on(const Remote& from, wire::PushPull& pushPull) {
  merge(pushPull.members, Source::table);
  if (!pushPull.reply) send(from.listen, wire::PushPull{self_.id, true, table()});
}

// ---- the member table ---------------------------------------------------------------------------

void Core::merge(const std::vector<wire::MemberUpdate>& updates, Source source) {
  for (const wire::MemberUpdate& update : updates) apply(update, source);
}

void Core::apply(wire::MemberUpdate update, Source source) {
  MemberState state = fromWire(update.state);
  if (update.peerId == self_.id) {
    aboutSelf(update.incarnation, state);
    return;
  }
  // A record whose key is not the one this peer bound to the id is another peer posing as it:
  // refused whole (a record without a key says nothing about identity).
  if (!update.identityKey.empty() && !env_.bindIdentity(update.peerId, update.identityKey)) {
    logger_->warn(
        "refused a member record of {:016x} ({}): it carries another identity key than "
        "the one bound to that id",
        update.peerId, update.address.str());
    return;
  }
  const Clock::time_point now = env_.now();
  auto it = members_.find(update.peerId);
  if (it == members_.end()) {
    // A stranger: remember it; a dead or left one only as a tombstone, without an event.
    Record record{Member{update.peerId, update.address, update.incarnation, state,
                         update.identityKey, update.dialOutOnly},
                  now,
                  {}};
    members_.emplace(update.peerId, record);
    enqueue(update);
    if (isLive(state)) {
      addToProbeOrder(update.peerId);
      deliver(EventKind::joined, record.member);
    }
    return;
  }
  Member& member = it->second.member;
  if (member.identityKey.empty()) member.identityKey = update.identityKey;
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
  member.dialOutOnly = update.dialOutOnly;
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

void Core::aboutSelf(std::uint64_t incarnation, MemberState state) {
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

void Core::becomeJoined() {
  if (joined_) return;
  joined_ = true;
  deliver(EventKind::joined, self_);
}

void Core::deliver(EventKind kind, const Member& member) {
  ++epoch_;
  refreshView();
  logger_->debug("epoch {}: {:016x} at {} {}", epoch_, member.id, member.address.str(), name(kind));
  if (handler_) handler_(Event{kind, member, epoch_});
}

void Core::refreshView() {
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

std::vector<wire::MemberUpdate> Core::table() const {
  std::vector<wire::MemberUpdate> out;
  out.reserve(members_.size() + 1);
  out.push_back(toUpdate(self_));
  for (const auto& [id, record] : members_) out.push_back(toUpdate(record.member));
  return out;
}

std::vector<const Member*> Core::liveMembers() const {
  std::vector<const Member*> out;
  for (const auto& [id, record] : members_) {
    if (isLive(record.member.state)) out.push_back(&record.member);
  }
  return out;
}

// ---- dissemination ------------------------------------------------------------------------------

void Core::enqueue(const wire::MemberUpdate& update) {
  std::erase_if(broadcasts_, [&](const Broadcast& b) { return b.update.peerId == update.peerId; });
  broadcasts_.push_back(Broadcast{update, 0});
}

std::size_t Core::retransmitLimit() const {
  return static_cast<std::size_t>(
      std::max(1.0, std::ceil(options_.retransmitMultiplier *
                              std::log10(static_cast<double>(clusterSize()) + 1.0))));
}

std::vector<wire::MemberUpdate> Core::piggyback() {
  const std::size_t limit = retransmitLimit();
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

void Core::send(const Endpoint& to, wire::MembershipMessage message) {
  send(to, std::move(message), options_.connectTimeout);
}
void Core::send(const Endpoint& to, wire::MembershipMessage message, milliseconds connectTimeout) {
  if (!running_) return;
  env_.send(to, std::move(message), connectTimeout, nullptr);
}

// ---- the gossip and push-pull rounds ------------------------------------------------------------

void Core::scheduleGossip() {
  after(env_.now() + options_.gossipInterval, [this] {
    gossip();
    scheduleGossip();
  });
}

void Core::gossip() {
  if (broadcasts_.empty()) return;
  std::vector<const Member*> targets = liveMembers();
  std::shuffle(targets.begin(), targets.end(), rng_);
  targets.resize(std::min(targets.size(), options_.gossipFanout));
  for (const Member* target : targets) {
    std::vector<wire::MemberUpdate> updates = piggyback();
    if (updates.empty()) break;
    if (!running_) return;
    // A gossip that never left (no link could be opened: a member this peer cannot dial yet, whose
    // dial-out-only record is itself on its way) does not count as one of its updates' copies.
    env_.send(target->address, wire::Gossip{self_.id, updates}, options_.connectTimeout,
              guarded<std::error_code>([this, updates](std::error_code error) {
                if (error) refund(updates);
              }));
  }
}

void Core::refund(const std::vector<wire::MemberUpdate>& updates) {
  for (const wire::MemberUpdate& update : updates) {
    const auto queued =
        std::find_if(broadcasts_.begin(), broadcasts_.end(),
                     [&](const Broadcast& b) { return b.update.peerId == update.peerId; });
    if (queued != broadcasts_.end()) {
      if (queued->update == update && queued->transmits > 0) --queued->transmits;
      continue;
    }
    // Its last copy was the one lost: queued again for one more, while it is still the news
    // about that member.
    const auto it = members_.find(update.peerId);
    const bool current = update.peerId == self_.id
                             ? update.incarnation == self_.incarnation
                             : it != members_.end() &&
                                   toUpdate(it->second.member).incarnation == update.incarnation &&
                                   toUpdate(it->second.member).state == update.state;
    if (current) broadcasts_.push_back(Broadcast{update, retransmitLimit() - 1});
  }
}

void Core::schedulePushPull(std::uint64_t tick) {
  // The chain ticks every kDialOutOnlyPushPullPeriods probe periods (at most the push-pull
  // interval); a push-pull is due every interval, or at every tick while this peer is dial-out
  // only: the others reach it only over the links it opened, so it pulls the news itself.
  const milliseconds period =
      std::min(options_.pushPullInterval, options_.probeInterval * kDialOutOnlyPushPullPeriods);
  const std::uint64_t ticksPerInterval =
      std::max<std::uint64_t>(1, options_.pushPullInterval / std::max(period, milliseconds(1)));
  const double scale = std::max(1.0, static_cast<double>(clusterSize()) / 8.0);
  after(env_.now() + std::chrono::duration_cast<milliseconds>(period * scale),
        [this, tick, ticksPerInterval] {
          if (self_.dialOutOnly)
            pushPull(tick);
          else if ((tick + 1) % ticksPerInterval == 0)
            pushPull(tick / ticksPerInterval);
          schedulePushPull(tick + 1);
        });
}

void Core::pushPull(std::uint64_t round) {
  if (!joined_) return;
  const std::optional<Endpoint> target = pushPullTarget(round % 2 == 1);
  if (!target) return;
  if (isSeed(*target) && join_.seedIds.count(*target) == 0) {
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

std::optional<Endpoint> Core::pushPullTarget(bool reconnect) {
  std::vector<Endpoint> candidates;
  if (reconnect) {
    for (const auto& [id, record] : members_) {
      if (record.member.state == MemberState::dead) candidates.push_back(record.member.address);
    }
    for (const Endpoint& seed : config_.seeds) {
      const auto id = join_.seedIds.find(seed);
      const bool known = std::any_of(members_.begin(), members_.end(), [&](const auto& entry) {
        const Member& m = entry.second.member;
        return isLive(m.state) &&
               (m.address == seed || (id != join_.seedIds.end() && m.id == id->second));
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
bool Protocol::requestReversal(const Endpoint& to, Channel channel) {
  return core_->requestReversal(to, channel);
}
void Protocol::leave(milliseconds timeout, std::function<void()> done) {
  core_->leave(timeout, std::move(done));
}
void Protocol::stop() { core_->stop(); }
View Protocol::view() const { return core_->view(); }
bool Protocol::joined() const { return core_->joined(); }
std::vector<SeedFailure> Protocol::seedFailures() const { return core_->seedFailures(); }
std::map<std::uint64_t, std::chrono::microseconds> Protocol::roundTrips() const {
  return core_->roundTrips();
}

}  // namespace gossamer::net::membership
