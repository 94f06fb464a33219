#include "algorithms/streaming_diloco.h"

#include <cmath>

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {

void StreamingDilocoOptions::validate() const {
  GOSSAMER_ENFORCE(h >= 1, "streaming-diloco.h must be at least 1, not {}", h);
  const std::uint64_t f = fragments.valueOr(1), t = tau.valueOr(0);
  GOSSAMER_ENFORCE(f >= 1 && f <= h,
                   "streaming-diloco.fragments must be in [1, h = {}] (offsets H/F apart) or "
                   "auto, not {}",
                   h, f);
  GOSSAMER_ENFORCE(
      f > h || t<h / f,
                 "streaming-diloco.tau must be below h / fragments = {} (a round merges before "
                 "the next one starts), not {}",
                 f>
                   h
          ? 0
          : h / f,
      t);
  GOSSAMER_ENFORCE(std::isfinite(alpha) && alpha >= 0 && alpha <= 1,
                   "streaming-diloco.alpha must be in [0, 1], not {}", alpha);
  outer.validate("streaming-diloco");
  RoundTime::parse("streaming-diloco", roundSeconds);
  GOSSAMER_ENFORCE(pieces >= 1 && pieces <= kMaxRingPipeline,
                   "streaming-diloco.pieces must be in [1, {}], not {}", kMaxRingPipeline, pieces);
}

namespace {

// F and tau until a survey chose (time-boxed rounds: for the run).
StreamingChoice provisional(const StreamingDilocoOptions& o) {
  const bool timed = RoundTime::parse("streaming-diloco", o.roundSeconds).enabled();
  StreamingChoice c;
  c.fragments = o.fragments.valueOr(timed ? std::min<std::uint64_t>(4, o.h) : 1);
  c.tau = o.tau.valueOr(std::min<std::uint64_t>(timed ? 2 : 1, o.h / c.fragments - 1));
  return c;
}

}  // namespace

StreamingDiloco::StreamingDiloco(StreamingDilocoOptions options)
    : options_(options),
      fragments_(provisional(options).fragments),
      tau_(provisional(options).tau),
      outer_("streaming-diloco", options.outer),
      allReduce_(AsyncAllReduceOptions{
          .kind = kAverage,
          .op = ReduceOp::kMean,
          .pieces = options.pieces,
          .who = "streaming-diloco",
          // A member up to one period of H steps ahead has started F rounds this peer has not.
          .maxFutureRounds = 4 + static_cast<std::size_t>(std::max<std::uint64_t>(
                                     options.fragments.valueOr(1), kMaxFragments)),
          .compress = true}),
      timed_(makeTimed(options)) {}

void StreamingDiloco::setup(engine::PeerContext& ctx) {
  const std::size_t size = ctx.params().size();
  if (!timed_ && (options_.fragments.isAuto() || options_.tau.isAuto())) {
    // A view change: the provisional values (as a joiner's) from the first step with no round in
    // flight, until the new view's first complete survey.
    fit_.reset();
    next_ = provisional(options_);
    chosen_ = false;
    if (inFlight_.empty()) {
      fragments_ = next_->fragments;
      tau_ = next_->tau;
      next_.reset();
    }
  }
  GOSSAMER_ENFORCE(fragments_ <= size,
                   "streaming-diloco.fragments ({}) must not exceed the model's {} parameters",
                   fragments_, size);
  outer_.setup(ctx);
  const std::size_t largest = ringSlice(size, fragments_, 0).count;
  if (scratch_.size() != largest) scratch_ = ctx.compute().allocate<float>(largest);
  step_ = ctx.step();
  if (timed_) setupTimed(ctx);
}

void StreamingDiloco::count(engine::PeerContext& ctx, const std::string& what, double value) {
  ctx.metrics().add(name() + "." + what, value);
}

void StreamingDiloco::start(engine::PeerContext& ctx, std::uint64_t step, std::size_t fragment) {
  // At most one round of a fragment in flight: nothing but its own merge changes theta[f] between
  // a start and its merge, which the compressed merge relies on (see the header comment).
  for (const auto& [round, f] : inFlight_)
    GOSSAMER_ENFORCE(f != fragment,
                     "streaming-diloco: fragment {} started at step {} while its round {} is in "
                     "flight",
                     fragment, step, round);
  const Slice slice = ringSlice(ctx.params().size(), fragments_, fragment);
  const std::uint64_t round = roundOf(step, fragment);
  if (ctx.compression().enabled()) {
    // Delta_i[f] = theta[f] - w_i[f], built in the round's own buffer; the fragment is the
    // stream of its error feedback.
    std::shared_ptr<kernels::Buffer<float>> delta = allReduce_.buffer(ctx, slice.count);
    ctx.compute().weightedSum(delta->span(),
                              {{1.0f, outer_.theta().subspan(slice.offset, slice.count)},
                               {-1.0f, ctx.params().subspan(slice.offset, slice.count)}});
    allReduce_.start(ctx, round, std::move(delta), fragment);
  } else {
    allReduce_.start(ctx, round,
                     std::span<const float>(ctx.params()).subspan(slice.offset, slice.count));
  }
  inFlight_[round] = fragment;
  lastStart_[fragment] = step;
  lastRound_ = round;
  started_ = true;
}

void StreamingDiloco::mergeUpTo(engine::PeerContext& ctx, std::uint64_t last, double alpha) {
  while (!inFlight_.empty() && inFlight_.begin()->first / stride() <= last) {
    const auto [round, fragment] = *inFlight_.begin();
    inFlight_.erase(inFlight_.begin());
    merge(ctx, round, fragment, alpha);
  }
}

bool StreamingDiloco::merge(engine::PeerContext& ctx, std::uint64_t round, std::size_t fragment,
                            double alpha) {
  const RingOutcome outcome = allReduce_.wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome != RingOutcome::kComplete) {
    // theta[f] and m[f] stay; w_i[f] goes on unmerged (see the header comment).
    allReduce_.release(ctx, round);
    count(ctx, "fallbacks");
    count(ctx, ringOutcomeName(outcome));
    return false;
  }
  const Slice slice = ringSlice(ctx.params().size(), fragments_, fragment);
  const std::span<float> scratch = scratch_.span().first(slice.count);
  if (ctx.compression().enabled()) {
    // The mean model theta[f] - mean(Delta[f]), with the theta[f] that start() took Delta from.
    ctx.compute().weightedSum(scratch, {{1.0f, outer_.theta().subspan(slice.offset, slice.count)},
                                        {-1.0f, allReduce_.result(round)}});
    apply(ctx, fragment, scratch, scratch, alpha);
  } else {
    apply(ctx, fragment, allReduce_.result(round), scratch, alpha);
  }
  allReduce_.release(ctx, round);
  merged_[fragment] = round / stride();
  return true;
}

