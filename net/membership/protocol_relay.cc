// Relays: two dial-out-only members whose hole punch failed (a NAT that picks ports at random)
// talk through a member both reach. The one that needs the link opens it through the live member
// that can be dialed with the shortest probe round trip, and the next one when that fails or
// refuses (net::Mesh::relay; net/relay/relay_hub.h says what the relay checks and forwards).
// While the punch back-off runs, the relayed link carries the pair; a relay that fails or
// leaves takes the link with it, and the next send opens one through another.
#include <algorithm>
#include <utility>

#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {

std::vector<Member> Core::relayCandidates(std::uint64_t target) const {
  std::vector<std::pair<std::chrono::microseconds, Member>> near;
  for (const auto& [id, record] : members_) {
    const Member& m = record.member;
    if (id == target || !isLive(m.state) || m.dialOutOnly || reach_.relayRefused.count(id))
      continue;
    // A member never probed directly goes last.
    const auto rtt =
        record.roundTrip.count() > 0 ? record.roundTrip : std::chrono::microseconds::max();
    near.emplace_back(rtt, m);
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Member> out;
  for (auto& [rtt, m] : near) out.push_back(std::move(m));
  return out;
}

bool Core::requestRelay(const Member& target, Channel channel) {
  if (reach_.relaying.count(target.id)) return true;  // one attempt at a time
  auto relays = std::make_shared<const std::vector<Member>>(relayCandidates(target.id));
  if (relays->empty()) return false;
  reach_.relaying.insert(target.id);
  relayThrough(target, channel, std::move(relays), 0);
  return true;
}

void Core::relayThrough(const Member& target, Channel channel,
                        std::shared_ptr<const std::vector<Member>> relays, std::size_t next) {
  if (next == relays->size()) {
    reach_.relaying.erase(target.id);
    logger_->info("no member could relay a link to {:016x} ({} tried)", target.id, relays->size());
    return;
  }
  const Member via = (*relays)[next];
  const auto done =
      guarded<LinkOutcome>([this, target, channel, relays, next, via](const LinkOutcome& link) {
        if (link.ok()) {
          reach_.relaying.erase(target.id);
          const auto it = members_.find(via.id);
          const auto rtt =
              it == members_.end() ? std::chrono::microseconds(0) : it->second.roundTrip;
          logger_->info(
              "relaying the {} link with {:016x} (both dial-out only, no direct link) "
              "through {:016x} at {} (round trip {:.1f} ms)",
              channel == Channel::control ? "control" : "data", target.id, via.id,
              via.address.str(), rtt.count() / 1000.0);
          return;
        }
        if (link.reason.find("--relay off") != std::string::npos)
          reach_.relayRefused.insert(via.id);
        logger_->debug("{:016x} did not relay to {:016x}: {}{}{}", via.id, target.id,
                       link.error.message(), link.reason.empty() ? "" : ": ", link.reason);
        relayThrough(target, channel, relays, next + 1);
      });
  env_.relay(via.address, target.address, target.id, channel, options_.connectTimeout, done);
}

}  // namespace gossamer::net::membership
