#include "algorithms/periodic_averaging.h"

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void PeriodicAveragingOptions::validate(const char* algorithm) const {
  GOSSAMER_ENFORCE(tau.valueOr(1) >= 1, "{}.tau must be at least 1 or auto, not {}", algorithm,
                   tau.valueOr(1));
  const RoundTime time = RoundTime::parse(algorithm, roundSeconds);
  const QuorumSize size = QuorumSize::parse(algorithm, quorum);
  GOSSAMER_ENFORCE(!size.enabled() || time.enabled(),
                   "{}.quorum needs time-boxed rounds ({}.round-seconds auto or seconds)",
                   algorithm, algorithm);
}

PeriodicAveraging::PeriodicAveraging(PeriodicAveragingOptions options, std::string who,
                                     AutoRounds rule, std::size_t timedPieces)
    : options_(std::move(options)),
      rule_(std::move(rule)),
      tau_(options_.tau.valueOr(kProvisionalTau)),
      fit_(who),
      timedPieces_(timedPieces) {
  if (const RoundTime time = RoundTime::parse(who, options_.roundSeconds); time.enabled()) {
    const QuorumSize quorum = QuorumSize::parse(who, options_.quorum);
    // tau auto: 0, the round's length follows the exchange (time_box.h).
    timed_ =
        std::make_unique<TimedRounds>(std::move(who), time, options_.tau.valueOr(0), 1, quorum);
  }
}

PeriodicAveraging::~PeriodicAveraging() = default;

void PeriodicAveraging::afterStep(engine::PeerContext& ctx) {
  if (timed_) {
    if (!timed_->due(ctx, nextTimedRound())) return;
    // With a quorum, a member that learned late of a round goes on to the next one at once.
    do {
      timedRound(ctx);
    } while (timed_->behind(ctx, nextTimedRound()));
    return;
  }
  const std::uint64_t done = ctx.step() + 1;  // ctx.step() counts this step once it returns
  if (roundEnds(done)) {
    lastRoundStep_ = done;
    const engine::Clock::time_point begin = ctx.now();
    average(ctx, done);
    lastRoundSeconds_ = std::chrono::duration<double>(ctx.now() - begin).count();
  }
  if (options_.tau.isAuto()) fit(ctx, done);
}

void PeriodicAveraging::fit(engine::PeerContext& ctx, std::uint64_t done) {
  std::optional<NetworkFacts> facts = fit_.step(ctx, done, lastRoundSeconds_);
  if (fit_.surveyedAt(done)) surveyed(ctx, fit_.lastSurvey());
  if (!facts) return;
  const double bytes = static_cast<double>(ctx.params().size()) * sizeof(float);
  // The provisional rounds ran this very exchange: the model scaled to what they took.
  const double measured = fit_.lastSurvey()->measuredExchangeSeconds();
  facts->calibrate(rule_.exchange, bytes, measured);
  tau_ = blockingRoundSteps(*facts, rule_.exchange, bytes, rule_.low, rule_.high);
  anchor_ = done;
  reportChosen(
      ctx, name(), rule_.knob, static_cast<double>(tau_),
      fmt::format("survey at step {}: {} members, slowest step {:.4f} s, an exchange of "
                  "{:.1f} MB {:.4f} s (measured {:.4f} s: x{:.2f})",
                  done, facts->members(), facts->slowestStepSeconds(), bytes / 1e6,
                  facts->exchangeSeconds(rule_.exchange, bytes), measured, facts->slowdown()));
}

void PeriodicAveraging::finish(engine::PeerContext& ctx) {
  if (timed_) return;  // the run ended at a round (the budget's, or this peer's cap)
  // Not when the last step ran a round already (under the tau then: a view change since may
  // have moved the schedule).
  if (lastRoundStep_ != ctx.step() && ctx.step() == ctx.totalSteps()) average(ctx, ctx.step());
}

void PeriodicAveraging::setup(engine::PeerContext& ctx) {
  if (!timed_ && options_.tau.isAuto()) {
    // A view change: provisional rounds (anchored at step 0, as every member's) until the new
    // view's first complete survey.
    fit_.reset();
    tau_ = kProvisionalTau;
    anchor_ = 0;
  }
  if (!timed_) return;
  timed_->start(ctx);
  if (timed_->quorum() && base_.size() != ctx.params().size()) {
    base_ = ctx.compute().allocate<float>(ctx.params().size());
    ctx.compute().copy(base_, ctx.params());  // every member starts from the same model
  }
}

void PeriodicAveraging::join(engine::PeerContext& ctx) {
  if (timed_) timed_->joined();  // its round number comes from the members' messages
  engine::Algorithm::join(ctx);
  if (base_.size() == ctx.params().size()) ctx.compute().copy(base_, ctx.params());
}

void PeriodicAveraging::saveState(engine::AlgorithmState& state) const {
  if (timed_) timed_->save(state);
}

void PeriodicAveraging::loadState(const engine::AlgorithmState& state) {
  if (timed_) timed_->load(state);
}

void PeriodicAveraging::timedRound(engine::PeerContext& ctx) {
  if (!weighted_)
    weighted_ = std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{
        .kind = kWeighted, .op = ReduceOp::kMean, .pieces = timedPieces_, .who = name()});
  if (merged_.size() != ctx.params().size())
    merged_ = ctx.compute().allocate<float>(ctx.params().size());
  std::uint64_t round = timedRounds_ + 1;
  const std::optional<RoundAgreement> agreed =
      timed_->exchange(ctx, *weighted_, round, ctx.params(), merged_);
  timedRounds_ = round;
  if (!agreed) return;
  if (TimedRounds::rebased(*agreed)) {
    // Left out: this peer's change since base_ goes on from the merged model, for the next round.
    ctx.compute().weightedSum(ctx.params(),
                              {{1.0f, ctx.params()}, {-1.0f, base_}, {1.0f, merged_}});
  } else {
    adopt(ctx, merged_, false);
  }
  if (base_.size() == merged_.size()) ctx.compute().copy(base_, merged_);
  ctx.roundMerged(round, merged_.span());
}

void PeriodicAveraging::resumedLate(engine::PeerContext& /*ctx*/) {
  if (timed_) timed_->joined();
}

engine::Invariants PeriodicAveraging::invariants() const {
  return timed_ ? timed_->invariants() : engine::Invariants{};
}

void PeriodicAveraging::adopt(engine::PeerContext& ctx, std::span<const float> average,
                              bool fromHost) {
  if (fromHost) {
    ctx.compute().upload(ctx.params(), average);
  } else if (average.data() != ctx.params().data()) {
    ctx.compute().copy(ctx.params(), average);
  }
  if (options_.resetOptimizer) ctx.optimizer().resetState();
  count(ctx, "rounds");
}

void PeriodicAveraging::count(engine::PeerContext& ctx, const std::string& name, double value) {
  ctx.metrics().add(this->name() + "." + name, value);
}

}  // namespace gossamer::algorithms