void StreamingDiloco::apply(engine::PeerContext& ctx, std::size_t fragment,
                            std::span<const float> mean, std::span<float> scratch, double alpha) {
  const Slice slice = ringSlice(ctx.params().size(), fragments_, fragment);
  kernels::Compute& compute = ctx.compute();
  outer_.step(ctx, slice.offset, mean, scratch);
  const std::span<float> local = ctx.params().subspan(slice.offset, slice.count);
  const std::span<const float> theta = outer_.theta().subspan(slice.offset, slice.count);
  if (alpha == 0) {
    compute.copy(local, theta);
  } else {
    const auto a = static_cast<float>(alpha);
    compute.weightedSum(local, {{a, local}, {1.0f - a, theta}});
  }
  outer_.publish(ctx, slice.offset, slice.count);
  outer_.countRound();
  count(ctx, "rounds");
}

void StreamingDiloco::afterStep(engine::PeerContext& ctx) {
  const std::uint64_t done = ctx.step() + 1;  // ctx.step() counts this step once it returns
  step_ = done;
  allReduce_.poll(ctx);
  if (timed_) {
    timedAfterStep(ctx, done);
    return;
  }
  if (next_ && inFlight_.empty()) applyChoice(ctx);
  const std::uint64_t phase = done % options_.h;
  for (std::size_t f = 0; f < fragments_; ++f) {
    if (f * options_.h / fragments_ != phase) continue;
    // Round numbers must grow; a step count moved back (adoptStep) skips until they do.
    if (started_ && roundOf(done, f) <= lastRound_) continue;
    start(ctx, done, f);
    outer_.setBusy(true);
  }
  // Every round started tau or more steps ago (tau = 0: the one just started).
  if (done >= tau_) mergeUpTo(ctx, done - tau_, options_.alpha);
  outer_.setBusy(!inFlight_.empty());
  fit(ctx, done);
}

