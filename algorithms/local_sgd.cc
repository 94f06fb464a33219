#include "algorithms/local_sgd.h"

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {

void LocalSgdOptions::validate() const {
  PeriodicAveragingOptions::validate("local-sgd");
  GOSSAMER_ENFORCE(pipeline >= 1 && pipeline <= kMaxRingPipeline,
                   "local-sgd.pipeline must be in [1, {}], not {}", kMaxRingPipeline, pipeline);
  GOSSAMER_ENFORCE(ringOrder == "network" || ringOrder == "id",
                   "local-sgd.ring-order is network or id, not '{}'", ringOrder);
}

void LocalSgd::setup(engine::PeerContext& ctx) {
  // Time-boxed rounds merge into PeriodicAveraging's own buffer: no second one.
  if (!timed() && mean_.size() != ctx.params().size())
    mean_ = ctx.compute().allocate<float>(ctx.params().size());
  anchored_ = false;  // the start or a membership change: the next round sends the models
  if (!timed() && ringOrder_ == "network" && !ring_)
    ring_ = std::make_unique<NetworkRing>(kRingSurvey, ViewFit::kSurveyEvery, name());
  PeriodicAveraging::setup(ctx);
}

void LocalSgd::afterStep(engine::PeerContext& ctx) {
  // The same steps as allreduce-sgd's ring surveys (every member, every step).
  if (ring_ && !options().tau.isAuto())
    ring_->order(ctx, static_cast<double>(ctx.params().size() * sizeof(float)));
  PeriodicAveraging::afterStep(ctx);
}

void LocalSgd::surveyed(engine::PeerContext& ctx, const std::optional<Survey>& survey) {
  if (ring_) ring_->adopt(ctx, survey, static_cast<double>(ctx.params().size() * sizeof(float)));
}

void LocalSgd::average(engine::PeerContext& ctx, std::uint64_t round) {
  const bool compressed = ctx.compression().enabled();
  if (compressed && anchored_) {
    anchored_ = averageChange(ctx, round);
    return;
  }
  const RingOutcome outcome =
      ringAllReduce(ctx, ctx.params(), mean_,
                    {.kind = kAverage,
                     .step = round,
                     .op = ReduceOp::kMean,
                     .pipeline = pipeline_,
                     .who = name(),
                     .order = ring_ ? ring_->current(ctx) : std::span<const engine::PeerId>()});
  if (ring_ && outcome != RingOutcome::kComplete) ring_->reset();
  if (outcome == RingOutcome::kComplete) {
    adopt(ctx, mean_, false);
    if (compressed) {
      if (anchor_.size() != mean_.size()) anchor_ = ctx.compute().allocate<float>(mean_.size());
      ctx.compute().copy(anchor_, mean_);
      anchored_ = true;
    }
  } else {
    count(ctx, "fallbacks");  // keep w_i for this round
    count(ctx, ringOutcomeName(outcome));
  }
}

bool LocalSgd::averageChange(engine::PeerContext& ctx, std::uint64_t round) {
  if (!changes_)
    changes_ = std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{.kind = kCompressedChange,
                                                                      .op = ReduceOp::kMean,
                                                                      .pieces = pipeline_,
                                                                      .who = name(),
                                                                      .compress = true});
  kernels::Compute& compute = ctx.compute();
  std::shared_ptr<kernels::Buffer<float>> change = changes_->buffer(ctx, ctx.params().size());
  compute.weightedSum(change->span(), {{1.0f, anchor_}, {-1.0f, ctx.params()}});
  changes_->start(ctx, round, std::move(change));
  const RingOutcome outcome = changes_->wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome != RingOutcome::kComplete) {
    changes_->release(ctx, round);
    count(ctx, "fallbacks");  // keep w_i; the next round sends the models again
    count(ctx, ringOutcomeName(outcome));
    return false;
  }
  compute.weightedSum(mean_, {{1.0f, anchor_}, {-1.0f, changes_->result(round)}});
  changes_->release(ctx, round);
  compute.copy(anchor_, mean_);
  adopt(ctx, mean_, false);
  return true;
}

}  // namespace gossamer::algorithms
