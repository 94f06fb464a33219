// Hole punching: two dial-out-only members (each behind its own NAT) reach each other directly.
// The one that needs the link asks members it reaches to introduce the two; a member linked to
// both (the rendezvous) tells each the host the other's link comes from as it sees it (its NAT's
// address); then both connect at once, each from its own listen port to the other's host at the
// other's advertised port. A NAT that keeps ports maps each listen port to the same port of its
// own address, and each NAT lets the other's connection in once its own peer has connected out:
// a TCP simultaneous open. A NAT that picks ports at random defeats it (the link fails and the
// senders waiting for it time out). Two members behind one NAT (the same host seen) are on one
// network: the lead alone connects, to the other's advertised address. Of the two, the one with
// the lower id leads: it runs the client handshake (both ends connect, so neither is the client
// by the connection alone).
#include <algorithm>
#include <utility>

#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {
namespace {

// The host of "host:port" (an observed address); empty when it is not one.
std::string hostOf(const std::string& observed) {
  if (observed.empty()) return {};
  try {
    return Endpoint::parse(observed).host;
  } catch (const std::exception&) {
    return {};
  }
}

const char* nameOf(Channel channel) { return channel == Channel::control ? "control" : "data"; }

}  // namespace

bool Core::requestPunch(const Member& target, Channel channel) {
  // A punch with it failed lately: a relay carries the link until the back-off ends (or, with
  // no relay, the sender waits out its connect timeout).
  if (punchBackingOff(target.id)) {
    requestRelay(target, channel);
    return true;
  }
  const std::vector<Endpoint> rendezvous = goBetweens(target.id);
  if (rendezvous.empty()) return false;  // nobody could introduce the two: dial, which fails
  logger_->debug(
      "{:016x} and this peer are both dial-out only: asking {} members to introduce "
      "them for a direct {} link",
      target.id, rendezvous.size(), nameOf(channel));
  const wire::Punch request{self_.id, target.id, static_cast<std::uint8_t>(channel), {}, {}, false};
  for (const Endpoint& member : rendezvous) send(member, request);
  return true;
}

void Core::on(const Remote& from, wire::Punch& punch) {
  if (punch.fromRendezvous)
    punchTo(from, punch);
  else
    introduce(from, punch);
}

void Core::introduce(const Remote& from, wire::Punch& punch) {
  // Only for the requester itself, for two live dial-out-only members, and only on links that are
  // open already: a rendezvous never dials either (it cannot).
  if (from.peerId != punch.requester || punch.channel >= kChannels || self_.dialOutOnly) return;
  const auto requester = members_.find(punch.requester);
  const auto target = members_.find(punch.target);
  if (requester == members_.end() || target == members_.end()) return;
  const Member& a = requester->second.member;
  const Member& b = target->second.member;
  if (!isLive(a.state) || !isLive(b.state) || !a.dialOutOnly || !b.dialOutOnly) return;
  punch.requesterHost = hostOf(from.observed);
  punch.targetHost = hostOf(env_.observedAt(b.address));
  if (punch.requesterHost.empty() || punch.targetHost.empty()) return;  // no link to the target
  punch.fromRendezvous = true;
  logger_->debug("introducing {:016x} (seen at {}) and {:016x} (seen at {}) for a direct {} link",
                 a.id, punch.requesterHost, b.id, punch.targetHost,
                 nameOf(static_cast<Channel>(punch.channel)));
  send(a.address, punch);
  send(b.address, punch);
}

void Core::punchTo(const Remote& from, const wire::Punch& punch) {
  const bool asRequester = punch.requester == self_.id;
  if (!self_.dialOutOnly || punch.channel >= kChannels ||
      (!asRequester && punch.target != self_.id))
    return;
  // The rendezvous is a live member that can be dialed; the other end a live dial-out-only one.
  const auto rendezvous = members_.find(from.peerId);
  const auto other = members_.find(asRequester ? punch.target : punch.requester);
  if (rendezvous == members_.end() || !isLive(rendezvous->second.member.state) ||
      rendezvous->second.member.dialOutOnly || other == members_.end())
    return;
  const Member peer = other->second.member;
  if (!isLive(peer.state) || !peer.dialOutOnly) return;
  const auto channel = static_cast<Channel>(punch.channel);
  const std::pair<std::uint64_t, std::uint8_t> key{peer.id, punch.channel};
  // A copy through another rendezvous, a link that opened meanwhile, or a recent failure.
  if (reach_.punching.count(key) || env_.linked(peer.address, channel) || punchBackingOff(peer.id))
    return;
  if (!reach_.links.allow(env_.now())) {
    logger_->debug("no punch to {:016x}: {} links opened on request in the last second already",
                   peer.id, reach_.links.recent());
    return;
  }
  const std::string& ownHost = asRequester ? punch.requesterHost : punch.targetHost;
  const std::string& otherHost = asRequester ? punch.targetHost : punch.requesterHost;
  const bool lead = self_.id < peer.id;
  const bool oneNetwork = ownHost == otherHost;
  if (oneNetwork && !lead) return;  // the lead connects
  reach_.punching.insert(key);
  const auto done = guarded<LinkOutcome>([this, key, peer, channel](const LinkOutcome& link) {
    reach_.punching.erase(key);
    punched(peer, channel, link);
  });
  // One NAT in front of both: one network, where the advertised address is reached directly.
  const Endpoint at = oneNetwork ? peer.address : Endpoint{otherHost, peer.address.port};
  if (oneNetwork)
    logger_->info("{:016x} is behind the same NAT ({}): connecting to it at {} for the {} link",
                  peer.id, ownHost, at.str(), nameOf(channel));
  else
    logger_->info(
        "punching through to {:016x} at {} for the {} link (its NAT; this peer {} the "
        "handshake)",
        peer.id, at.str(), nameOf(channel), lead ? "leads" : "follows");
  env_.punch(peer.address, peer.id, at, channel, lead, options_.connectTimeout, done);
}

bool Core::punchBackingOff(std::uint64_t peer) const {
  const auto it = reach_.punchFailed.find(peer);
  return it != reach_.punchFailed.end() && env_.now() < it->second.retryAt;
}

void Core::punched(const Member& peer, Channel channel, const LinkOutcome& link) {
  if (link.ok()) {
    reach_.punchFailed.erase(peer.id);
    logger_->info("opened a direct {} link with {:016x} (both dial-out only) from {}",
                  nameOf(channel), peer.id, link.remote.observed);
    return;
  }
  Reaching::Failed& failed = reach_.punchFailed[peer.id];
  ++failed.times;
  const auto wait = std::min<Clock::duration>(
      kMaxPunchBackoff, kPunchBackoff * (1u << std::min(failed.times - 1, 6u)));
  failed.retryAt = env_.now() + wait;
  // Said once; the retries, less and less often, at debug level.
  const auto level = failed.times == 1 ? spdlog::level::info : spdlog::level::debug;
  logger_->log(level,
               "no direct {} link with {:016x} (both dial-out only): {}{}{}; {} failed, "
               "next try in {} s",
               nameOf(channel), peer.id, link.error.message(), link.reason.empty() ? "" : ": ",
               link.reason, failed.times == 1 ? "once" : fmt::format("{} times", failed.times),
               std::chrono::duration_cast<std::chrono::seconds>(wait).count());
  // The relay is the fallback, at once: the senders waiting for the link get the relayed one.
  // The lead opens it (the other end's senders get it too: it carries both ways).
  if (self_.id < peer.id) requestRelay(peer, channel);
}

}  // namespace gossamer::net::membership
