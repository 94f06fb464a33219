// What a peer does when a member comes or goes, by the phase it is in: the table "Members coming
// and going" of engine/runtime/README.md, as the log states it at each change of the view.
#pragma once

#include <string>

#include "engine/runtime/peer_state.h"
#include "net/membership/membership.h"

namespace gossamer::engine::runtime {

// A peer's phase, as far as membership changes are concerned: before the start decision, in the
// training loop, after it (the finish barrier, the algorithm's finish, the final pulls), and
// once it has released the others (it leaves).
enum class RunPhase { waiting, training, finishing, released };
const char* name(RunPhase phase);  // "waiting to start", "training", "finishing", "released"
RunPhase phaseOf(const LoopStatus& status);

// The rule that applies when this peer sees `kind` in `phase`: one clause for the log.
const char* ruleFor(net::membership::EventKind kind, RunPhase phase);

// The log line of one change of the view, naming the member, what happened, the phase and the
// rule, and the view's size after it.
std::string describeChange(PeerId self, const net::membership::Event& event, RunPhase phase,
                           std::size_t members);

}  // namespace gossamer::engine::runtime
