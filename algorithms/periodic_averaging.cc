#include "algorithms/periodic_averaging.h"

#include <utility>

#include "engine/base/enforce.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void PeriodicAveragingOptions::validate(const char* algorithm) const {
  GOSSAMER_ENFORCE(tau >= 1, "{}.tau must be at least 1, not {}", algorithm, tau);
  const RoundTime time = RoundTime::parse(algorithm, roundSeconds);
  const QuorumSize size = QuorumSize::parse(algorithm, quorum);
  GOSSAMER_ENFORCE(!size.enabled() || time.enabled(),
                   "{}.quorum needs time-boxed rounds ({}.round-seconds auto or seconds)",
                   algorithm, algorithm);
}

PeriodicAveraging::PeriodicAveraging(PeriodicAveragingOptions options, std::string who,
                                     std::size_t timedPieces)
    : options_(std::move(options)), timedPieces_(timedPieces) {
  if (const RoundTime time = RoundTime::parse(who, options_.roundSeconds); time.enabled()) {
    const QuorumSize quorum = QuorumSize::parse(who, options_.quorum);
    timed_ = std::make_unique<TimedRounds>(std::move(who), time, options_.tau, 1, quorum);
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
  if (done % options_.tau == 0) average(ctx, done);
}

void PeriodicAveraging::finish(engine::PeerContext& ctx) {
  if (timed_) return;  // the run ended at a round (the budget's, or this peer's cap)
  if (ctx.step() % options_.tau != 0 && ctx.step() == ctx.totalSteps()) average(ctx, ctx.step());
}

void PeriodicAveraging::setup(engine::PeerContext& ctx) {
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
