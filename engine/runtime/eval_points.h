// Evaluation points: places in training that every peer passes (point 1, 2, ...), where each
// peer copies its model and notes its own figures as it passes; once every peer has passed a
// point, the consensus of its copies (their average) is evaluated, off the clock, and the point's
// time is the slowest peer's training wall time there. Two runs whose models go through the same
// states step by step then differ only by how long their steps took: time to a target is exact
// to the point, whatever the network, and the report states the resolution (the schedule).
//
// The schedule says where the points are: every N steps today. Nothing else reads steps: the
// board, the monitor of a local cluster, the simulator and the report see point numbers, each
// peer's sample carrying its own step, clock and counters. A point that is a round boundary of the
// algorithm or a number of cluster samples is another schedule, which peers of different speeds
// reach at different steps.
//
// Threads: a peer samples on its compute thread (its loop's off-clock hook); the board is
// thread-safe; whoever evaluates (the cluster's monitor, the simulator's scheduler) takes the
// complete points.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/algorithm.h"
#include "engine/runtime/consensus.h"
#include "engine/runtime/peer_state.h"
#include "engine/runtime/snapshots.h"

namespace gossamer::engine::runtime {

// Where the evaluation points are.
struct EvalSchedule {
  std::uint64_t everySteps = 0;  // a point after every this many steps; 0: none

  bool enabled() const { return everySteps > 0; }
  // The point a peer passes as it completes step `step`, if any: step N is point 1, 2N point 2.
  std::optional<std::uint64_t> pointAfter(std::uint64_t step) const;
  // "every 25 steps": the resolution of a time to a target read at the points.
  std::string describe() const;
};

// One peer's copy of its model and its figures as it passed a point.
struct PointSample {
  std::uint64_t point = 0;
  Snapshot model;               // the peer, its step and a host copy of its params
  StepFigures figures;          // its loop's clock, waits and compute at that step
  std::int64_t samples = 0;     // training samples it has taken so far
  std::uint64_t bytesSent = 0;  // algorithm traffic so far
};

// Called by a peer with each of its samples (compute thread).
using PointSink = std::function<void(PointSample)>;

// One point of a run's convergence curve.
struct EvalPoint {
  double wallSeconds = 0;     // training wall time: the slowest peer's (see the header comment)
  std::uint64_t minStep = 0;  // steps of the slowest and fastest peers
  std::uint64_t maxStep = 0;
  double meanStep = 0;
  std::int64_t samples = 0;     // training samples of all peers so far
  double bytesSentPerPeer = 0;  // algorithm traffic, mean over peers
  double commWaitFraction = 0;  // time waiting on others / training wall time, mean over peers
  double utilization = 0;       // time in compute / training wall time, mean over peers
  ConsensusResult consensus;
};

// The samples of the points, by point, until each is complete.
class EvalPointBoard {
 public:
  // Any thread. A second sample of the same peer for a point replaces the first (a peer
  // restarted from an earlier checkpoint passes the point again).
  void add(PointSample sample);
  // Whether `peer` will still pass the point at `step` (it trains and has not passed it yet):
  // a peer that died, left, or joined after it owes nothing.
  using Owes = std::function<bool(PeerId peer, std::uint64_t step)>;
  // The points, oldest first, that every one of `peers` has sampled or does not owe, removed from
  // the board; a point nobody sampled never is. A point is complete in order: a later one waits
  // for the earlier ones.
  std::vector<std::vector<PointSample>> takeComplete(std::span<const PeerId> peers,
                                                     const Owes& owes);
  // The points left incomplete (the run was stopped before every peer passed them).
  std::size_t pending() const;

 private:
  mutable std::mutex mutex_;  // leaf
  std::map<std::uint64_t, std::vector<PointSample>> points_;
};

// A complete point reduced to what its evaluation needs: its figures (the consensus' peers and
// distance included) and the average of its samples' models. Cheap to keep: one model, however
// many peers, so the evaluation can wait until training is over.
struct AveragedPoint {
  EvalPoint point;
  std::vector<float> model;
};
AveragedPoint averagePoint(std::vector<PointSample> samples);
// The point with its consensus evaluated: the average's accuracy and loss on `evalSamples` test
// samples (0: all). The peers' own accuracies are left at 0 (the final evaluation has them).
EvalPoint evaluateAveraged(AveragedPoint averaged, ConsensusEvaluator& evaluator,
                           std::size_t evalSamples);

}  // namespace gossamer::engine::runtime
