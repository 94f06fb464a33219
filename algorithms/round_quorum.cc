#include "algorithms/round_quorum.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

using engine::PeerId;

constexpr std::uint64_t kReady = 0;    // integers {kReady}, scalars {steps}
constexpr std::uint64_t kDecided = 1;  // integers {kDecided, id...}
// Rounds ahead of the last one over whose messages are kept (a faster member's): enough for a
// member left out of a few rounds in a row; beyond, dropped, and the round fails on it.
constexpr std::uint64_t kRoundsAhead = 64;
// How long a leader waiting to close sleeps at most between looks at its clock.
constexpr engine::Clock::duration kLook = std::chrono::milliseconds(20);

bool contains(std::span<const PeerId> ids, PeerId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::size_t QuorumSize::of(std::size_t members) const {
  if (!enabled() || members == 0) return members;
  const std::size_t wanted =
      count > 0 ? count
                : static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(members)));
  return std::clamp<std::size_t>(wanted, 1, members);
}

QuorumSize QuorumSize::parse(const std::string& algorithm, const std::string& text) {
  if (text == "all") return {};
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end == text.c_str() + text.size() && std::isfinite(value);
  GOSSAMER_ENFORCE(number && value > 0 && (value < 1 || value == std::floor(value)),
                   "{}.quorum must be all, a number of members >= 1 or a fraction of them in "
                   "(0, 1), not '{}'",
                   algorithm, text);
  if (value < 1) return QuorumSize{.count = 0, .fraction = value};
  return QuorumSize{.count = static_cast<std::size_t>(value), .fraction = 0};
}

std::optional<std::vector<PeerId>> closeRound(const CloseInput& input) {
  std::vector<PeerId> ready;
  double steps = 0;
  for (const ReadyMember& m : input.ready)
    if (contains(input.members, m.id) && !contains(ready, m.id)) {
      ready.push_back(m.id);
      steps += m.steps;
    }
  std::vector<PeerId> contributors;
  for (PeerId id : input.members)
    if (contains(ready, id)) contributors.push_back(id);
  if (contributors.size() == input.members.size()) return contributors;
  const bool lastRound = !input.stepsToEnd || steps >= *input.stepsToEnd;
  if (input.pastDeadline && !lastRound &&
      contributors.size() >= std::max<std::size_t>(input.quorum, 1))
    return contributors;
  return std::nullopt;
}

RoundQuorum::RoundQuorum(std::string who, QuorumSize size) : who_(std::move(who)), size_(size) {}

PeerId RoundQuorum::leader(const engine::PeerContext& ctx) const {
  const std::vector<PeerId>& members = ctx.members();
  if (leader_ != 0 && leaderView_ == members) return leader_;
  return members.empty() ? ctx.self() : members.front();
}

void RoundQuorum::ready(engine::PeerContext& ctx, std::uint64_t round, double steps) {
  if (round <= readySent_) return;
  readySent_ = round;
  const PeerId to = leader(ctx);
  if (to == ctx.self()) {
    if (round > forgotten_) ready_[round].push_back({ctx.self(), steps});
    return;
  }
  ctx.send(to,
           engine::Message{.kind = kKind, .step = round, .scalars = {steps}, .integers = {kReady}});
}

std::optional<std::vector<PeerId>> RoundQuorum::decided(engine::PeerContext& ctx,
                                                        std::uint64_t round) {
  poll(ctx);
  if (const auto it = decided_.find(round); it != decided_.end()) return it->second;
  return std::nullopt;
}

