#include "engine/runtime/membership_rules.h"

#include <fmt/format.h>

namespace gossamer::engine::runtime {

using net::membership::EventKind;

const char* name(RunPhase phase) {
  switch (phase) {
    case RunPhase::waiting:
      return "waiting to start";
    case RunPhase::training:
      return "training";
    case RunPhase::finishing:
      return "finishing";
    case RunPhase::released:
      return "released";
  }
  return "?";
}

RunPhase phaseOf(const LoopStatus& status) {
  if (status.released) return RunPhase::released;
  if (status.loopEnded) return RunPhase::finishing;
  if (status.training) return RunPhase::training;
  return RunPhase::waiting;
}

const char* ruleFor(EventKind kind, RunPhase phase) {
  // Keep in step with the table in engine/runtime/README.md.
  switch (kind) {
    case EventKind::joined:
      switch (phase) {
        case RunPhase::waiting:
          return "it counts toward --min-peers and starts with the others";
        case RunPhase::training:
          return "it joins late, at the cluster's step with a member's model; the shards are "
                 "split again at the next step";
        case RunPhase::finishing:
        case RunPhase::released:
          return "it came too late: it is told the cluster has trained all its steps and leaves "
                 "(exit status 4); nobody waits for it";
      }
      break;
    case EventKind::rejoined:
      switch (phase) {
        case RunPhase::waiting:
          return "a new life of a member (a restart): it counts like a newcomer";
        case RunPhase::training:
          return "a new life of a member (a restart, or a partition that healed): it joins late "
                 "at the cluster's step, or with --resume catches up from its checkpoint";
        case RunPhase::finishing:
        case RunPhase::released:
          return "a new life of a member that came too late: it is told the cluster has trained "
                 "all its steps and leaves (exit status 4)";
      }
      break;
    case EventKind::left:
      switch (phase) {
        case RunPhase::waiting:
          return "it no longer counts toward --min-peers";
        case RunPhase::training:
          return "it handed over what it held and left; the shards are split again at the next "
                 "step";
        case RunPhase::finishing:
          return "the barriers and the final pulls stop waiting for it";
        case RunPhase::released:
          return "nothing to do";
      }
      break;
    case EventKind::failed:
      switch (phase) {
        case RunPhase::waiting:
          return "it no longer counts toward --min-peers";
        case RunPhase::training:
          return "crashed or cut off: every wait for it ends now and the others go on without "
                 "it; the shards are split again at the next step";
        case RunPhase::finishing:
          return "crashed or cut off: the barriers and the final pulls stop waiting for it";
        case RunPhase::released:
          return "nothing to do";
      }
      break;
  }
  return "?";
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
