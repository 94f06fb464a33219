#include "algorithms/network_survey.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>

#include "algorithms/ring_allreduce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

double coarse(double value, double grid) { return std::round(value / grid) * grid; }
double twoDigits(double value) {
  if (!(value > 0) || !std::isfinite(value)) return 0;
  const double grid = std::pow(10.0, std::floor(std::log10(value)) - 1);
  return coarse(value, grid);
}

}  // namespace

std::optional<NetworkFacts> Survey::facts() const {
  const std::size_t n = members.size();
  std::vector<float> roundTrips(n * n), bandwidths(n * n);
  for (std::size_t k = 0; k < n * n; ++k) {
    roundTrips[k] = paths[2 * k];
    bandwidths[k] = paths[2 * k + 1];
  }
  return NetworkFacts::from(stepSeconds, roundTrips, bandwidths);
}

bool surveys(std::uint64_t step, std::uint64_t every) {
  if (step == 0) return false;
  if (step % every == 0) return true;
  return step >= 8 && step < every && std::has_single_bit(step);
}

std::optional<Survey> surveyNetwork(engine::PeerContext& ctx, std::uint32_t kind,
                                    std::uint64_t step, const std::string& who, double stepSeconds,
                                    double exchangeSeconds) {
  Survey survey;
  survey.members = ctx.members();
  const std::size_t n = survey.members.size();
  const auto rank = static_cast<std::size_t>(
      std::find(survey.members.begin(), survey.members.end(), ctx.self()) - survey.members.begin());
  // [paths (n x n x 2), step seconds (n), exchange seconds (n)]: one-hot rows, summed.
  std::vector<float> rows(2 * n * n + 2 * n, 0.0f);
  const std::map<engine::PeerId, engine::PathEstimate> paths = ctx.measuredPaths();
  for (std::size_t j = 0; j < n; ++j) {
    if (j == rank) continue;
    const auto it = paths.find(survey.members[j]);
    float* entry = &rows[2 * (rank * n + j)];
    if (it == paths.end()) {
      entry[0] = -1.0f;  // not measured
      continue;
    }
    entry[0] = static_cast<float>(coarse(it->second.roundTripSeconds, 1e-3));
    entry[1] = static_cast<float>(twoDigits(it->second.bytesPerSecond));
  }
  rows[2 * n * n + rank] = static_cast<float>(stepSeconds);
  rows[2 * n * n + n + rank] = static_cast<float>(exchangeSeconds);
  std::vector<float> summed(rows.size());
  const RingOutcome outcome = ringAllReduce(ctx, rows, summed,
                                            {.kind = kind,
                                             .step = step,
                                             .op = ReduceOp::kSum,
                                             .pipeline = 1,
                                             .who = who,
                                             .discardEarlier = false});
  ctx.metrics().add(who + ".surveys", 1);
  if (outcome != RingOutcome::kComplete) return std::nullopt;
  const auto at = [&](std::size_t k) { return summed.begin() + static_cast<std::ptrdiff_t>(k); };
  survey.paths.assign(at(0), at(2 * n * n));
  survey.stepSeconds.assign(at(2 * n * n), at(2 * n * n + n));
  survey.exchangeSeconds.assign(at(2 * n * n + n), summed.end());
  return survey;
}

double Survey::measuredExchangeSeconds() const {
  double sum = 0;
  for (const float seconds : exchangeSeconds) {
    if (!(seconds > 0) || !std::isfinite(seconds)) return 0;  // a member measured none
    sum += seconds;
  }
  return exchangeSeconds.empty() ? 0.0 : sum / static_cast<double>(exchangeSeconds.size());
}

double ownExchangeSeconds(engine::PeerContext& ctx, Exchange kind, double bytes) {
  const double n = static_cast<double>(ctx.members().size());
  if (n < 2) return 0;
  const double perLink = kind == Exchange::kMaster ? bytes : bytes / n;
  double slowest = 0;
  for (const auto& [peer, path] : ctx.measuredPaths()) {
    if (std::find(ctx.members().begin(), ctx.members().end(), peer) == ctx.members().end())
      continue;
    const double wire = path.bytesPerSecond > 0 && std::isfinite(path.bytesPerSecond)
                            ? perLink / path.bytesPerSecond
                            : 0.0;
    slowest = std::max(slowest, path.roundTripSeconds / 2 + wire);
  }
  const double hops = kind == Exchange::kRing ? 2 * (n - 1) : 2.0;
  return hops * slowest;
}

void StepClock::tick(engine::Clock::time_point now) {
  if (last_) {
    const double seconds = std::chrono::duration<double>(now - *last_).count();
    if (intervals_.size() < kIntervals) {
      intervals_.push_back(seconds);
    } else {
      intervals_[next_] = seconds;
      next_ = (next_ + 1) % kIntervals;
    }
  }
  last_ = now;
}

double StepClock::medianSeconds() const {
  if (intervals_.empty()) return 0;
  std::vector<double> sorted = intervals_;
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  return *middle;
}

double ownStepSeconds(engine::PeerContext& ctx, const StepClock& clock) {
  const std::optional<engine::PeerSpeed> speed = ctx.speedOf(ctx.self());
  return speed && speed->stepSeconds > 0 ? speed->stepSeconds : clock.medianSeconds();
}

std::optional<NetworkFacts> ViewFit::step(engine::PeerContext& ctx, std::uint64_t done,
                                          double exchangeSeconds) {
  clock_.tick(ctx.now());
  // Once the view is fitted, only the multiples of kSurveyEvery: every member fitted at the same
  // survey, so all skip the early ones alike (a survey of a ring costs 2 (n - 1) latencies).
  if (!surveys(done, kSurveyEvery) || (fitted_ && done % kSurveyEvery != 0)) return std::nullopt;
  last_ = surveyNetwork(ctx, kKind, done, who_, ownStepSeconds(ctx, clock_), exchangeSeconds);
  surveyed_ = true;
  surveyStep_ = done;
  clock_.restart(ctx.now());  // the survey's wait is no step's time
  if (fitted_ || !last_) return std::nullopt;
  std::optional<NetworkFacts> facts = last_->facts();
  fitted_ = facts.has_value();
  return facts;
}

void reportChosen(engine::PeerContext& ctx, const std::string& who, const std::string& knob,
                  double value, const std::string& why) {
  ctx.metrics().set(chosenMetric(who, knob), value);
  log::get("algorithms")->info("{}: {} = {} (auto: {})", who, knob, value, why);
}

}  // namespace gossamer::algorithms
