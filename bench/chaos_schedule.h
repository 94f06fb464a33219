// The fault schedule of `gossamer-bench chaos`: the simulator's fault kinds (engine/sim/faults.h,
// drawn as the simulator draws them) and three the simulator does not model, drawn from the same
// seed by a second generator, so that a schedule of the old kinds alone is the one it always was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sim/faults.h"

namespace gossamer::bench {

enum class ChaosKind {
  kill,
  restart,  // a killed peer again, from its checkpoint (--resume)
  join,
  partition,
  loss,
  straggler,
  restartFresh,   // a killed peer again at its address and id, without --resume: it joins late
  joinFinishing,  // a new peer that comes when the cluster has trained all its steps
  killJoin,       // kill -9 of one peer and the join of a new one within the same second
};

// "kill", ..., "restart-fresh", "join-finishing", "kill-join": the names --kinds takes.
const char* name(ChaosKind kind);
std::optional<ChaosKind> chaosKindNamed(std::string_view text);
// Every name, in enum order.
std::vector<std::string> chaosKindNames();
// What a fault is called in the executed schedule: "kill -9", "restart without resume", ...
const char* label(ChaosKind kind);

// The kinds a cluster of threads (in-process transport, shaped links) carries out: all. Peers
// that are processes talk real TCP, with no shaped transport to partition, lose or slow down:
// only the kinds that start and kill processes.
std::vector<ChaosKind> supportedKinds(bool processes);

struct ChaosFault {
  double at = 0;  // seconds after training starts (joinFinishing: see drawChaosSchedule)
  ChaosKind kind = ChaosKind::kill;
  // partition, loss, straggler: how long; killJoin: how long after the kill the join comes (< 1)
  double seconds = 0;
  double magnitude = 0;    // loss: the added loss rate; straggler: the step-time factor
  std::uint64_t pick = 0;  // the target: pick % (live peers at `at`), in index order
};

// `count` faults of `kinds` (not empty) over a run of `runSeconds`, by time. Each fault is one of
// the simulator's kinds or one of the new ones, with the weights kill 0.25, restart 0.2, join 0.1,
// partition 0.15, loss 0.15, straggler 0.15, restart-fresh 0.15, kill-join 0.1, join-finishing
// 0.05 (those of `kinds`); the simulator's are then drawn by engine::sim::drawFaults(seed) and the
// new ones by a generator seeded from seed ^ a constant. restart-fresh and kill-join fall in
// [0.1, 0.85] x runSeconds like the simulator's; join-finishing in the last 2% of the run, but it
// is carried out only once a live peer has reached the run's last step (or is about to: a
// process's start-up takes time), during the cluster's finish. The same seed and arguments give
// the same schedule. `straggler` shapes the stragglers (engine::sim::drawFaults).
std::vector<ChaosFault> drawChaosSchedule(std::uint64_t seed, std::size_t count, double runSeconds,
                                          const std::vector<ChaosKind>& kinds,
                                          engine::sim::StragglerShape straggler = {});

}  // namespace gossamer::bench
