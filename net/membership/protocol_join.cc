// Joining: the rounds over the seed list, what a seed answers a join request, who a seed is.
#include <algorithm>
#include <utility>

#include <asio/error.hpp>

#include "net/errors.h"
#include "net/membership/protocol_internal.h"

namespace gossamer::net::membership {

void Core::on(const Remote& from, wire::JoinRequest& request) {
  if (request.peerId == self_.id) {
    send(from.listen,
         wire::JoinReply{false, fmt::format("peer id {:016x} is the seed's own", self_.id), {}});
    return;
  }
  // A member on its way out admits nobody: its table already says it left, and a joiner that
  // took that table would hold a view of itself alone. Refused, the joiner tries its other seeds.
  if (leaving_) {
    send(from.listen, wire::JoinReply{false, "the seed is leaving the cluster", {}});
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
  // The joiner's key is the one its link's handshake proved (and bound).
  apply(wire::MemberUpdate{request.peerId, request.address, request.incarnation,
                           wire::MemberState::alive, 0, env_.identityKeyOf(request.peerId),
                           request.dialOutOnly},
        Source::rumour);
  send(from.listen, wire::JoinReply{true, "", table(), from.observed});
  if (!request.dialOutOnly) dialBack(from, request.address);
}

void Core::on(const Remote& from, wire::JoinReply& reply) {
  if (!reply.accepted) {
    logger_->warn("seed {} refused to admit this peer: {}", from.listen.str(), reply.reason);
    if (join_.awaited && !joined_) {
      noteFailure(*join_.awaited, Errc::joinRefused, reply.reason);
      join_.awaited.reset();  // answered
    }
    endJoinWait();
    return;
  }
  const bool first = !joined_;
  becomeJoined();
  merge(reply.members, Source::table);
  if (first)
    logger_->info("joined through {} ({} members; that member saw this peer's link come from {})",
                  from.listen.str(), view().members.size(),
                  reply.observed.empty() ? "?" : reply.observed);
  endJoinWait();
}

bool Core::isSeed(const Endpoint& to) const {
  return std::find(config_.seeds.begin(), config_.seeds.end(), to) != config_.seeds.end();
}

bool Core::learnSeed(const Endpoint& seed, const LinkOutcome& link) {
  if (link.remote.peerId != self_.id || link.remote.listen != self_.address) {
    join_.seedIds[seed] = link.remote.peerId;
    return false;
  }
  logger_->debug("seed {} is this peer itself; dropping it from the seed list", seed.str());
  std::erase(config_.seeds, seed);
  join_.seedFailures.erase(seed);
  env_.disconnect(seed);
  return true;
}

void Core::noteFailure(const Endpoint& seed, std::error_code error, std::string reason) {
  join_.seedFailures[seed] = SeedFailure{seed, error, std::move(reason)};
}

void Core::joinRound(milliseconds backoff) {
  if (joined_) return;
  // A copy, shared by the pass: learnSeed may drop one from the list meanwhile.
  joinThrough(std::make_shared<const std::vector<Endpoint>>(config_.seeds), 0, backoff);
}

void Core::joinThrough(std::shared_ptr<const std::vector<Endpoint>> seeds, std::size_t index,
                       milliseconds backoff) {
  if (joined_) return;
  if (index == seeds->size()) {
    logger_->debug("no seed admitted this peer yet; retrying in {} ms", backoff.count());
    join_.timer = after(env_.now() + backoff, [this, backoff] {
      join_.timer = 0;
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
                  wire::JoinRequest{self_.id, self_.address, self_.incarnation, self_.dialOutOnly};
              env_.send(seed, std::move(request), options_.connectTimeout,
                        guarded<std::error_code>([this, seed, next](std::error_code error) {
                          if (joined_) return;
                          if (error) return joinFailed(seed, error, "", next);
                          awaitJoinReply(seed, next);
                        }));
            }));
}

void Core::joinFailed(const Endpoint& seed, std::error_code error, const std::string& reason,
                      const std::function<void()>& next) {
  noteFailure(seed, error, reason);
  // The first failure of each seed is a warning; the retries are not worth one each.
  if (join_.failures[seed]++ == 0) {
    if (isRefusal(error))
      logger_->warn("seed {} refused this peer ({}); will retry", seed.str(),
                    reason.empty() ? error.message() : reason);
    else
      logger_->warn("seed {} is unreachable ({}); skipping it, will retry", seed.str(),
                    error.message());
  }
  next();
}

void Core::awaitJoinReply(const Endpoint& seed, std::function<void()> next) {
  join_.awaited = seed;
  join_.waitOver = [this, seed, next] {
    if (joined_) return;
    if (join_.awaited) {  // no reply, neither admitted nor refused
      noteFailure(seed, asio::error::timed_out,
                  fmt::format("no reply to the join request within {} ms",
                              options_.connectTimeout.count()));
      join_.awaited.reset();
    }
    next();
  };
  join_.timer = after(env_.now() + options_.connectTimeout, [this] {
    join_.timer = 0;
    if (join_.waitOver) std::exchange(join_.waitOver, nullptr)();
  });
}

void Core::endJoinWait() {
  if (!join_.waitOver) return;
  cancel(join_.timer);
  // Later, as the coroutine this replaces resumed after the handler returned.
  auto over = std::exchange(join_.waitOver, nullptr);
  join_.timer = after(env_.now(), [this, over] {
    join_.timer = 0;
    over();
  });
}

}  // namespace gossamer::net::membership
