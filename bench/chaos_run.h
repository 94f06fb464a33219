// One run of `gossamer-bench chaos` (chaos_bench.cc): its options, what it yields, and the two
// ways to run it: peers as threads of this process (chaos_threads.cc) or as gossamer-peer
// processes (chaos_processes.cc). Both carry out the same schedule (chaos_schedule.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/chaos_schedule.h"
#include "engine/invariants.h"
#include "engine/registry.h"
#include "net/shaped/profile.h"

namespace gossamer::bench {

struct ChaosOptions {
  CommonOptions common;
  std::uint64_t seed = 1;
  double minutes = 2;
  std::size_t peers = 8;
  std::string algorithm = "gosgd";
  std::string dataset = "fashion-mnist";
  std::size_t trainSamples = 0;
  std::size_t hidden = 64;
  double stepMs = 20;  // every step takes at least this long: the run lasts `minutes`
  double lr = 0.05;
  double faultsPerMinute = 6;
  std::size_t faults = 0;                 // > 0: exactly this many, instead of faultsPerMinute
  std::vector<std::string> kinds;         // empty: every kind the mode supports
  engine::sim::StragglerShape straggler;  // --straggler-factor, --straggler-seconds
  bool baseline = true;
  double loss = 0;  // on every link, for the whole faulty run (threads only)
  net::shaped::LossMode lossMode = net::shaped::LossMode::stream;
  bool processes = false;  // every peer a gossamer-peer process (--processes)
  bool planOnly = false;   // print the schedule of the seed and stop (--plan-only)
  std::string peerBinary;  // empty: the gossamer-peer beside this gossamer-bench
};

struct ChaosRunResult {
  double accuracy = std::nan("");  // the final consensus model's on the test set
  // Per kill: seconds until the survivors' slowest peer steps at >= 90% of its rate in the 2 s
  // before the kill again (over a 0.5 s window); negative: never within the run.
  std::vector<double> resumeSeconds;
  std::vector<std::string> executed;  // the schedule as it ran, with its targets
  std::vector<std::string> violations;
  std::size_t survivors = 0;
  double wallSeconds = 0;
  // Processes only: those still running at the run's deadline (SIGKILLed, each a violation), and
  // the latest exit of a survivor after the cluster's last step (NaN: not measured).
  std::size_t hangs = 0;
  double maxExitAfterLastStepSeconds = std::nan("");
};

// Peers as threads over the in-process transport, shaped by `loss` on every link (0: none).
// Checkpoints go to `checkpoints`.
ChaosRunResult runThreads(const ChaosOptions& o, const engine::Registry& registry,
                          std::shared_ptr<const engine::DatasetPair> data, std::uint64_t totalSteps,
                          const std::filesystem::path& checkpoints, double loss,
                          const std::vector<ChaosFault>& schedule);

// Peers as gossamer-peer processes (`peerBinary`) on 127.0.0.1 with TLS; the secret, logs,
// metrics and checkpoints go to `scratch`. Only the kinds of supportedKinds(true). The
// algorithm's `invariants` are checked over the survivors' --json metrics.
ChaosRunResult runProcesses(const ChaosOptions& o, const std::filesystem::path& peerBinary,
                            std::uint64_t totalSteps, const std::filesystem::path& scratch,
                            const std::vector<ChaosFault>& schedule,
                            const engine::Invariants& invariants);

// A kill leaves at least half the starting peers (and 2) live; below that it is skipped.
inline bool killAllowed(std::size_t live, std::size_t startingPeers) {
  return live > std::max<std::size_t>(2, startingPeers / 2);
}

// A join adds a peer while the run has had fewer than twice its starting peers.
inline bool joinAllowed(std::size_t peersSoFar, std::size_t startingPeers) {
  return peersSoFar < 2 * startingPeers;
}

// The cluster as a fault finds it, for the rules both runs share.
struct FaultScene {
  std::size_t live = 0;           // peers running now
  std::size_t started = 0;        // peers started so far (every index ever used)
  std::size_t pendingJoins = 0;   // joins scheduled and still to come (kill-join's)
  bool anyKilled = false;         // a killed peer waits for a restart
  std::size_t startingPeers = 0;  // --peers
};

// The executed-schedule line of `f` when the rules skip it (no live peer; a kill that would leave
// too few; a join past twice the starting peers; a restart with no killed peer), else nullopt.
inline std::optional<std::string> skipped(const ChaosFault& f, const FaultScene& s) {
  const bool kills = f.kind == ChaosKind::kill || f.kind == ChaosKind::killJoin;
  const bool joins = f.kind == ChaosKind::join || f.kind == ChaosKind::killJoin;
  const bool restarts = f.kind == ChaosKind::restart || f.kind == ChaosKind::restartFresh;
  if (s.live == 0) return fmt::format("{}: skipped (no live peer)", label(f.kind));
  if (kills && !killAllowed(s.live, s.startingPeers))
    return fmt::format("{}: skipped (only {} live)", label(f.kind), s.live);
  if (joins && !joinAllowed(s.started + s.pendingJoins, s.startingPeers))
    return fmt::format("{}: skipped ({} peers so far)", label(f.kind), s.started);
  if (restarts && !s.anyKilled) return fmt::format("{}: skipped (no killed peer)", label(f.kind));
  return std::nullopt;
}

// ChaosRunResult::resumeSeconds of a kill at `killedAt`, from the (t, slowest live peer's step)
// samples of the run, in time order.
double resumeAfter(const std::vector<std::pair<double, std::uint64_t>>& progress, double killedAt);

}  // namespace gossamer::bench
