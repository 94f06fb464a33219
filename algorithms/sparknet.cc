#include "algorithms/sparknet.h"

#include <vector>

#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

// out = ownWeight x out + sum of `inputs`, one fused weightedSum per kMaxWeightedInputs - 1 inputs.
void sumInPlace(kernels::Compute& compute, std::span<float> out, float ownWeight,
                std::span<const kernels::WeightedInput> inputs) {
  float own = ownWeight;
  std::size_t next = 0;
  do {
    std::vector<kernels::WeightedInput> terms{{own, out}};
    for (; next < inputs.size() && terms.size() < kernels::Compute::kMaxWeightedInputs; ++next)
      terms.push_back(inputs[next]);
    compute.weightedSum(out, terms);
    own = 1.0f;
  } while (next < inputs.size());
}

}  // namespace

void Sparknet::setup(engine::PeerContext& ctx) {
  master_ = ctx.graph().root();
  anchored_ = false;  // the start or a membership change: the next round sends the models
  PeriodicAveraging::setup(ctx);
}

void Sparknet::average(engine::PeerContext& ctx, std::uint64_t round) {
  ctx.inbox().discardBefore(round);
  if (ctx.self() == master_) {
    master(ctx, round);
  } else {
    worker(ctx, round);
  }
}

void Sparknet::master(engine::PeerContext& ctx, std::uint64_t round) {
  const bool compressed = ctx.compression().enabled();
  std::vector<engine::PeerId> workers;
  for (engine::PeerId peer : ctx.members())
    if (peer != ctx.self()) workers.push_back(peer);
  engine::GatherResult got =
      ctx.gather(workers, engine::Tags::forRound(kModel, round), ctx.commTimeout());
  const std::span<float> w = ctx.params();
  std::vector<engine::DeviceView> models, changes;
  models.reserve(got.messages.size());
  const engine::Expected expected{.payloads = {w.size()}, .integers = compressed ? 1u : 0u};
  for (const engine::Incoming& m : got.messages) {
    if (!engine::acceptMessage(m, expected, ctx.metrics(), name())) continue;
    const std::optional<std::uint64_t> form = formOf(ctx, m);
    if (form && withinBound(ctx, m, *form))
      (*form == kChangeForm ? changes : models).push_back(ctx.upload(m.payload(0)));
  }
  if (!got.missing.empty()) count(ctx, "missing", static_cast<double>(got.missing.size()));
  if (anchored_ && models.empty()) {
    count(ctx, "models", static_cast<double>(changes.size()));
    sendMeanChange(ctx, round, workers, changes);
    return;
  }
  if (!anchored_ && !changes.empty()) {
    count(ctx, "ignored", static_cast<double>(changes.size()));  // no anchor to add them to
    changes.clear();
  }
  // w~ = (w + sum_j w_j + sum_j (a - d_j)) / (1 + models + changes).
  const std::size_t others = models.size() + changes.size();
  const float share = 1.0f / static_cast<float>(others + 1);
  std::vector<kernels::WeightedInput> inputs;
  inputs.reserve(others + 1);
  for (const engine::DeviceView& m : models) inputs.push_back({share, m});
  if (!changes.empty()) {
    inputs.push_back({share * static_cast<float>(changes.size()), anchor_});
    for (const engine::DeviceView& d : changes) inputs.push_back({-share, d});
  }
  sumInPlace(ctx.compute(), w, share, inputs);
  engine::Message reply{.kind = kAverage,
                        .step = round,
                        .tag = engine::Tags::forRound(kAverage, round),
                        .payloads = {w}};
  if (compressed) reply.integers = {kModelForm};
  ctx.send(workers, reply);
  count(ctx, "models", static_cast<double>(others));
  adopt(ctx, w, false);
  if (compressed) anchor(ctx);
}

void Sparknet::sendMeanChange(engine::PeerContext& ctx, std::uint64_t round,
                              std::span<const engine::PeerId> workers,
                              const std::vector<engine::DeviceView>& changes) {
  // mean = (d + sum_j d_j) / (1 + changes), in float32, into change_.
  computeChange(ctx);
  const float share = 1.0f / static_cast<float>(changes.size() + 1);
  std::vector<kernels::WeightedInput> inputs;
  inputs.reserve(changes.size());
  for (const engine::DeviceView& d : changes) inputs.push_back({share, d});
  sumInPlace(ctx.compute(), change_, share, inputs);
  // To itself too: it applies the decoded bits every worker gets.
  std::vector<engine::PeerId> recipients(workers.begin(), workers.end());
  recipients.push_back(ctx.self());
  const engine::PeerId self = ctx.self();
  const std::uint64_t tag = engine::Tags::forRound(kAverage, round);
  ctx.send(
      recipients,
      engine::Message{.kind = kAverage,
                      .step = round,
                      .tag = tag,
                      .integers = {kChangeForm},
                      .payloads = {change_},
                      .compressible = {{.payload = 0, .residual = feedback(ctx, meanResidual_)}}});
  receive(ctx, ctx.gather(std::span<const engine::PeerId>(&self, 1), tag, ctx.commTimeout()));
}