std::optional<std::vector<PeerId>> RoundQuorum::await(engine::PeerContext& ctx, std::uint64_t round,
                                                      engine::Clock::time_point closeAt,
                                                      std::optional<double> stepsToEnd,
                                                      engine::Clock::time_point deadline) {
  const std::vector<PeerId> members = ctx.members();
  for (;;) {
    if (std::optional<std::vector<PeerId>> decision = decided(ctx, round)) return decision;
    if (ctx.members() != members) return std::nullopt;
    const engine::Clock::time_point now = ctx.now();
    if (leader(ctx) == ctx.self()) {
      const std::vector<ReadyMember>& ready = ready_[round];
      std::optional<std::vector<PeerId>> contributors =
          closeRound({.members = members,
                      .ready = ready,
                      .quorum = size_.of(members.size()),
                      .pastDeadline = now >= closeAt,
                      .stepsToEnd = stepsToEnd});
      if (contributors) {
        engine::Message decision{.kind = kKind, .step = round, .integers = {kDecided}};
        decision.integers.insert(decision.integers.end(), contributors->begin(),
                                 contributors->end());
        std::vector<PeerId> others;
        for (PeerId id : members)
          if (id != ctx.self()) others.push_back(id);
        ctx.send(others, decision);
        if (contributors->size() < members.size()) ctx.metrics().add(who_ + ".quorum_rounds", 1);
        decided_[round] = *contributors;
        return contributors;
      }
    }
    if (now >= deadline) return std::nullopt;
    engine::Clock::time_point until = deadline;
    if (leader(ctx) == ctx.self() && now < closeAt) until = std::min(until, closeAt);
    until = std::min(until, now + kLook);
    ctx.inbox().wait(kKind, until);
  }
}

void RoundQuorum::completed(const engine::PeerContext& ctx, std::uint64_t round,
                            std::span<const double> steps) {
  const std::vector<PeerId>& members = ctx.members();
  std::size_t best = 0;
  for (std::size_t i = 1; i < std::min(steps.size(), members.size()); ++i)
    if (steps[i] > steps[best]) best = i;
  leader_ = members.empty() || steps.empty() ? 0 : members[best];
  leaderView_ = members;
  forget(round);
}

void RoundQuorum::failed(std::uint64_t round) {
  leader_ = 0;
  forget(round);
}

void RoundQuorum::forget(std::uint64_t round) {
  forgotten_ = std::max(forgotten_, round);
  ready_.erase(ready_.begin(), ready_.upper_bound(forgotten_));
  decided_.erase(decided_.begin(), decided_.upper_bound(forgotten_));
}

void RoundQuorum::poll(engine::PeerContext& ctx) {
  for (const engine::Incoming& m : ctx.inbox().drain(kKind)) absorb(ctx, m);
}

void RoundQuorum::absorb(engine::PeerContext& ctx, const engine::Incoming& message) {
  const std::vector<PeerId>& members = ctx.members();
  const std::uint64_t round = message.step;
  if (!contains(members, message.from) || round <= forgotten_) return;  // stale or not a member
  const auto refuse = [&](const char* why) {
    log::get("algorithms")
        ->warn("{}: refused a quorum message from peer {:016x} for round {}: {}", who_,
               message.from, round, why);
    ctx.metrics().add(who_ + ".refused", 1);
  };
  if (round > forgotten_ + kRoundsAhead) return refuse("too far ahead");
  if (message.integers.empty()) return refuse("no integers");
  if (message.integers[0] == kReady) {
    if (message.scalars.size() != 1 || !std::isfinite(message.scalars[0]) || message.scalars[0] < 0)
      return refuse("a ready message carries one step count >= 0");
    std::vector<ReadyMember>& ready = ready_[round];
    const bool known = std::any_of(ready.begin(), ready.end(),
                                   [&](const ReadyMember& m) { return m.id == message.from; });
    if (!known) ready.push_back({message.from, message.scalars[0]});  // at most one per member
    return;
  }
  if (message.integers[0] != kDecided) return refuse("neither ready nor a decision");
  const std::span<const std::uint64_t> ids = std::span(message.integers).subspan(1);
  if (ids.empty() || ids.size() > members.size()) return refuse("no contributors, or too many");
  for (std::uint64_t id : ids)
    if (!contains(members, id)) return refuse("a contributor is not a member");
  decided_.try_emplace(round, ids.begin(), ids.end());  // the first decision of a round stands
}

}  // namespace gossamer::algorithms
