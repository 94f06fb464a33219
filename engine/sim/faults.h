// The fault schedules of simulated (and chaos) runs: the kinds of the chaos benchmark
// (bench/chaos_bench.cc), drawn from a seed, named and described (World::applyFault in world.cc
// carries them out), and the invariants a run under faults must keep, which both check.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/invariants.h"
#include "engine/runtime/snapshots.h"

namespace gossamer::engine::sim {

// The fault kinds of the chaos benchmark (bench/chaos_bench.cc), and two more of the simulator's:
// a graceful leave (SIGTERM) and a restart without --resume (a new life at the same address that
// has no checkpoint, which the others must take for a newcomer).
enum class FaultKind { kill, restart, join, partition, loss, straggler, leave, restartFresh };
// Every kind, in the order above.
inline constexpr FaultKind kFaultKinds[] = {
    FaultKind::kill, FaultKind::restart,   FaultKind::join,  FaultKind::partition,
    FaultKind::loss, FaultKind::straggler, FaultKind::leave, FaultKind::restartFresh};
// "kill", "restart", "join", "partition", "loss", "straggler", "leave", "restart-fresh"
const char* name(FaultKind kind);
std::optional<FaultKind> faultKindNamed(std::string_view text);
// The names of kFaultKinds, in order (what a --fault-kinds flag takes).
std::vector<std::string> faultKindNames();

struct Fault {
  double at = 0;  // virtual seconds after training starts
  FaultKind kind = FaultKind::kill;
  double seconds = 0;      // partition, loss, straggler: how long
  double magnitude = 0;    // loss: the added loss rate; straggler: the step-time factor
  std::uint64_t pick = 0;  // the target: pick % (peers in training at `at`), in id order
};

// A straggler's slow-down and how long it lasts, when given (--straggler-factor,
// --straggler-seconds): a long slow phase rather than the drawn blip. 0: drawn.
struct StragglerShape {
  double factor = 0;   // the step-time factor (at least 1)
  double seconds = 0;  // how long
};

// A fault schedule drawn as the chaos benchmark draws its own: `count` faults at uniformly random
// times in [0.1, 0.85] x windowSeconds, kinds weighted kill 0.25, restart 0.2, join 0.1,
// partition 0.15, loss 0.15, straggler 0.15, leave 0.1, restart-fresh 0.1 (only `kinds` when
// not empty), lasting 2-6 s, loss rates 0.1-0.3, slow-downs 3-5x. The same seed gives the same
// schedule; `straggler` replaces the drawn factor and length of the stragglers (the rest of the
// schedule stays as drawn).
std::vector<Fault> drawFaults(std::uint64_t seed, std::size_t count, double windowSeconds,
                              const std::vector<FaultKind>& kinds = {},
                              StragglerShape straggler = {});
std::string describe(const Fault& fault);

// A peer that was not killed, as the invariants see it at the end of a run.
using Survivor = PeerOutcome;

// The invariants of a run under faults, as violations (empty: all kept): the algorithm's
// declared `invariants` over the survivors (engine/invariants.h: no error, every step, its rules),
// and every final model finite.
std::vector<std::string> survivorViolations(std::span<const Survivor> survivors,
                                            std::span<const runtime::Snapshot> finals,
                                            std::uint64_t totalSteps, const Invariants& invariants);

}  // namespace gossamer::engine::sim
