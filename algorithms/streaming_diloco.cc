#include "algorithms/streaming_diloco.h"

#include <cmath>

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {

void StreamingDilocoOptions::validate() const {
  GOSSAMER_ENFORCE(h >= 1, "streaming-diloco.h must be at least 1, not {}", h);
  GOSSAMER_ENFORCE(fragments >= 1 && fragments <= h,
                   "streaming-diloco.fragments must be in [1, h = {}] (offsets H/F apart), not {}",
                   h, fragments);
  GOSSAMER_ENFORCE(
      fragments > h ||
              tau<h / fragments,
                  "streaming-diloco.tau must be below h / fragments = {} (a round merges before "
                  "the next one starts), not {}",
                  fragments>
                  h
          ? 0
          : h / fragments,
      tau);
  GOSSAMER_ENFORCE(std::isfinite(alpha) && alpha >= 0 && alpha <= 1,
                   "streaming-diloco.alpha must be in [0, 1], not {}", alpha);
  outer.validate("streaming-diloco");
  RoundTime::parse("streaming-diloco", roundSeconds);
  GOSSAMER_ENFORCE(pieces >= 1 && pieces <= kMaxRingPipeline,
                   "streaming-diloco.pieces must be in [1, {}], not {}", kMaxRingPipeline, pieces);
}

StreamingDiloco::StreamingDiloco(StreamingDilocoOptions options)
    : options_(options),
      outer_("streaming-diloco", options.outer),
      allReduce_(AsyncAllReduceOptions{
          .kind = kAverage,
          .op = ReduceOp::kMean,
          .pieces = options.pieces,
          .who = "streaming-diloco",
          // A member up to one period of H steps ahead has started F rounds this peer has not.
          .maxFutureRounds = 4 + static_cast<std::size_t>(options.fragments),
          .compress = true}),
      timed_(makeTimed(options)) {}

void StreamingDiloco::setup(engine::PeerContext& ctx) {
  const std::size_t size = ctx.params().size();
  GOSSAMER_ENFORCE(options_.fragments <= size,
                   "streaming-diloco.fragments ({}) must not exceed the model's {} parameters",
                   options_.fragments, size);
  outer_.setup(ctx);
  const std::size_t largest = ringSlice(size, options_.fragments, 0).count;
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
  const Slice slice = ringSlice(ctx.params().size(), options_.fragments, fragment);
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
  while (!inFlight_.empty() && inFlight_.begin()->first / options_.fragments <= last) {
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
  const Slice slice = ringSlice(ctx.params().size(), options_.fragments, fragment);
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
  merged_[fragment] = round / options_.fragments;
  return true;
}

void StreamingDiloco::apply(engine::PeerContext& ctx, std::size_t fragment,
                            std::span<const float> mean, std::span<float> scratch, double alpha) {
  const Slice slice = ringSlice(ctx.params().size(), options_.fragments, fragment);
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
  const std::uint64_t phase = done % options_.h;
  for (std::size_t f = 0; f < options_.fragments; ++f) {
    if (f * options_.h / options_.fragments != phase) continue;
    // Round numbers must grow; a step count moved back (adoptStep) skips until they do.
    if (started_ && roundOf(done, f) <= lastRound_) continue;
    start(ctx, done, f);
    outer_.setBusy(true);
  }
  // Every round started tau or more steps ago (tau = 0: the one just started).
  if (done >= options_.tau) mergeUpTo(ctx, done - options_.tau, options_.alpha);
  outer_.setBusy(!inFlight_.empty());
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
  for (std::size_t f = 0; f < options_.fragments; ++f) {
    const auto started = lastStart_.find(f);
    const auto merged = merged_.find(f);
    if (started != lastStart_.end() && started->second == total && merged != merged_.end() &&
        merged->second == total) {
      const Slice slice = ringSlice(ctx.params().size(), options_.fragments, f);
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
