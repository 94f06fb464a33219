#include "algorithms/allreduce_sgd.h"

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {

void AllreduceSgdOptions::validate() const {
  GOSSAMER_ENFORCE(pipeline >= 1 && pipeline <= kMaxRingPipeline,
                   "allreduce-sgd.pipeline must be in [1, {}], not {}", kMaxRingPipeline, pipeline);
}

void AllreduceSgd::setup(engine::PeerContext& ctx) {
  if (mean_.size() != ctx.grads().size()) mean_ = ctx.compute().allocate<float>(ctx.grads().size());
}

RingOutcome AllreduceSgd::averageCompressed(engine::PeerContext& ctx) {
  if (!compressed_)
    compressed_ =
        std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{.kind = kCompressedGradient,
                                                               .op = ReduceOp::kMean,
                                                               .pieces = options_.pipeline,
                                                               .who = name(),
                                                               .compress = true});
  const std::uint64_t round = ctx.step();
  compressed_->start(ctx, round, ctx.grads());
  const RingOutcome outcome = compressed_->wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome == RingOutcome::kComplete) ctx.compute().copy(mean_, compressed_->result(round));
  compressed_->release(ctx, round);
  return outcome;
}

double AllreduceSgd::step(engine::PeerContext& ctx) {
  const double loss = ctx.computeGradients();
  const RingOutcome outcome = ctx.compression().enabled()
                                  ? averageCompressed(ctx)
                                  : ringAllReduce(ctx, ctx.grads(), mean_,
                                                  {.kind = kGradient,
                                                   .step = ctx.step(),
                                                   .op = ReduceOp::kMean,
                                                   .pipeline = options_.pipeline,
                                                   .who = name()});
  if (outcome == RingOutcome::kComplete) {
    ctx.compute().copy(ctx.grads(), mean_);
    ctx.metrics().add("allreduce-sgd.rounds", 1);
  } else {
    ctx.metrics().add("allreduce-sgd.fallbacks", 1);  // this step uses the local gradient
    ctx.metrics().add(std::string("allreduce-sgd.") + ringOutcomeName(outcome), 1);
  }
  ctx.applyOptimizer();
  return loss;
}

}  // namespace gossamer::algorithms
