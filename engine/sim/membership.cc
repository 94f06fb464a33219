// A life's membership in the simulated world: net/membership's SWIM Protocol, unchanged, with
// virtual time for its clock and timers and the pair's control link for its frames. Its events
// set the life's view, as a real peer's service sets the runtime's.
#include <algorithm>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/sim/context.h"
#include "net/errors.h"
#include "net/wire/codec.h"

namespace gossamer::engine::sim::detail {
namespace {

// What a membership frame adds to its encoded header on a real link (the frame's length words).
constexpr std::size_t kMembershipFramingBytes = 8;

constexpr const char* kSimHost = "sim";

// The peer listening at `address`, or 0 (not a simulated peer's address).
PeerId idAt(const net::Endpoint& address) { return address.host == kSimHost ? address.port : 0; }

net::membership::Environment::Clock::time_point steady(TimePoint t) {
  return net::membership::Environment::Clock::time_point(
      std::chrono::duration_cast<net::membership::Environment::Clock::duration>(
          t.time_since_epoch()));
}

TimePoint virtualTime(net::membership::Environment::Clock::time_point t) {
  return TimePoint(std::chrono::duration_cast<Duration>(t.time_since_epoch()));
}

}  // namespace

net::Endpoint addressOf(PeerId id) {
  GOSSAMER_ENFORCE(id > 0 && id <= 65535, "a simulated peer id must be in 1..65535, not {}", id);
  return net::Endpoint{kSimHost, static_cast<std::uint16_t>(id)};
}

// ---- SimMembership -----------------------------------------------------------------------------

net::membership::Environment::Clock::time_point SimMembership::now() const {
  return steady(peer_.world.now());
}

std::uint64_t SimMembership::firstIncarnation() const {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(peer_.world.now().time_since_epoch())
          .count());
}

std::uint64_t SimMembership::selfId() const { return peer_.id; }
net::Endpoint SimMembership::selfAddress() const { return addressOf(peer_.id); }

SimMembership::TimerId SimMembership::at(Clock::time_point when, std::function<void()> action) {
  const TimerId id = ++next_;
  pending_.insert(id);
  peer_.world.at(virtualTime(when), [this, id, action = std::move(action)] {
    if (pending_.erase(id) > 0) action();
  });
  return id;
}

void SimMembership::send(const net::Endpoint& to, net::wire::MembershipMessage message,
                         std::chrono::milliseconds, std::function<void(std::error_code)> done) {
  peer_.world.sendMembership(peer_, to, std::move(message), std::move(done));
}

void SimMembership::open(const net::Endpoint& to, std::chrono::milliseconds timeout,
                         std::function<void(net::LinkOutcome)> done) {
  peer_.world.openMembership(peer_, to, timeout, std::move(done));
}

// ---- the world's side
// ----------------------------------------------------------------------------

void SimPeer::viewChanged() {
  const net::membership::View v = swim.protocol->view();
  swim.view = v.ids();
  swim.viewEpoch = v.epoch;
  // The fiber looks again from the scheduler, never from inside the protocol's handler.
  world.at(world.now(), [this] { poke(); });
}

Duration World::latency(PeerId a, PeerId b) const {
  return std::chrono::duration_cast<Duration>(config_.network.between(a - 1, b - 1).latency);
}

void World::startMembership(SimPeer& peer) {
  net::membership::Config config;
  config.options = shared_.swim;
  config.seed = net::shaped::mixSeed(config_.training.seed, (peer.id << 16) ^ peer.life);
  for (PeerId id = 1; id <= config_.peers; ++id) config.seeds.push_back(addressOf(id));
  if (!peer.late) {
    // The initial peers form the cluster before training, as the runtime's start waits for:
    // each starts with all of them in its table, at the incarnation they all start with.
    const auto incarnation = peer.swim.environment.firstIncarnation();
    for (PeerId id = 1; id <= config_.peers; ++id)
      config.members.push_back(net::membership::Member{id, addressOf(id), incarnation,
                                                       net::membership::MemberState::alive});
  }
  peer.swim.protocol =
      std::make_unique<net::membership::Protocol>(peer.swim.environment, std::move(config));
  peer.swim.protocol->onEvent([this, &peer](const net::membership::Event& event) {
    if (config_.onMembership) config_.onMembership(peer.id, Seconds(now_ - kStart).count(), event);
    peer.viewChanged();
  });
  peer.swim.protocol->start();
}

void World::sendMembership(SimPeer& from, const net::Endpoint& to,
                           net::wire::MembershipMessage message,
                           std::function<void(std::error_code)> done) {
  const PeerId target = idAt(to);
  SimPeer* receiver = target == 0 ? nullptr : current(target);
  auto report = [this](std::function<void(std::error_code)> done, TimePoint when,
                       std::error_code error) {
    if (done) at(when, [done = std::move(done), error] { done(error); });
  };
  if (receiver == nullptr || receiver->phase == Phase::dead || target == from.id) {
    // A closed port: the connection is refused after a round trip.
    ++result_.dropped;
    return report(std::move(done), now_ + 2 * (target == 0 ? Duration{} : latency(from.id, target)),
                  std::make_error_code(std::errc::connection_refused));
  }
  const std::size_t bytes = net::wire::encodeMembership(message).size() + kMembershipFramingBytes;
  ++result_.membershipMessages;
  result_.membershipBytes += bytes;
  if (partitioned(from.id, target)) {
    ++result_.dropped;
    return report(std::move(done), now_, {});
  }
  LinkState& link = controlLinks_[{from.id, target}];
  if (!link.schedule) {
    link.schedule = std::make_unique<net::shaped::LinkSchedule>(
        config_.network.between(from.id - 1, target - 1),
        net::shaped::mixSeed(config_.training.seed ^ 0x5357494dull, (from.id << 32) ^ target));
  }
  const net::shaped::LinkSchedule::Slot slot =
      link.schedule->admit(now_, bytes, extraLoss(from.id, target));
  report(std::move(done), slot.start, {});
  if (slot.dropped) {
    ++result_.dropped;
    return;
  }
  const net::Remote sender{from.id, addressOf(from.id)};
  const std::size_t life = receiver->life;
  at(slot.deliverAt, [this, sender, target, life, message = std::move(message)]() mutable {
    SimPeer* peer = current(target);
    if (peer == nullptr || peer->life != life || peer->phase == Phase::dead ||
        partitioned(sender.peerId, target)) {
      ++result_.dropped;
      return;
    }
    peer->swim.protocol->handle(sender, std::move(message));
  });
}

void World::openMembership(SimPeer& from, const net::Endpoint& to, Duration timeout,
                           std::function<void(net::LinkOutcome)> done) {
  const PeerId target = idAt(to);
  SimPeer* receiver = target == 0 ? nullptr : current(target);
  net::LinkOutcome outcome;
  TimePoint when = now_;
  if (target != 0 && partitioned(from.id, target)) {
    outcome.error = net::Errc::partitioned;
    outcome.reason = fmt::format("partitioned from {}", to.str());
    when += timeout;
  } else if (receiver == nullptr || receiver->phase == Phase::dead) {
    outcome.error = std::make_error_code(std::errc::connection_refused);
    when += target == 0 ? Duration{} : 2 * latency(from.id, target);
  } else {
    outcome.remote = net::Remote{target, addressOf(target)};
    when += 2 * latency(from.id, target);
  }
  at(when, [done = std::move(done), outcome = std::move(outcome)] { done(outcome); });
}

}  // namespace gossamer::engine::sim::detail