void StreamingDiloco::fit(engine::PeerContext& ctx, std::uint64_t done) {
  if (!options_.fragments.isAuto() && !options_.tau.isAuto()) return;
  const std::optional<NetworkFacts> facts = fit_.step(ctx, done);
  if (!facts) return;
  const double bytes = static_cast<double>(ctx.params().size()) * sizeof(float);
  next_ = chooseStreaming(*facts, bytes, options_.h, options_.fragments.fixed, options_.tau.fixed);
  chosen_ = true;
  log::get("algorithms")
      ->info(
          "streaming-diloco: fragments {} and tau {} chosen at step {} ({} members, slowest "
          "step {:.4f} s, a fragment's exchange {:.4f} s)",
          next_->fragments, next_->tau, done, facts->members(), facts->slowestStepSeconds(),
          facts->exchangeSeconds(Exchange::kDirect, bytes / static_cast<double>(next_->fragments)));
  if (inFlight_.empty()) applyChoice(ctx);
}

void StreamingDiloco::applyChoice(engine::PeerContext& ctx) {
  fragments_ = next_->fragments;
  tau_ = next_->tau;
  next_.reset();
  lastStart_.clear();  // by fragment: the old fragments' indices mean other slices now
  merged_.clear();
  const std::size_t largest = ringSlice(ctx.params().size(), fragments_, 0).count;
  if (scratch_.size() != largest) scratch_ = ctx.compute().allocate<float>(largest);
  if (!chosen_) return;
  const std::string why = "the survey's figures are in the line before";
  if (options_.fragments.isAuto())
    reportChosen(ctx, name(), "fragments", static_cast<double>(fragments_), why);
  if (options_.tau.isAuto()) reportChosen(ctx, name(), "tau", static_cast<double>(tau_), why);
}

void StreamingDiloco::finish(engine::PeerContext& ctx) {
  if (timed_) {
    finishTimed(ctx);
    return;
  }
  // The rounds in flight, merged as usual.
  mergeUpTo(ctx, kAll, options_.alpha);
  if (ctx.step() != ctx.totalSteps()) return;  // stopped early: the peers are at different steps
  // One last round of every fragment but those whose round started at the last step and merged,
  // all in flight at once; every peer takes theta: the run ends on one model.
  const std::uint64_t total = ctx.step();
  for (std::size_t f = 0; f < fragments_; ++f) {
    const auto started = lastStart_.find(f);
    const auto merged = merged_.find(f);
    if (started != lastStart_.end() && started->second == total && merged != merged_.end() &&
        merged->second == total) {
      const Slice slice = ringSlice(ctx.params().size(), fragments_, f);
      ctx.compute().copy(ctx.params().subspan(slice.offset, slice.count),
                         outer_.theta().subspan(slice.offset, slice.count));
      continue;
    }
    if (started_ && roundOf(total + 1, f) <= lastRound_) continue;
    start(ctx, total + 1, f);
  }
  mergeUpTo(ctx, kAll, 0.0);
  outer_.setBusy(false);
  // The consensus needs a buffer of |w|: the fragment scratch grows for it, at the end only.
  if (scratch_.size() != ctx.params().size())
    scratch_ = ctx.compute().allocate<float>(ctx.params().size());
  endOnConsensus(ctx, outer_, scratch_, kConsensus, total, options_.pieces, name());
}

void StreamingDiloco::serve(engine::ServiceContext& ctx, const engine::Incoming& request) {
  if (request.kind != kStateRequest) {
    ctx.metrics().add(name() + ".refused", 1);
    return;
  }
  serveOuterState(ctx, request, outer_, kState, step_, name());
}

void StreamingDiloco::join(engine::PeerContext& ctx) {
  joinedTimed();
  if (joinFromOuterState(ctx, outer_, name(), kStateRequest)) return;
  ctx.metrics().add(name() + ".join_fallbacks", 1);
  engine::Algorithm::join(ctx);
}

void StreamingDiloco::resumedLate(engine::PeerContext& /*ctx*/) { joinedTimed(); }

void StreamingDiloco::saveState(engine::AlgorithmState& state) const {
  saveOuterState(outer_, state);
  saveTimed(state);
}

void StreamingDiloco::loadState(const engine::AlgorithmState& state) {
  loadOuterState(outer_, state);
  loadTimed(state);
}

}  // namespace gossamer::algorithms
