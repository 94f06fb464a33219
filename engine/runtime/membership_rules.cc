#include "engine/runtime/membership_rules.h"

#include <fmt/format.h>

namespace gossamer::engine::runtime {

using net::membership::EventKind;

namespace {

constexpr const char* kPhaseNames[] = {"waiting to start", "training", "finishing", "released"};

constexpr const char* kTooLate =
    "it came too late: it is told the cluster has trained all its steps and leaves (exit status "
    "4); nobody waits for it";
constexpr const char* kNotCounted = "it no longer counts toward --min-peers";

// The rules by event kind (joined, left, failed, rejoined: EventKind's order) and phase
// (RunPhase's order). Keep in step with the table in engine/runtime/README.md.
constexpr const char* kRules[4][4] = {
    {"it counts toward --min-peers and starts with the others",
     "it joins late, at the cluster's step with a member's model; the shards are split again at "
     "the next step",
     kTooLate, kTooLate},
    {kNotCounted,
     "it handed over what it held and left; the shards are split again at the next step",
     "the barriers and the final pulls stop waiting for it", "nothing to do"},
    {kNotCounted,
     "crashed or cut off: every wait for it ends now and the others go on without it; the shards "
     "are split again at the next step",
     "crashed or cut off: the barriers and the final pulls stop waiting for it", "nothing to do"},
    {"a new life of a member (a restart): it counts like a newcomer",
     "a new life of a member (a restart, or a partition that healed): it joins late at the "
     "cluster's step, or with --resume catches up from its checkpoint",
     kTooLate, kTooLate},
};
static_assert(static_cast<int>(EventKind::joined) == 0 && static_cast<int>(EventKind::left) == 1 &&
              static_cast<int>(EventKind::failed) == 2 &&
              static_cast<int>(EventKind::rejoined) == 3);

}  // namespace

const char* name(RunPhase phase) { return kPhaseNames[static_cast<std::size_t>(phase)]; }

RunPhase phaseOf(const LoopStatus& status) {
  if (status.released) return RunPhase::released;
  if (status.loopEnded) return RunPhase::finishing;
  if (status.training) return RunPhase::training;
  return RunPhase::waiting;
}

const char* ruleFor(EventKind kind, RunPhase phase) {
  return kRules[static_cast<std::size_t>(kind)][static_cast<std::size_t>(phase)];
}

std::string describeChange(PeerId self, const net::membership::Event& event, RunPhase phase,
                           std::size_t members) {
  if (event.member.id == self)
    return fmt::format("peer {:016x}: view epoch {}: this peer {} ({}); {} members", self,
                       event.epoch, net::membership::name(event.kind), name(phase), members);
  return fmt::format(
      "peer {:016x}: view epoch {}: {:016x} ({}) {} while this peer is {}: {}; {} "
      "members",
      self, event.epoch, event.member.id, event.member.address.str(),
      net::membership::name(event.kind), name(phase), ruleFor(event.kind, phase), members);
}

}  // namespace gossamer::engine::runtime
