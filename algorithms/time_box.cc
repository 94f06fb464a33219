#include "algorithms/time_box.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "algorithms/network_fit.h"
#include "algorithms/network_survey.h"
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
    : time_(time), stepsPerRound_(stepsPerRound) {
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
  lastStep_ = now;
  previousStep_ = now;
}

void TimeBox::count(Clock::time_point now) {
  ++roundSteps_;
  ++steps_;
  stepSeconds_ += Seconds(now - lastStep_).count();
  ++timedSteps_;
  previousStep_ = lastStep_;
  lastStep_ = now;
}

bool TimeBox::dueAfterNext(Clock::time_point now) const {
  if (roundSeconds_ <= 0 || roundSteps_ == 0) return false;
  const double elapsed = Seconds(now - roundStart_).count();
  const double perStep = elapsed / static_cast<double>(roundSteps_);
  return elapsed + 2 * perStep > roundSeconds_;
}

TimeBox::Clock::time_point TimeBox::closeAt(double grace) const {
  if (roundSeconds_ <= 0) return roundStart_;  // auto's first round: as soon as a quorum is ready
  return roundStart_ +
         std::chrono::duration_cast<Clock::duration>(Seconds(roundSeconds_ * (1 + grace)));
}

bool TimeBox::due(Clock::time_point now) {
  count(now);
  if (roundSeconds_ <= 0) return true;  // auto's first round: one step, to measure the speeds
  const double elapsed = Seconds(now - roundStart_).count();
  const double perStep = elapsed / static_cast<double>(roundSteps_);
  return elapsed + perStep > roundSeconds_;
}

void TimeBox::pack(kernels::Compute& compute, std::span<const float> x, std::span<float> out,
                   double exchangeSeconds) {
  GOSSAMER_ENFORCE(out.size() == x.size() + kTailFloats,
                   "a time-boxed round packs {} floats, not {}", x.size() + kTailFloats,
                   out.size());
  packed_ = steps_;
  const float n = static_cast<float>(steps_);
  compute.weightedSum(out.first(x.size()), {{n, x}});
  const float known = spent_ ? 1.0f : 0.0f;
  const std::array<float, kTailFloats> tail{
      n,
      static_cast<float>(stepSeconds_ /
                         static_cast<double>(std::max<std::uint64_t>(timedSteps_, 1))),
      known,
      known * static_cast<float>(budget_),
      known * static_cast<float>(spent_.value_or(0)),
      static_cast<float>(budget_),
      static_cast<float>(exchangeSeconds)};
  compute.upload(out.subspan(x.size()), std::span<const float>(tail));
  stepSeconds_ = 0;
  timedSteps_ = 0;
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
  if (fitsExchange()) {
    const double exchange = tail[6];
    roundSeconds_ = exchange > 0 ? std::max(blockingRoundSeconds(exchange), std::max(perStep, 1e-6))
                                 : static_cast<double>(kProvisionalSteps) * std::max(perStep, 1e-6);
  } else if (time_.automatic) {
    roundSeconds_ =
        static_cast<double>(std::max<std::uint64_t>(stepsPerRound_, 1)) * std::max(perStep, 1e-6);
  }
  steps_ -= packed_;
  packed_ = 0;
  restart(now);
  return agreed;
}

void TimeBox::failed(Clock::time_point now) {
  packed_ = 0;
  restart(now);
}

// ---- FragmentClock -----------------------------------------------------------------------------

bool FragmentClock::due(std::size_t fragment, Clock::time_point now, double stepSeconds,
                        double roundSeconds) const {
  const double at = (static_cast<double>(starts_.at(fragment)) +
                     static_cast<double>(fragment) / static_cast<double>(starts_.size())) *
                    roundSeconds;
  return Seconds(now - anchor_).count() + stepSeconds > at;
}

// ---- TimedRounds ------------------------------------------------------------------------------

TimedRounds::TimedRounds(std::string who, RoundTime time, std::uint64_t stepsPerRound,
                         std::size_t fragments, QuorumSize quorum)
    : who_(std::move(who)),
      quorum_(who_, quorum),
      boxes_(std::max<std::size_t>(fragments, 1), TimeBox(time, stepsPerRound)) {
  GOSSAMER_ENFORCE(!quorum.enabled() || boxes_.size() == 1,
                   "{}: a quorum needs rounds of the whole model, not of fragments", who_);
}

