#include "algorithms/gosgd.h"

#include <vector>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {

void GosgdOptions::validate() const {
  GOSSAMER_ENFORCE(p > 0 && p <= 1, "gosgd.p must be in (0, 1], not {}", p);
}

void Gosgd::setup(engine::PeerContext& ctx) {
  // alpha_i = 1/n once, at the start; later membership changes keep every peer's weight.
  if (!started_) {
    alpha_ = 1.0 / static_cast<double>(ctx.members().size());
    started_ = true;
  }
  ctx.metrics().set("gosgd.alpha", alpha_);
}

void Gosgd::beforeStep(engine::PeerContext& ctx) {
  std::vector<engine::Incoming> received = ctx.inbox().drain(kModel);
  // Merge in batches that fit one weightedSum: w = (a_i w + sum a_j w_j) / (a_i + sum a_j).
  constexpr std::size_t kBatch = kernels::Compute::kMaxWeightedInputs - 1;
  for (std::size_t begin = 0; begin < received.size(); begin += kBatch) {
    const std::size_t end = std::min(received.size(), begin + kBatch);
    double total = alpha_;
    for (std::size_t j = begin; j < end; ++j) total += received[j].scalar(0);
    std::vector<engine::DeviceView> models;
    std::vector<kernels::WeightedInput> inputs{{static_cast<float>(alpha_ / total), ctx.params()}};
    for (std::size_t j = begin; j < end; ++j) {
      models.push_back(ctx.upload(received[j].payload(0)));
      inputs.push_back({static_cast<float>(received[j].scalar(0) / total), models.back()});
    }
    ctx.compute().weightedSum(ctx.params(), inputs);
    alpha_ = total;
  }
  if (!received.empty()) ctx.metrics().add("gosgd.merged", static_cast<double>(received.size()));
}

void Gosgd::afterStep(engine::PeerContext& ctx) {
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  if (coin(ctx.rng()) >= options_.p) return;
  const std::optional<engine::PeerId> partner = ctx.graph().randomPartner(ctx.self(), ctx.rng());
  if (!partner) return;
  alpha_ /= 2;
  ctx.send(
      *partner,
      engine::Message{
          .kind = kModel, .step = ctx.step(), .scalars = {alpha_}, .payloads = {ctx.params()}});
  ctx.metrics().add("gosgd.sent", 1);
  ctx.metrics().set("gosgd.alpha", alpha_);
}

}  // namespace gossamer::algorithms
