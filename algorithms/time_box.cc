#include "algorithms/time_box.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

using Seconds = std::chrono::duration<double>;

}  // namespace

RoundTime RoundTime::parse(const std::string& algorithm, const std::string& text) {
  if (text == "off" || text == "0") return {};
  if (text == "auto") return RoundTime{.seconds = 0, .automatic = true};
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  GOSSAMER_ENFORCE(
      !text.empty() && end == text.c_str() + text.size() && std::isfinite(seconds) && seconds > 0,
      "{}.round-seconds must be off, auto or a number of seconds > 0, not '{}'", algorithm, text);
  return RoundTime{.seconds = seconds, .automatic = false};
}

TimeBox::TimeBox(RoundTime time, std::uint64_t stepsPerRound)
    : time_(time), stepsPerRound_(std::max<std::uint64_t>(stepsPerRound, 1)) {
  roundSeconds_ = time_.automatic ? 0 : time_.seconds;
}

void TimeBox::begin(Clock::time_point now, double budget, std::optional<double> spent) {
  budget_ = budget;
  spent_ = spent;
  steps_ = 0;
  restart(now);
}

void TimeBox::restart(Clock::time_point now) {
  roundStart_ = now;
  roundSteps_ = 0;
}

bool TimeBox::due(Clock::time_point now) {
  ++roundSteps_;
  ++steps_;
  if (roundSeconds_ <= 0) return true;  // auto's first round: one step, to measure the speeds
  const double elapsed = Seconds(now - roundStart_).count();
  const double perStep = elapsed / static_cast<double>(roundSteps_);
  return elapsed + perStep > roundSeconds_;
}

void TimeBox::pack(kernels::Compute& compute, std::span<const float> x, std::span<float> out,
                   Clock::time_point now) const {
  GOSSAMER_ENFORCE(out.size() == x.size() + kTailFloats,
                   "a time-boxed round packs {} floats, not {}", x.size() + kTailFloats,
                   out.size());
  const float n = static_cast<float>(steps_);
  compute.weightedSum(out.first(x.size()), {{n, x}});
  const double seconds = Seconds(now - roundStart_).count();
  const float known = spent_ ? 1.0f : 0.0f;
  const std::array<float, kTailFloats> tail{
      n, static_cast<float>(seconds / static_cast<double>(std::max<std::uint64_t>(roundSteps_, 1))),
      known, known * static_cast<float>(budget_), known * static_cast<float>(spent_.value_or(0))};
  compute.upload(out.subspan(x.size()), std::span<const float>(tail));
}

RoundAgreement TimeBox::merged(kernels::Compute& compute, std::span<const float> mean,
                               std::size_t members, std::span<float> merged,
                               Clock::time_point now) {
  std::array<float, kTailFloats> tail{};
  compute.download(std::span<float>(tail), mean.subspan(merged.size()));
  const double steps = tail[0], perStep = tail[1], known = tail[2];
  // Every member took a step at least (n_i >= 1 whenever it joined the round), so steps > 0.
  compute.weightedSum(merged, {{static_cast<float>(1.0 / steps), mean.first(merged.size())}});
  RoundAgreement agreed;
  agreed.steps = std::round(steps * static_cast<double>(members));
  agreed.secondsPerStep = perStep;
  // Nobody knew (every member is new, as in a cluster whose first round all joiners ran): this
  // peer's own figures, which the next round's mean then agrees on.
  agreed.budget = known > 0 ? std::round(tail[3] / known) : budget_;
  agreed.spent = (known > 0 ? std::round(tail[4] / known) : spent_.value_or(0)) + agreed.steps;
  budget_ = agreed.budget;
  spent_ = agreed.spent;
  if (time_.automatic)
    roundSeconds_ = static_cast<double>(stepsPerRound_) * std::max(perStep, 1e-6);
  steps_ = 0;
  restart(now);
  return agreed;
}

void TimeBox::failed(Clock::time_point now) { restart(now); }

}  // namespace gossamer::algorithms
