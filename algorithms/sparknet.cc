#include "algorithms/sparknet.h"

#include <vector>

namespace gossamer::algorithms {

void Sparknet::setup(engine::PeerContext& ctx) { master_ = ctx.graph().root(); }

void Sparknet::average(engine::PeerContext& ctx, std::uint64_t round) {
  ctx.inbox().discardBefore(round);
  if (ctx.self() == master_) {
    master(ctx, round);
  } else {
    worker(ctx, round);
  }
}

void Sparknet::master(engine::PeerContext& ctx, std::uint64_t round) {
  std::vector<engine::PeerId> workers;
  for (engine::PeerId peer : ctx.members())
    if (peer != ctx.self()) workers.push_back(peer);
  engine::GatherResult got =
      ctx.gather(workers, engine::Tags::forRound(kModel, round), ctx.commTimeout());
  const std::span<float> w = ctx.params();
  std::vector<engine::DeviceView> models;
  models.reserve(got.messages.size());
  const engine::Expected expected{.payloads = {w.size()}};
  for (const engine::Incoming& m : got.messages)
    if (engine::acceptMessage(m, expected, ctx.metrics(), name()))
      models.push_back(ctx.upload(m.payload(0)));
  // w~ = (w + sum_j w_j) / (1 + models), one fused pass per kMaxWeightedInputs - 1 models.
  const float share = 1.0f / static_cast<float>(models.size() + 1);
  float own = share;
  std::size_t next = 0;
  do {
    std::vector<kernels::WeightedInput> inputs{{own, w}};
    for (; next < models.size() && inputs.size() < kernels::Compute::kMaxWeightedInputs; ++next)
      inputs.push_back({share, models[next]});
    ctx.compute().weightedSum(w, inputs);
    own = 1.0f;
  } while (next < models.size());
  ctx.send(workers, engine::Message{.kind = kAverage,
                                    .step = round,
                                    .tag = engine::Tags::forRound(kAverage, round),
                                    .payloads = {w}});
  count(ctx, "models", static_cast<double>(models.size()));
  if (!got.missing.empty()) count(ctx, "missing", static_cast<double>(got.missing.size()));
  adopt(ctx, w, false);
}

void Sparknet::worker(engine::PeerContext& ctx, std::uint64_t round) {
  ctx.send(master_, engine::Message{.kind = kModel,
                                    .step = round,
                                    .tag = engine::Tags::forRound(kModel, round),
                                    .payloads = {ctx.params()}});
  // The master waits up to one comm timeout for the models before it answers.
  engine::GatherResult got =
      ctx.gather(std::span<const engine::PeerId>(&master_, 1),
                 engine::Tags::forRound(kAverage, round), 2 * ctx.commTimeout());
  if (got.messages.empty()) {
    count(ctx, "missing");  // no average this round: keep exploring from w_i
  } else if (engine::acceptMessage(got.messages.front(), {.payloads = {ctx.params().size()}},
                                   ctx.metrics(), name())) {
    adopt(ctx, got.messages.front().payload(0), true);
  }  // else refused (counted): keep w_i too
}

}  // namespace gossamer::algorithms
