#include "algorithms/allreduce_sgd.h"

#include <algorithm>

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

// A step's all-reduce in the metrics: a round, or a fallback and why.
void countOutcome(engine::PeerContext& ctx, RingOutcome outcome) {
  if (outcome == RingOutcome::kComplete) {
    ctx.metrics().add("allreduce-sgd.rounds", 1);
    return;
  }
  ctx.metrics().add("allreduce-sgd.fallbacks", 1);
  ctx.metrics().add(std::string("allreduce-sgd.") + ringOutcomeName(outcome), 1);
}

}  // namespace

void AllreduceSgdOptions::validate() const {
  GOSSAMER_ENFORCE(pipeline >= 1 && pipeline <= kMaxRingPipeline,
                   "allreduce-sgd.pipeline must be in [1, {}], not {}", kMaxRingPipeline, pipeline);
  GOSSAMER_ENFORCE(backups <= kMaxBackups, "allreduce-sgd.backups must be in [0, {}], not {}",
                   kMaxBackups, backups);
  GOSSAMER_ENFORCE(ringOrder == "network" || ringOrder == "id",
                   "allreduce-sgd.ring-order is network or id, not '{}'", ringOrder);
  GOSSAMER_ENFORCE(ringSurvey >= 1, "allreduce-sgd.ring-survey must be at least 1 step");
}

void AllreduceSgd::setup(engine::PeerContext& ctx) {
  if (mean_.size() != ctx.grads().size()) mean_ = ctx.compute().allocate<float>(ctx.grads().size());
  if (options_.ringOrder == "network" && !ring_)
    ring_ = std::make_unique<NetworkRing>(kRingSurvey, options_.ringSurvey, name());
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

double AllreduceSgd::stepWithBackups(engine::PeerContext& ctx) {
  GOSSAMER_ENFORCE(!ctx.compression().enabled(),
                   "allreduce-sgd.backups does not combine with --compress: the list of "
                   "contributors travels with the gradients and must arrive exact");
  if (!backup_)
    backup_ =
        std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{.kind = kBackupGradient,
                                                               .op = ReduceOp::kMean,
                                                               .pieces = options_.pipeline,
                                                               .who = name(),
                                                               .maxFutureRounds = kBackupRoundsKept,
                                                               .backups = options_.backups});
  const std::size_t n = ctx.members().size(), size = ctx.grads().size();
  const std::uint64_t round = ctx.step();
  backup_->poll(ctx);
  backup_->setOwners(owners_);
  // Someone is a round ahead already: this round went on, or goes on, without this peer.
  const bool behind = backup_->latestHeard() > round;
  if (behind) {
    backup_->listen(ctx, round, size + n);
    ctx.metrics().add("allreduce-sgd.caught_up", 1);
  } else {
    lastLoss_ = ctx.computeGradients();
    std::shared_ptr<kernels::Buffer<float>> input = backup_->buffer(ctx, size + n);
    ctx.compute().copy(input->span().first(size), ctx.grads());
    writePresence(ctx, input->span().subspan(size));
    backup_->start(ctx, round, std::move(input));
  }
  const RingOutcome outcome = backup_->wait(ctx, round, ctx.now() + ctx.commTimeout());
  countOutcome(ctx, outcome);
  if (outcome == RingOutcome::kComplete) {
    const std::span<const float> mean = backup_->result(round);
    ctx.compute().copy(ctx.grads(), mean.first(size));
    owners_ = presentMembers(ctx, mean.subspan(size));
    ctx.applyOptimizer();
  } else {
    owners_.clear();                    // every member owns a chunk of the next round
    if (!behind) ctx.applyOptimizer();  // this peer's own gradient; a listener has none
  }
  backup_->release(ctx, round);
  return lastLoss_;
}

double AllreduceSgd::step(engine::PeerContext& ctx) {
  if (options_.backups > 0) return stepWithBackups(ctx);
  const double loss = ctx.computeGradients();
  RingOutcome outcome;
  if (ctx.compression().enabled()) {
    outcome = averageCompressed(ctx);
  } else {
    const double bytes = static_cast<double>(ctx.grads().size() * sizeof(float));
    outcome = ringAllReduce(
        ctx, ctx.grads(), mean_,
        {.kind = kGradient,
         .step = ctx.step(),
         .op = ReduceOp::kMean,
         .pipeline = options_.pipeline,
         .who = name(),
         .order = ring_ ? ring_->order(ctx, bytes) : std::span<const engine::PeerId>()});
    if (outcome != RingOutcome::kComplete && ring_) ring_->reset();
  }
  countOutcome(ctx, outcome);
  // A fallback's step uses the local gradient.
  if (outcome == RingOutcome::kComplete) ctx.compute().copy(ctx.grads(), mean_);
  ctx.applyOptimizer();
  return loss;
}

}  // namespace gossamer::algorithms
