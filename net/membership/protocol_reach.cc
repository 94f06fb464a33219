// Reachability: the dial-back a seed makes to a joiner, what the joiner learns from it, and
// connection reversal (a link to a dial-out-only member is opened by that member, at a request
// sent on a link to it or forwarded by a member linked to it).
#include <algorithm>
#include <utility>

#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {

void Core::dialBack(const Remote& from, const Endpoint& address) {
  // Only ever the address the joiner advertises, only after it authenticated, and at most
  // kMaxDialBacksPerSecond: a seed must not become a way to make it connect anywhere, or often.
  if (!reach_.dialBacks.allow(env_.now())) {
    logger_->debug("no dial-back to {:016x} at {}: {} in the last second already", from.peerId,
                   address.str(), reach_.dialBacks.recent());
    return;
  }
  const Remote joiner = from;
  env_.dialBack(
      address, from.peerId, options_.connectTimeout,
      guarded<std::error_code>([this, joiner, address](std::error_code error) {
        if (error)
          logger_->info(
              "could not dial {:016x} back at its advertised address {} ({}); "
              "its link came from {}: it is dial-out only",
              joiner.peerId, address.str(), error.message(),
              joiner.observed.empty() ? "?" : joiner.observed);
        send(joiner.listen, wire::Reachability{self_.id, !error, address, joiner.observed});
      }));
}

void Core::on(const Remote& from, wire::Reachability& answer) {
  const std::string observed = answer.observed.empty() ? "?" : answer.observed;
  if (answer.dialable) {
    logger_->info(
        "member {:016x} dialed this peer back at {}: others can dial it (its links "
        "come from {})",
        from.peerId, answer.address.str(), observed);
    return;
  }
  if (self_.dialOutOnly) return;
  logger_->info(
      "member {:016x} could not dial this peer back at its advertised address {} (its "
      "links come from {}): marked dial-out only; the others reach it on the links it "
      "opens",
      from.peerId, answer.address.str(), observed);
  // Only this peer states its reachability: a new incarnation carries it to everyone.
  self_.dialOutOnly = true;
  ++self_.incarnation;
  enqueue(toUpdate(self_));
  refreshView();
}

const Member* Core::liveMemberAt(const Endpoint& address) const {
  for (const auto& [id, record] : members_)
    if (record.member.address == address && isLive(record.member.state)) return &record.member;
  return nullptr;
}

std::vector<Endpoint> Core::goBetweens(std::uint64_t target) {
  std::vector<Endpoint> members;
  for (const Member* m : liveMembers())
    if (m->id != target && !m->dialOutOnly) members.push_back(m->address);
  std::shuffle(members.begin(), members.end(), rng_);
  members.resize(std::min(members.size(), kReversalForwarders));
  return members;
}

bool Core::requestReversal(const Endpoint& to, Channel channel) {
  if (!running_) return false;
  const Member* target = liveMemberAt(to);
  if (target == nullptr || !target->dialOutOnly) return false;  // dial it
  if (self_.dialOutOnly) return requestPunch(*target, channel);  // neither can dial the other
  const wire::Reverse request{self_.id, target->id, static_cast<std::uint8_t>(channel), false};
  if (env_.linked(to, Channel::control)) {
    send(to, request);
    return true;
  }
  // No link of this peer's own to it: members linked to it pass the request on.
  const std::vector<Endpoint> forwarders = goBetweens(target->id);
  logger_->debug(
      "asking {:016x} (dial-out only) through {} members to open its {} link to this peer",
      target->id, forwarders.size(), channel == Channel::control ? "control" : "data");
  for (const Endpoint& forwarder : forwarders) send(forwarder, request);
  return true;
}

void Core::on(const Remote& from, wire::Reverse& request) {
  if (request.target != self_.id) {
    // Forwarded once, for the requester itself, and only on a link that is open already: a
    // forwarder never dials the target (it cannot be dialed).
    if (request.forwarded || from.peerId != request.requester) return;
    const auto it = members_.find(request.target);
    if (it == members_.end() || !isLive(it->second.member.state) ||
        !env_.linked(it->second.member.address, Channel::control))
      return;
    request.forwarded = true;
    send(it->second.member.address, request);
    return;
  }
  // The address is the requester's as this peer's table holds it, never one a message names.
  const auto it = members_.find(request.requester);
  if (request.channel >= kChannels || it == members_.end() || !isLive(it->second.member.state) ||
      it->second.member.dialOutOnly)
    return;
  const Endpoint address = it->second.member.address;
  const auto channel = static_cast<Channel>(request.channel);
  if (env_.linked(address, channel)) return;  // a copy through another forwarder came first
  if (!reach_.links.allow(env_.now())) {
    logger_->debug("no reversed link to {:016x}: {} in the last second already", request.requester,
                   reach_.links.recent());
    return;
  }
  const std::uint64_t requester = request.requester;
  env_.openFor(address, channel, options_.connectTimeout,
               guarded<LinkOutcome>([this, requester, address, channel](const LinkOutcome& link) {
                 const char* which = channel == Channel::control ? "control" : "data";
                 if (link.ok())
                   logger_->info(
                       "opened the {} link {:016x} asked for at {} (it cannot dial this peer)",
                       which, requester, address.str());
                 else
                   logger_->info("could not open the {} link {:016x} asked for at {}: {}{}{}",
                                 which, requester, address.str(), link.error.message(),
                                 link.reason.empty() ? "" : ": ", link.reason);
               }));
}

}  // namespace gossamer::net::membership
