#include "algorithms/network_fit.h"

#include <algorithm>
#include <cmath>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

std::uint64_t ceilSteps(double seconds, double stepSeconds) {
  if (!(seconds > 0)) return 0;
  const double steps = std::ceil(seconds / stepSeconds - 1e-9);
  return steps >= 1e12 ? std::uint64_t{1'000'000'000'000} : static_cast<std::uint64_t>(steps);
}

}  // namespace

std::optional<NetworkFacts> NetworkFacts::from(std::span<const float> stepSeconds,
                                               std::span<const float> roundTrips,
                                               std::span<const float> bandwidths) {
  const std::size_t n = stepSeconds.size();
  GOSSAMER_ENFORCE(roundTrips.size() == n * n && bandwidths.size() == n * n,
                   "network facts: {} members need {} x {} round trips and bandwidths", n, n, n);
  if (n == 0) return std::nullopt;
  NetworkFacts facts;
  facts.n_ = n;
  for (const float s : stepSeconds) {
    if (!(s > 0) || !std::isfinite(s)) return std::nullopt;  // a member not measured yet
    facts.slowestStep_ = std::max(facts.slowestStep_, static_cast<double>(s));
    facts.meanStep_ += static_cast<double>(s) / static_cast<double>(n);
  }
  facts.latency_.assign(n * n, 0.0);
  facts.bandwidth_.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double there = roundTrips[i * n + j], back = roundTrips[j * n + i];
      if (there < 0 && back < 0) return std::nullopt;  // measured by neither
      facts.latency_[i * n + j] = std::max(there, back) / 2;
      // As i measured it; else as j measured the way back.
      const double mine = bandwidths[i * n + j], theirs = bandwidths[j * n + i];
      facts.bandwidth_[i * n + j] = there >= 0 ? std::max(mine, 0.0) : std::max(theirs, 0.0);
    }
  }
  return facts;
}

double NetworkFacts::maxLatencySeconds() const {
  return latency_.empty() ? 0.0 : *std::max_element(latency_.begin(), latency_.end());
}

double NetworkFacts::wireSeconds(Exchange kind, double bytes) const {
  if (n_ < 2) return 0;
  // Each link of a direct or ring all-reduce carries 1/n of the bytes a phase (a hop); a master's
  // links carry the whole model.
  const double perLink = kind == Exchange::kMaster ? bytes : bytes / static_cast<double>(n_);
  double slowest = 0;
  for (const double bandwidth : bandwidth_)
    if (bandwidth > 0) slowest = std::max(slowest, perLink / bandwidth);
  const double hops = kind == Exchange::kRing ? 2.0 * static_cast<double>(n_ - 1) : 2.0;
  return slowdown_ * hops * slowest;
}

void NetworkFacts::calibrate(Exchange kind, double bytes, double measuredSeconds) {
  slowdown_ = 1;
  const double modelled = exchangeSeconds(kind, bytes);
  if (!(modelled > 0) || !std::isfinite(measuredSeconds)) return;
  const double ratio = measuredSeconds / modelled;
  if (ratio > kCalibrationDeadBand) slowdown_ = std::min(ratio, kMaxSlowdown);
}

double NetworkFacts::exchangeSeconds(Exchange kind, double bytes) const {
  if (n_ < 2) return 0;
  const double perLink = kind == Exchange::kMaster ? bytes : bytes / static_cast<double>(n_);
  double slowest = 0;  // the slowest pair's latency + transfer
  for (std::size_t k = 0; k < latency_.size(); ++k) {
    if (k % (n_ + 1) == 0) continue;  // i == j
    const double wire = bandwidth_[k] > 0 ? perLink / bandwidth_[k] : 0.0;
    slowest = std::max(slowest, latency_[k] + wire);
  }
  const double hops = kind == Exchange::kRing ? 2.0 * static_cast<double>(n_ - 1) : 2.0;
  return slowdown_ * hops * slowest;
}

