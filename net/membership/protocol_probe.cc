// SWIM failure detection: direct and indirect probes, their acks, suspicion and its expiry.
#include <algorithm>
#include <utility>

#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {

void Core::on(const Remote& from, wire::Ping& ping) {
  merge(ping.updates, Source::rumour);
  send(from.listen, wire::Ack{self_.id, ping.sequence, piggyback()}, options_.probeTimeout);
}

void Core::on(const Remote& from, wire::PingReq& request) {
  merge(request.updates, Source::rumour);
  relayProbe(from.listen, request.sequence, request.target, request.targetAddress);
}

void Core::on(const Remote& from, wire::Ack& ack) {
  merge(ack.updates, Source::rumour);
  const auto it = probing_.waiters.find(ack.sequence);
  if (it == probing_.waiters.end() || it->second.target != ack.sender || it->second.acked) return;
  it->second.acked = true;
  // A direct Ack measures the round trip to the member (relays are chosen by it).
  const auto record = members_.find(ack.sender);
  if (from.peerId == ack.sender && record != members_.end() &&
      it->second.sent != Clock::time_point{}) {
    const auto sample =
        std::chrono::duration_cast<std::chrono::microseconds>(env_.now() - it->second.sent);
    auto& rtt = record->second.roundTrip;
    rtt = rtt.count() == 0 ? sample : (7 * rtt + sample) / 8;
  }
  if (it->second.then) {
    // The wait ends now rather than at its deadline.
    cancel(it->second.timer);
    std::exchange(it->second.then, nullptr)(true);
  }
}

void Core::addToProbeOrder(std::uint64_t id) {
  // At a random place after the cursor, so that a newcomer is probed within this round.
  std::uniform_int_distribution<std::size_t> at(probing_.cursor, probing_.order.size());
  probing_.order.insert(probing_.order.begin() + static_cast<std::ptrdiff_t>(at(rng_)), id);
}

const Member* Core::nextProbeTarget() {
  for (int pass = 0; pass < 2; ++pass) {
    while (probing_.cursor < probing_.order.size()) {
      const auto it = members_.find(probing_.order[probing_.cursor++]);
      if (it != members_.end() && isLive(it->second.member.state)) return &it->second.member;
    }
    probing_.order.clear();
    for (const Member* m : liveMembers()) probing_.order.push_back(m->id);
    std::shuffle(probing_.order.begin(), probing_.order.end(), rng_);
    probing_.cursor = 0;
  }
  return nullptr;
}

void Core::awaitAck(std::uint64_t sequence, Clock::time_point deadline,
                    std::function<void(bool)> then) {
  AckWaiter& waiter = probing_.waiters.at(sequence);
  if (waiter.acked) {
    waiter.timer = after(env_.now(), [then = std::move(then)] { then(true); });
    return;
  }
  waiter.then = std::move(then);
  waiter.timer = after(deadline, [this, sequence] {
    const auto it = probing_.waiters.find(sequence);
    if (it != probing_.waiters.end() && it->second.then)
      std::exchange(it->second.then, nullptr)(false);
  });
}

void Core::probeTick() {
  const Clock::time_point start = env_.now();
  const Member* target = nextProbeTarget();
  if (target == nullptr) {
    after(start + options_.probeInterval, [this] { probeTick(); });
    return;
  }
  probe(*target, start,
        [this, start] { after(start + options_.probeInterval, [this] { probeTick(); }); });
}

void Core::probe(const Member& target, Clock::time_point start, std::function<void()> done) {
  const std::uint64_t sequence = ++probing_.sequence;
  const std::uint64_t targetId = target.id;
  const Endpoint targetAddress = target.address;
  probing_.waiters[sequence] = AckWaiter{targetId, env_.now()};
  // A dial-out-only target may have to open the link first (connection reversal): the ping may
  // wait for it the whole period, and its Ack counts until the period ends, beside the indirect
  // probes'. It is not suspected for want of a link it was never going to be dialed on.
  const milliseconds linkWait = target.dialOutOnly ? options_.probeInterval : options_.probeTimeout;
  send(targetAddress, wire::Ping{self_.id, sequence, piggyback()}, linkWait);
  awaitAck(sequence, start + options_.probeTimeout, [=, this](bool acked) {
    auto conclude = [this, sequence, targetId, done](bool acked) {
      probing_.waiters.erase(sequence);
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
      send(helper->address, wire::PingReq{self_.id, sequence, targetId, targetAddress, piggyback()},
           options_.probeTimeout);
    }
    awaitAck(sequence, start + options_.probeInterval, conclude);
  });
}

void Core::relayProbe(Endpoint requester, std::uint64_t requestSequence, std::uint64_t targetId,
                      Endpoint targetAddress) {
  const std::uint64_t sequence = ++probing_.sequence;
  probing_.waiters[sequence] = AckWaiter{targetId};
  send(targetAddress, wire::Ping{self_.id, sequence, piggyback()}, options_.probeTimeout);
  awaitAck(sequence, env_.now() + options_.probeTimeout, [=, this](bool acked) {
    probing_.waiters.erase(sequence);
    if (acked)
      send(requester, wire::Ack{targetId, requestSequence, piggyback()}, options_.probeTimeout);
  });
}

void Core::suspect(std::uint64_t id) {
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

void Core::expire() {
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

void Core::tick() {
  expire();
  const milliseconds period = std::max(milliseconds(5), options_.probeInterval / 10);
  after(env_.now() + period, [this] { tick(); });
}

}  // namespace gossamer::net::membership
