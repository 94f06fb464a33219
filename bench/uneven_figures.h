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
#include <span>
#include <vector>

namespace gossamer::bench {

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