bool TimedRounds::due(engine::PeerContext& ctx, std::uint64_t round) {
  TimeBox& box = boxes_[0];
  const engine::Clock::time_point now = ctx.now();
  if (box.due(now)) return true;
  if (!quorum_.enabled()) return false;
  if (box.dueAfterNext(now)) quorum_.ready(ctx, round, static_cast<double>(box.steps() + 1));
  const std::optional<std::vector<engine::PeerId>> decision = quorum_.decided(ctx, round);
  return decision && std::find(decision->begin(), decision->end(), ctx.self()) == decision->end();
}

void TimedRounds::count(engine::PeerContext& ctx) {
  const engine::Clock::time_point now = ctx.now();
  for (TimeBox& box : boxes_) box.count(now);
}

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
  for (TimeBox& box : boxes_) box.begin(ctx.now(), budget, spent);
  ctx.setTotalSteps(static_cast<std::uint64_t>(budget));
  started_ = true;
}

bool TimedRounds::behind(engine::PeerContext& ctx, std::uint64_t round) {
  if (!quorum_.enabled() || endedByBudget_) return false;
  const TimeBox& box = boxes_[0];
  return (box.overdue(ctx.now()) && box.steps() > 0) || quorum_.decided(ctx, round).has_value();
}

std::optional<RoundAgreement> TimedRounds::exchange(engine::PeerContext& ctx,
                                                    AsyncAllReduce& exchange, std::uint64_t& round,
                                                    std::span<const float> x,
                                                    std::span<float> merged) {
  exchange.poll(ctx);
  // A member left out of rounds listens to each of them in turn: it does not skip one decided.
  if (const std::uint64_t heard = exchange.latestHeard();
      heard > round && !(quorum_.enabled() && quorum_.decided(ctx, round))) {
    ctx.metrics().add(who_ + ".rounds_skipped", static_cast<double>(heard - round));
    round = heard;
  }
  if (quorum_.enabled()) return exchangeWithQuorum(ctx, exchange, round, x, merged);
  send(ctx, exchange, round, x, 0);
  return collect(ctx, exchange, round, merged, 0);
}

std::optional<RoundAgreement> TimedRounds::exchangeWithQuorum(engine::PeerContext& ctx,
                                                              AsyncAllReduce& exchange,
                                                              std::uint64_t round,
                                                              std::span<const float> x,
                                                              std::span<float> merged) {
  TimeBox& box = boxes_[0];
  quorum_.ready(ctx, round, static_cast<double>(box.steps()));
  // Left out of neither the round that spends the budget nor the one before it (a round may take
  // more steps than its members said when ready): the member left out merges in the last.
  std::optional<double> stepsToEnd;
  if (box.spent()) stepsToEnd = box.budget() - *box.spent() - lastRoundSteps_;
  const std::optional<std::vector<engine::PeerId>> contributors =
      quorum_.await(ctx, round, box.closeAt(kGrace), stepsToEnd, ctx.now() + ctx.commTimeout());
  if (!contributors) {
    box.failed(ctx.now());
    quorum_.failed(round);
    ctx.metrics().add(who_ + ".fallbacks", 1);
    ctx.metrics().add(who_ + ".no_quorum", 1);
    return std::nullopt;
  }
  exchange.setContributors(*contributors);
  const bool contributes =
      std::find(contributors->begin(), contributors->end(), ctx.self()) != contributors->end();
  if (contributes) {
    send(ctx, exchange, round, x, 0);
  } else {
    exchange.listen(ctx, round, packedSize(x.size(), ctx.members().size()));
  }
  const engine::Clock::time_point stepStart = box.lastStepStart();
  std::optional<RoundAgreement> agreed =
      finishRound(ctx, exchange, round, merged, 0, contributors->size());
  if (agreed && !contributes) {
    agreed->contributed = false;
    box.startedAt(stepStart);
    ctx.metrics().add(who_ + ".rounds_left_out", 1);
    if (agreed->ended())
      ctx.metrics().add(who_ + ".steps_dropped", static_cast<double>(box.steps()));
  }
  return agreed;
}

