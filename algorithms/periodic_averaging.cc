#include "algorithms/periodic_averaging.h"

#include "engine/base/enforce.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void PeriodicAveragingOptions::validate(const char* algorithm) const {
  GOSSAMER_ENFORCE(tau >= 1, "{}.tau must be at least 1, not {}", algorithm, tau);
}

void PeriodicAveraging::afterStep(engine::PeerContext& ctx) {
  const std::uint64_t done = ctx.step() + 1;  // ctx.step() counts this step once it returns
  if (done % options_.tau == 0) average(ctx, done);
}

void PeriodicAveraging::finish(engine::PeerContext& ctx) {
  if (ctx.step() % options_.tau != 0 && ctx.step() == ctx.totalSteps()) average(ctx, ctx.step());
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
