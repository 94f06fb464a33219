#include "bench/uneven_figures.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gossamer::bench {
namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

}  // namespace

std::pair<RunSettings, Experiment> evenReference(RunSettings run, Experiment e) {
  const double fastest = *std::min_element(run.peerStepTimes.begin(), run.peerStepTimes.end());
  run.peerStepTimes.clear();
  run.stepTime = fastest;
  e.stepTime = fastest;
  return {std::move(run), std::move(e)};
}

std::string describeStepTimes(std::span<const double> stepTimes) {
  if (stepTimes.size() <= 8) return fmt::format("{} ms", fmt::join(stepTimes, ", "));
  const auto [fastest, slowest] = std::minmax_element(stepTimes.begin(), stepTimes.end());
  return fmt::format("{} step times, {} to {} ms", stepTimes.size(), *fastest, *slowest);
}

std::string describeUneven(const UnevenFigures& figures, std::span<const double> stepTimes,
                           const char* seconds) {
  return fmt::format(
      "uneven peers ({}): time_vs_ideal {:.3f} (the even reference at {} ms reached the target "
      "at {:.1f} {}), min_fast_peer_utilization {:.3f}",
      describeStepTimes(stepTimes), figures.timeVsIdeal,
      *std::min_element(stepTimes.begin(), stepTimes.end()), figures.referenceTimeToTarget, seconds,
      figures.minFastPeerUtilization);
}

double peerStepTime(std::span<const double> stepTimes, std::size_t peer) {
  return stepTimes.empty() ? kNone : stepTimes[peer % stepTimes.size()];
}

double timeVsIdeal(double timeToTarget, double referenceTimeToTarget,
                   std::span<const double> stepTimes, std::size_t peers) {
  if (stepTimes.empty() || peers == 0 || !std::isfinite(timeToTarget) ||
      !std::isfinite(referenceTimeToTarget) || referenceTimeToTarget <= 0)
    return kNone;
  const double fastest = *std::min_element(stepTimes.begin(), stepTimes.end());
  double throughput = 0;  // steps per millisecond, the cluster's
  for (std::size_t i = 0; i < peers; ++i) throughput += 1.0 / peerStepTime(stepTimes, i);
  const double ideal = referenceTimeToTarget * (static_cast<double>(peers) / fastest) / throughput;
  return timeToTarget / ideal;
}

double minFastPeerUtilization(std::span<const double> stepTimes,
                              std::span<const double> waitFractions) {
  if (stepTimes.empty() || waitFractions.empty()) return kNone;
  const double fastest = *std::min_element(stepTimes.begin(), stepTimes.end());
  double least = kNone;
  for (std::size_t i = 0; i < waitFractions.size(); ++i) {
    if (peerStepTime(stepTimes, i) != fastest) continue;
    const double utilization = 1.0 - waitFractions[i];
    least = std::isnan(least) ? utilization : std::min(least, utilization);
  }
  return least;
}

}  // namespace gossamer::bench