void TimedRounds::send(engine::PeerContext& ctx, AsyncAllReduce& exchange, std::uint64_t round,
                       std::span<const float> x, std::size_t fragment) {
  TimeBox& box = boxes_.at(fragment);
  const std::vector<engine::PeerId>& members = ctx.members();
  std::shared_ptr<kernels::Buffer<float>> packed =
      exchange.buffer(ctx, packedSize(x.size(), members.size()));
  const std::span<float> out = packed->span();
  const float steps = static_cast<float>(box.steps());
  // k auto: this peer's estimate of the exchange (the direct all-reduce of the round's floats).
  const double exchangeSeconds =
      box.fitsExchange() ? ownExchangeSeconds(ctx, Exchange::kDirect,
                                              static_cast<double>(x.size()) * sizeof(float))
                         : 0.0;
  box.pack(ctx.compute(), x, out.first(x.size() + TimeBox::kTailFloats), exchangeSeconds);
  const std::span<float> slots = out.subspan(x.size() + TimeBox::kTailFloats);
  ctx.compute().fill(slots, 0.0f);
  const auto rank = static_cast<std::size_t>(std::find(members.begin(), members.end(), ctx.self()) -
                                             members.begin());
  ctx.compute().upload(slots.subspan(rank, 1), std::span<const float>(&steps, 1));
  exchange.start(ctx, round, std::move(packed));
}

std::optional<RoundAgreement> TimedRounds::collect(engine::PeerContext& ctx,
                                                   AsyncAllReduce& exchange, std::uint64_t round,
                                                   std::span<float> merged, std::size_t fragment) {
  return finishRound(ctx, exchange, round, merged, fragment, ctx.members().size());
}

std::optional<RoundAgreement> TimedRounds::finishRound(engine::PeerContext& ctx,
                                                       AsyncAllReduce& exchange,
                                                       std::uint64_t round, std::span<float> merged,
                                                       std::size_t fragment,
                                                       std::size_t contributors) {
  TimeBox& box = boxes_.at(fragment);
  const RingOutcome outcome = exchange.wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome != RingOutcome::kComplete) {
    // Nothing agreed changes; this peer's steps count in the next complete round.
    exchange.release(ctx, round);
    box.failed(ctx.now());
    if (fragment == 0) quorum_.failed(round);
    ctx.metrics().add(who_ + ".fallbacks", 1);
    ctx.metrics().add(who_ + "." + ringOutcomeName(outcome), 1);
    return std::nullopt;
  }
  const std::span<const float> result = exchange.result(round);
  const std::size_t members = ctx.members().size();
  RoundAgreement agreed =
      box.merged(ctx.compute(), result.first(merged.size() + TimeBox::kTailFloats), contributors,
                 merged, ctx.now());
  std::vector<float> slots(members);
  ctx.compute().download(std::span<float>(slots), result.subspan(result.size() - members));
  agreed.contributors = contributors;
  agreed.memberSteps.resize(members);
  for (std::size_t i = 0; i < members; ++i)
    agreed.memberSteps[i] =
        std::round(static_cast<double>(slots[i]) * static_cast<double>(contributors));
  if (fragment == 0) {
    quorum_.completed(ctx, round, agreed.memberSteps);
    lastRoundSteps_ = agreed.steps;
  }
  exchange.release(ctx, round);
  // Fragment 0's rounds end the run; none after the end moves it again (the last rounds).
  if (fragment != 0 || endedByBudget_) return agreed;
  ctx.metrics().set(who_ + ".cluster_steps", agreed.spent);
  ctx.metrics().set(who_ + ".round_seconds", box.roundSeconds());
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

std::optional<double> TimedRounds::progress() const {
  const TimeBox& box = boxes_[0];
  if (!started_ || !box.spent() || box.budget() <= 0) return std::nullopt;
  return *box.spent() / box.budget();
}

void TimedRounds::save(engine::AlgorithmState& state) const {
  if (!started_) return;
  state.values["time_box_budget"] = boxes_[0].budget();
  if (boxes_[0].spent()) state.values["time_box_spent"] = *boxes_[0].spent();
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
