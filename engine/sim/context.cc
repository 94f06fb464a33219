#include "engine/sim/context.h"

#include <algorithm>
#include <cmath>

#include "net/striped/striped_transport.h"

namespace gossamer::engine::sim::detail {

double SimContext::computeGradients() {
  const double loss = p_.parts.learner->computeGradients();
  const Duration stepTime = std::chrono::duration_cast<Duration>(
      stepTimeOf(p_.world.shared().config.training, p_.id - 1) * p_.stepFactor);
  const TimePoint start = p_.world.now();
  if (stepTime.count() > 0) p_.sleepUntil(start + stepTime);
  p_.figures.computeTime += p_.world.now() - start;
  p_.noteSpeed();
  return loss;
}

std::optional<PeerSpeed> SimContext::speedOf(PeerId peer) const {
  const SimPeer* q = p_.world.current(peer);
  return q == nullptr ? std::nullopt : q->speeds.last;
}

std::map<PeerId, PathEstimate> SimContext::measuredPaths() const {
  std::map<PeerId, PathEstimate> paths;
  if (!p_.swim.protocol) return paths;
  const net::shaped::NetworkProfile& profile = p_.world.shared().config.network;
  for (const auto& [peer, roundTrip] : p_.swim.protocol->roundTrips()) {
    // Peer id i is profile index i - 1, as in a local cluster.
    const net::shaped::LinkProfile& link = profile.between(p_.id - 1, peer - 1);
    const net::striped::PathHint path{link.flowWindowBytes, link.bandwidthBitsPerSecond};
    const std::chrono::duration<double> rtt = roundTrip;
    // As the runtime's (tcp_streams.cc): the bandwidth of the round trip to the millisecond.
    const std::chrono::duration<double> rounded(std::round(rtt.count() * 1e3) / 1e3);
    paths[peer] = {rtt.count(), net::striped::pathBitsPerSecond(path, rounded, 1) / 8};
  }
  return paths;
}

std::optional<Incoming> SimContext::request(PeerId to, const Message& message,
                                            Clock::duration timeout) {
  Message tagged = message;
  tagged.tag = p_.parts.tags.fresh();
  p_.world.send(p_, std::span<const PeerId>(&to, 1), tagged, true);
  GatherResult got = gatherFrom(std::span<const PeerId>(&to, 1), tagged.tag, timeout, false);
  if (got.messages.empty()) return std::nullopt;
  return std::move(got.messages.front());
}

std::optional<Incoming> SimContext::pullModel(PeerId from, Clock::duration timeout) {
  Message pull{.kind = kPullKind, .step = p_.step, .tag = p_.parts.tags.fresh()};
  p_.world.send(p_, std::span<const PeerId>(&from, 1), pull, true, false);
  GatherResult got = gatherFrom(std::span<const PeerId>(&from, 1), pull.tag, timeout, false);
  if (got.messages.empty()) return std::nullopt;
  return std::move(got.messages.front());
}

bool SimContext::doneSending(PeerId peer) const {
  if (peer == p_.id) return false;
  if (!std::binary_search(p_.swim.view.begin(), p_.swim.view.end(), peer)) return true;
  const SimPeer* other = p_.world.current(peer);
  if (other == nullptr || other->phase == Phase::dead) return false;  // until the view drops it
  const Phase mark = p_.roster().finishing ? Phase::released : Phase::finished;
  return p_.world.phaseSeen(*other, p_, mark);
}

GatherResult SimContext::gatherFrom(std::span<const PeerId> from, std::uint64_t tag,
                                    Duration timeout, bool whileStepping) {
  World& world = p_.world;
  const TimePoint start = world.now();
  const TimePoint deadline = timeout == Duration::max() ? kNever : start + timeout;
  std::vector<std::optional<Incoming>> got(from.size());
  std::vector<bool> given(from.size(), false);
  auto gone = [&](PeerId peer) {
    if (whileStepping) return doneSending(peer);
    return peer != p_.id && !std::binary_search(p_.swim.view.begin(), p_.swim.view.end(), peer);
  };
  auto settle = [&] {
    bool done = true;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (got[i] || given[i]) continue;
      if ((got[i] = p_.inbox.take(from[i], tag))) continue;
      if (gone(from[i])) {
        given[i] = true;
        continue;
      }
      done = false;
    }
    return done;
  };
  if (!p_.block(settle, deadline)) {
    bool complete = true;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (!got[i] && !given[i]) got[i] = p_.inbox.take(from[i], tag);
      complete = complete && (got[i] || given[i]);
    }
    if (!complete) ++p_.heard.expiredWaits;
  }
  p_.figures.commWait += world.now() - start;
  return GatherResult::of(from, got);
}

}  // namespace gossamer::engine::sim::detail
