// dpsgd's overlapped rule (dpsgd.overlap K, dpsgd.h): round t mixes the models of round t - K as
// differences, while round t's exchange travels behind the next K steps of compute.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "algorithms/dpsgd.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

double overlapGamma(std::uint64_t k, double minSelfWeight) {
  // Stable while gamma |lambda| < 2 sin(pi / (2 (2K + 1))), with |lambda| <= 2 (1 - min W_ii).
  const double spread = 1.0 - std::clamp(minSelfWeight, 0.0, 1.0);
  if (spread <= 0) return 1.0;  // W = I: nothing to mix, any step is stable
  const double bound =
      std::sin(std::numbers::pi / (2.0 * (2.0 * static_cast<double>(k) + 1.0))) / spread;
  return std::min(1.0, 0.9 * bound);
}

void Dpsgd::checkOverlap(engine::PeerContext& ctx, bool first) {
  std::string problem;
  if (ctx.compression().enabled()) {
    problem = "dpsgd.overlap mixes float32 models and cannot run with --compress (drop one)";
  } else if (!ctx.graph().symmetric()) {
    problem =
        "dpsgd.overlap needs an undirected topology with a symmetric mixing matrix (its delayed "
        "differences cancel, and its step is stable, only then): use ring, torus, exponential, "
        "mesh or --mixing metropolis";
  }
  if (problem.empty()) return;
  if (first) GOSSAMER_THROW("{}", problem);
  log::get("algorithms")
      ->warn("peer {:016x} at step {}, after a membership change: {}", ctx.self(), ctx.step(),
             problem);
}

double Dpsgd::stepOverlapped(engine::PeerContext& ctx) {
  const std::uint64_t k = options_.overlap;
  const std::uint64_t t = ctx.step();
  const std::span<float> w = ctx.params();
  if (history_.size() != k + 1 || history_.front().size() != w.size()) {
    history_.clear();
    for (std::uint64_t i = 0; i <= k; ++i)
      history_.push_back(ctx.compute().allocate<float>(w.size()));
    historyFrom_ = t;  // the first overlapped step: the rounds before it are not held
  }
  // Rounds older than t - K are over.
  if (t >= k)
    if (const std::size_t late = ctx.inbox().discardBefore(t - k); late > 0)
      ctx.metrics().add("dpsgd.late", static_cast<double>(late));
  // Send w_i,t and keep it: round t + K's differences need it.
  ctx.compute().copy(history_[t % (k + 1)], w);
  ctx.send(ctx.graph().outNeighbors(ctx.self()),
           engine::Message{.kind = kModel,
                           .step = t,
                           .tag = engine::Tags::forRound(kModel, t),
                           .payloads = {ctx.params()}});
  const double loss = ctx.computeGradients();
  // Round t - K's models, sent K steps ago: they have had K steps of compute to arrive.
  if (t >= historyFrom_ + k) {
    const std::uint64_t then = t - k;
    const std::vector<engine::Incoming> models =
        awaitModels(ctx, engine::Tags::forRound(kModel, then), false);
    mixDelayed(ctx, models, history_[then % (k + 1)], options_.plain);
  } else if (options_.plain) {
    mixDelayed(ctx, {}, {}, true);
  }
  if (options_.plain) {
    ctx.optimizer().setSteps(ctx.optimizer().steps() + 1);
  } else {
    ctx.applyOptimizer();
  }
  return loss;
}

void Dpsgd::mixDelayed(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models,
                       std::span<const float> ownThen, bool descent) {
  const topology::Graph& graph = ctx.graph();
  const engine::PeerId self = ctx.self();
  double minSelf = 1.0;
  for (engine::PeerId peer : graph.members()) minSelf = std::min(minSelf, graph.selfWeight(peer));
  const double gamma =
      options_.gamma > 0 ? options_.gamma : overlapGamma(options_.overlap, minSelf);
  // gamma W_ij (w_j,t-K - w_i,t-K) for each model present: a missing one drops its term.
  std::vector<engine::DeviceView> views;
  views.reserve(models.size());
  std::vector<kernels::WeightedInput> pulls;
  for (const engine::Incoming& m : models) {
    views.push_back(ctx.upload(m.payload(0)));
    pulls.push_back({static_cast<float>(gamma * graph.weight(self, m.from)), views.back()});
  }
  mixDifferences(ctx, pulls, ownThen, descent);
}

}  // namespace gossamer::algorithms
