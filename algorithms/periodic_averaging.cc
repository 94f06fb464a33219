#include "algorithms/periodic_averaging.h"

#include <utility>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void PeriodicAveragingOptions::validate(const char* algorithm) const {
  GOSSAMER_ENFORCE(tau >= 1, "{}.tau must be at least 1, not {}", algorithm, tau);
  RoundTime::parse(algorithm, roundSeconds);
}

PeriodicAveraging::PeriodicAveraging(PeriodicAveragingOptions options, std::string who)
    : options_(std::move(options)) {
  if (const RoundTime time = RoundTime::parse(who, options_.roundSeconds); time.enabled())
    timed_ = std::make_unique<TimedRounds>(std::move(who), time, options_.tau);
}

PeriodicAveraging::~PeriodicAveraging() = default;

void PeriodicAveraging::afterStep(engine::PeerContext& ctx) {
  if (timed_) {
    if (timed_->due(ctx)) timedRound(ctx);
    return;
  }
  const std::uint64_t done = ctx.step() + 1;  // ctx.step() counts this step once it returns
  if (done % options_.tau == 0) average(ctx, done);
}

void PeriodicAveraging::finish(engine::PeerContext& ctx) {
  if (timed_) return;  // the run ended at a round (the budget's, or this peer's cap)
  if (ctx.step() % options_.tau != 0 && ctx.step() == ctx.totalSteps()) average(ctx, ctx.step());
}

void PeriodicAveraging::timedRound(engine::PeerContext& /*ctx*/) {
  throw Error(fmt::format("{} has no time-boxed rounds", name()));
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