void Sparknet::worker(engine::PeerContext& ctx, std::uint64_t round) {
  engine::Message contribution{.kind = kModel,
                               .step = round,
                               .tag = engine::Tags::forRound(kModel, round),
                               .payloads = {ctx.params()}};
  if (ctx.compression().enabled()) {
    contribution.integers = {anchored_ ? kChangeForm : kModelForm};
    if (anchored_) {
      computeChange(ctx);
      contribution.payloads = {change_};
      contribution.compressible = {{.payload = 0, .residual = feedback(ctx, residual_)}};
    }
  }
  ctx.send(master_, contribution);
  // The master waits up to one comm timeout for the models before it answers.
  receive(ctx, ctx.gather(std::span<const engine::PeerId>(&master_, 1),
                          engine::Tags::forRound(kAverage, round), 2 * ctx.commTimeout()));
}

void Sparknet::receive(engine::PeerContext& ctx, const engine::GatherResult& got) {
  const bool compressed = ctx.compression().enabled();
  const std::span<float> w = ctx.params();
  if (got.messages.empty()) {
    count(ctx, "missing");  // no average this round: keep exploring from w_i
    anchored_ = false;
    return;
  }
  const engine::Incoming& m = got.messages.front();
  const std::optional<std::uint64_t> form =
      engine::acceptMessage(m, {.payloads = {w.size()}, .integers = compressed ? 1u : 0u},
                            ctx.metrics(), name())
          ? formOf(ctx, m)
          : std::nullopt;
  if (!form || !withinBound(ctx, m, *form)) {
    anchored_ = false;  // refused (counted): keep w_i too
  } else if (*form == kModelForm) {
    adopt(ctx, m.payload(0), true);
    if (compressed) anchor(ctx);
  } else if (anchored_) {
    // w = a - mean, from the same bits on every peer; the new anchor is w.
    const engine::DeviceView mean = ctx.upload(m.payload(0));
    ctx.compute().weightedSum(w, {{1.0f, anchor_}, {-1.0f, mean}});
    ctx.compute().copy(anchor_, w);
    adopt(ctx, w, false);
  } else {
    count(ctx, "unanchored");  // a mean change, but no anchor to apply it to: keep w_i
  }
}

std::optional<std::uint64_t> Sparknet::formOf(engine::PeerContext& ctx,
                                              const engine::Incoming& message) const {
  if (!ctx.compression().enabled()) return kModelForm;
  const std::uint64_t form = message.integer(0);
  if (form == kModelForm || form == kChangeForm) return form;
  log::get("algorithms")
      ->warn(
          "{}: refused a message from peer {:016x}: form {} of kind {} is neither a model nor "
          "a change",
          name(), message.from, form, message.kind);
  ctx.metrics().add(name() + ".refused", 1);
  return std::nullopt;
}

bool Sparknet::withinBound(engine::PeerContext& ctx, const engine::Incoming& message,
                           std::uint64_t form) {
  const engine::NormBound bound = ctx.normBound();
  if (!bound.enabled() || message.from == ctx.self()) return true;
  kernels::Compute& compute = ctx.compute();
  const engine::DeviceView x = ctx.upload(message.payload(0));
  if (form == kModelForm)
    return engine::acceptNearOwn(compute, message, x, ctx.params(), bound, ctx.metrics(), name());
  if (!anchored_) return true;  // a change with no anchor to apply it to is not used
  // The model a change d stands for is a - d: its distance from w_i is ||d - (a - w_i)||.
  computeChange(ctx);
  return engine::acceptDistance(message, engine::distanceFromOwn(compute, x, change_),
                                compute.norm2(ctx.params()), bound, ctx.metrics(), name());
}

void Sparknet::computeChange(engine::PeerContext& ctx) {
  if (change_.size() != anchor_.size()) change_ = ctx.compute().allocate<float>(anchor_.size());
  ctx.compute().weightedSum(change_, {{1.0f, anchor_}, {-1.0f, ctx.params()}});
}

void Sparknet::anchor(engine::PeerContext& ctx) {
  const std::span<float> w = ctx.params();
  if (anchor_.size() != w.size()) anchor_ = ctx.compute().allocate<float>(w.size());
  ctx.compute().copy(anchor_, w);
  anchored_ = true;
  count(ctx, "anchors");
}

std::span<float> Sparknet::feedback(engine::PeerContext& ctx, kernels::Buffer<float>& residual) {
  if (!ctx.compression().errorFeedback) return {};
  if (residual.size() != ctx.params().size()) {
    residual = ctx.compute().allocate<float>(ctx.params().size());
    ctx.compute().fill(residual, 0.0f);
  }
  return residual;
}

}  // namespace gossamer::algorithms
