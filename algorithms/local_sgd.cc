#include "algorithms/local_sgd.h"

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {

void LocalSgdOptions::validate() const {
  PeriodicAveragingOptions::validate("local-sgd");
  GOSSAMER_ENFORCE(pipeline >= 1 && pipeline <= kMaxRingPipeline,
                   "local-sgd.pipeline must be in [1, {}], not {}", kMaxRingPipeline, pipeline);
}

void LocalSgd::setup(engine::PeerContext& ctx) {
  if (mean_.size() != ctx.params().size())
    mean_ = ctx.compute().allocate<float>(ctx.params().size());
}

void LocalSgd::average(engine::PeerContext& ctx, std::uint64_t round) {
  const RingOutcome outcome = ringAllReduce(
      ctx, ctx.params(), mean_,
      {.kind = kAverage, .step = round, .op = ReduceOp::kMean, .pipeline = pipeline_,
       .who = name()});
  if (outcome == RingOutcome::kComplete) {
    adopt(ctx, mean_, false);
  } else {
    count(ctx, "fallbacks");  // keep w_i for this round
    count(ctx, ringOutcomeName(outcome));
  }
}

}  // namespace gossamer::algorithms
