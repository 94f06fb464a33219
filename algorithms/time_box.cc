#include "algorithms/time_box.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <utility>

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
      n,
      static_cast<float>(seconds / static_cast<double>(std::max<std::uint64_t>(roundSteps_, 1))),
      known,
      known * static_cast<float>(budget_),
      known * static_cast<float>(spent_.value_or(0)),
      static_cast<float>(budget_)};
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
  // Nobody knew (every member is new, as in a cluster whose first round all joiners ran): the
  // mean of the budgets they would set, nothing spent before; the same on every member too.
  agreed.budget = std::round(known > 0 ? tail[3] / known : tail[5]);
  agreed.spent = (known > 0 ? std::round(tail[4] / known) : 0.0) + agreed.steps;
  budget_ = agreed.budget;
  spent_ = agreed.spent;
  if (time_.automatic)
    roundSeconds_ = static_cast<double>(stepsPerRound_) * std::max(perStep, 1e-6);
  steps_ = 0;
  restart(now);
  return agreed;
}

void TimeBox::failed(Clock::time_point now) { restart(now); }

// ---- TimedRounds ------------------------------------------------------------------------------

TimedRounds::TimedRounds(std::string who, RoundTime time, std::uint64_t stepsPerRound)
    : who_(std::move(who)), box_(time, stepsPerRound) {}

void TimedRounds::start(engine::PeerContext& ctx) {
  if (started_) return;
  GOSSAMER_ENFORCE(!ctx.compression().enabled(),
                   "{}.round-seconds does not combine with --compress: the weighted rounds travel "
                   "uncompressed",
                   who_);
  // A peer alone may take all B steps, so that is its cap; the round that spends B ends the run.
  // From the run's planned steps, not totalSteps(): a member that started first has already
  // raised its end to B, and a peer that starts after it takes the cluster's count from it.
  const double budget =
      resumedBudget_.value_or(static_cast<double>(ctx.runSteps() * ctx.members().size()));
  std::optional<double> spent;
  if (!joined_) spent = resumedSpent_.value_or(0.0);
  box_.begin(ctx.now(), budget, spent);
  ctx.setTotalSteps(static_cast<std::uint64_t>(budget));
  started_ = true;
}

std::optional<RoundAgreement> TimedRounds::exchange(engine::PeerContext& ctx,
                                                    AsyncAllReduce& exchange, std::uint64_t& round,
                                                    std::span<const float> x,
                                                    std::span<float> merged) {
  exchange.poll(ctx);
  if (const std::uint64_t heard = exchange.latestHeard(); heard > round) {
    ctx.metrics().add(who_ + ".rounds_skipped", static_cast<double>(heard - round));
    round = heard;
  }
  std::shared_ptr<kernels::Buffer<float>> packed =
      exchange.buffer(ctx, x.size() + TimeBox::kTailFloats);
  box_.pack(ctx.compute(), x, packed->span(), ctx.now());
  exchange.start(ctx, round, std::move(packed));
  const RingOutcome outcome = exchange.wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome != RingOutcome::kComplete) {
    // Nothing agreed changes; this peer's steps count in the next complete round.
    exchange.release(ctx, round);
    box_.failed(ctx.now());
    ctx.metrics().add(who_ + ".fallbacks", 1);
    ctx.metrics().add(who_ + "." + ringOutcomeName(outcome), 1);
    return std::nullopt;
  }
  const RoundAgreement agreed =
      box_.merged(ctx.compute(), exchange.result(round), ctx.members().size(), merged, ctx.now());
  exchange.release(ctx, round);
  ctx.metrics().set(who_ + ".cluster_steps", agreed.spent);
  ctx.metrics().set(who_ + ".round_seconds", box_.roundSeconds());
  if (agreed.ended()) {
    ctx.setTotalSteps(ctx.step() + 1);  // this step (afterStep's) is the run's last
    endedByBudget_ = true;
  } else {
    // The agreed budget is every member's cap from now on, whatever this peer set at its start:
    // no member stops on its own before the round that spends it.
    ctx.setTotalSteps(static_cast<std::uint64_t>(agreed.budget));
  }
  return agreed;
}

void TimedRounds::save(engine::AlgorithmState& state) const {
  if (!started_) return;
  state.values["time_box_budget"] = box_.budget();
  if (box_.spent()) state.values["time_box_spent"] = *box_.spent();
}

void TimedRounds::load(const engine::AlgorithmState& state) {
  if (const auto it = state.values.find("time_box_budget"); it != state.values.end())
    resumedBudget_ = it->second;
  if (const auto it = state.values.find("time_box_spent"); it != state.values.end())
    resumedSpent_ = it->second;
}

engine::Invariants TimedRounds::invariants() const {
  engine::Invariants out;
  out.sameStepCount = false;
  out.rules.push_back({.name = "the survivors agree on the cluster steps spent",
                       .rule = engine::Invariant::Rule::agree,
                       .read = engine::metricReading(who_ + ".cluster_steps")});
  return out;
}

}  // namespace gossamer::algorithms