double blockingRoundSeconds(double exchangeSeconds) {
  return std::max(exchangeSeconds, 0.0) * (1 - kBlockingShare) / kBlockingShare;
}

std::uint64_t blockingRoundSteps(const NetworkFacts& facts, Exchange kind, double modelBytes,
                                 std::uint64_t low, std::uint64_t high) {
  const double round = blockingRoundSeconds(facts.exchangeSeconds(kind, modelBytes));
  return std::clamp(ceilSteps(round, facts.slowestStepSeconds()), low, high);
}

DtsChoice chooseDts(const NetworkFacts& facts, double gradientBytes, double windowBytes,
                    std::optional<std::uint64_t> fixedDelay,
                    std::optional<std::uint64_t> fixedPeriod) {
  const double s = facts.slowestStepSeconds();
  DtsChoice choice;
  // p: the fewest steps whose window's bytes the link carries within kLinkShare of their time.
  if (fixedPeriod) {
    choice.period = *fixedPeriod;
  } else if (facts.wireSeconds(Exchange::kDirect, gradientBytes) > kLinkShare * s) {
    choice.period = std::clamp<std::uint64_t>(
        ceilSteps(facts.wireSeconds(Exchange::kDirect, windowBytes), kLinkShare * s), 2, 1024);
  }
  if (fixedDelay) {
    choice.delay = *fixedDelay;
    if (!fixedPeriod && choice.delay > 0) {
      std::uint64_t p = std::min(choice.period, choice.delay);
      while (choice.delay % p != 0) ++p;
      choice.period = p;
    }
    return choice;
  }
  // t: the whole windows that cover one window's exchange, latency included (at least one).
  const double bytes = choice.period == 1 ? gradientBytes : windowBytes;
  const std::uint64_t windows = ceilSteps(facts.exchangeSeconds(Exchange::kDirect, bytes),
                                          static_cast<double>(choice.period) * s);
  choice.delay = choice.period * std::clamp<std::uint64_t>(windows, 1, 64);
  return choice;
}

StreamingChoice chooseStreaming(const NetworkFacts& facts, double modelBytes, std::uint64_t h,
                                std::optional<std::uint64_t> fixedFragments,
                                std::optional<std::uint64_t> fixedTau) {
  const double s = facts.slowestStepSeconds();
  std::optional<StreamingChoice> best;
  const std::uint64_t first = fixedFragments.value_or(1);
  const std::uint64_t last = fixedFragments.value_or(std::min(h, kMaxFragments));
  for (std::uint64_t f = first; f <= last; ++f) {
    const double fragment = modelBytes / static_cast<double>(f);
    const std::uint64_t needed = std::max<std::uint64_t>(
        ceilSteps(facts.exchangeSeconds(Exchange::kDirect, fragment), s), 1);
    if (fixedTau && needed > std::max<std::uint64_t>(*fixedTau, 1)) continue;  // not covered
    const std::uint64_t tau = fixedTau.value_or(needed);
    if (tau * f >= h) continue;  // tau < h / F: a fragment's round merges before its next starts
    if (static_cast<double>(f) * facts.wireSeconds(Exchange::kDirect, fragment) >
        kLinkShare * static_cast<double>(h) * s)
      continue;  // the link would fall behind
    if (!best || tau < best->tau) best = StreamingChoice{.fragments = f, .tau = tau};
  }
  // Nothing hides the exchange: the fewest fragments, overlapped as far as they can be.
  const std::uint64_t f = fixedFragments.value_or(1);
  return best.value_or(StreamingChoice{.fragments = f, .tau = fixedTau.value_or(h / f - 1)});
}

double chooseGossipProbability(double stepSeconds, double modelWireSeconds) {
  if (!(modelWireSeconds > 0)) return 1.0;
  return std::clamp(kLinkShare * stepSeconds / modelWireSeconds, kMinGossip, 1.0);
}

std::string chosenMetric(const std::string& algorithm, const std::string& knob) {
  return "chosen." + algorithm + "." + knob;
}

}  // namespace gossamer::algorithms
