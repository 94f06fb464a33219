// The figures of a run of uneven peers (peer-step-times) against what their speeds allow, for
// `simulate` and `convergence`:
//   time_vs_ideal = time to target / ideal time, where the ideal time is the samples the same
//     algorithm needed to reach the target on the same number of peers all at the fastest step
//     time (a reference run), divided by this cluster's total throughput:
//       ideal = t_ref x (N batch / s_min) / (sum_i batch / s_i)
//     so 1 means the uneven cluster turned every sample its peers could compute into progress as
//     well as an even cluster of fast peers does;
//   min_fast_peer_utilization = the least, over the peers at the fastest step time, of the
//     fraction of their time (training and finishing) spent computing rather than waiting.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench/convergence_config.h"

namespace gossamer::bench {

// An experiment's figures with peer-step-times (NaN without, or when it failed).
struct UnevenFigures {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  // The even reference run's time to target: the same experiment on peers all at the fastest step
  // time, without faults.
  double referenceTimeToTarget = kNone;
  double timeVsIdeal = kNone;
  double minFastPeerUtilization = kNone;
};

// The even reference of experiment `e` of `run` (which has peer-step-times): the same settings
// with every peer at the fastest step time. The caller runs it without faults.
std::pair<RunSettings, Experiment> evenReference(RunSettings run, Experiment e);

// "300, 300, 600, 1200 ms", or for more than 8 peers their range ("256 step times, 200 to
// 2950 ms").
std::string describeStepTimes(std::span<const double> stepTimes);

// One line for the console: the figures, the step times and the reference's time to target (in
// `seconds`: "s" or "virtual s").
std::string describeUneven(const UnevenFigures& figures, std::span<const double> stepTimes,
                           const char* seconds = "s");

// Peer i's step time (milliseconds) under peer-step-times `stepTimes` (in peer order, repeating).
double peerStepTime(std::span<const double> stepTimes, std::size_t peer);

// time_vs_ideal for `peers` peers of `stepTimes`, from the run's and the even reference run's
// times to target (NaN when either is).
double timeVsIdeal(double timeToTarget, double referenceTimeToTarget,
                   std::span<const double> stepTimes, std::size_t peers);

// min_fast_peer_utilization from each peer's waiting fraction (by peer index; NaN when empty).
double minFastPeerUtilization(std::span<const double> stepTimes,
                              std::span<const double> waitFractions);

}  // namespace gossamer::bench
