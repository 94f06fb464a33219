#include "algorithms/tree_easgd.h"

#include <algorithm>
#include <cmath>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

// The interval of `level` in a per-depth list whose last value repeats.
std::uint64_t atLevel(const std::vector<std::uint64_t>& list, std::size_t level) {
  return list[std::min(level, list.size() - 1)];
}

}  // namespace

void TreeEasgdOptions::validate() const {
  GOSSAMER_ENFORCE(alpha > 0 && alpha <= 1, "tree-easgd.alpha must be in (0, 1], not {}", alpha);
  SharedEnd::validate("tree-easgd", end);
  GOSSAMER_ENFORCE(!tauUp.empty(), "tree-easgd.tau_up needs at least one interval");
  GOSSAMER_ENFORCE(!tauDown.empty(), "tree-easgd.tau_down needs at least one interval");
  for (const auto* list : {&tauUp, &tauDown}) {
    for (std::uint64_t tau : *list)
      GOSSAMER_ENFORCE(tau >= 1, "tree-easgd.{} intervals must be at least 1, not {}",
                       list == &tauUp ? "tau_up" : "tau_down", tau);
  }
  for (std::size_t d = 1; d < tauUp.size(); ++d)
    GOSSAMER_ENFORCE(tauUp[d] <= tauUp[d - 1],
                     "tree-easgd.tau_up may not increase with depth (shallower nodes send up more "
                     "rarely): {} at depth {} after {} at depth {}",
                     tauUp[d], d + 1, tauUp[d - 1], d);
}

void TreeEasgd::setup(engine::PeerContext& ctx) {
  end_.start(ctx);
  const topology::Graph& graph = ctx.graph();
  parent_ = graph.parent(ctx.self());
  children_ = graph.children(ctx.self());
  const std::size_t depth = graph.depth(ctx.self());
  tauUp_ = depth > 0 ? atLevel(options_.tauUp, depth - 1) : 0;
  tauDown_ = atLevel(options_.tauDown, depth);
  ctx.metrics().set("tree-easgd.depth", static_cast<double>(depth));
  std::vector<engine::PeerId> parent;
  if (parent_) parent.push_back(*parent_);
  up_.reset(parent);
  down_.reset(children_);
}

void TreeEasgd::consume(engine::PeerContext& ctx) {
  std::vector<engine::Incoming> received;
  const engine::Expected expected{.payloads = {ctx.params().size()}};
  const bool compressed = ctx.compression().enabled();
  for (engine::Incoming& m : ctx.inbox().drain(kModel)) {
    if (!engine::acceptMessage(m, expected, ctx.metrics(), name())) continue;
    // Compressed, the estimate a message makes is bounded where it is made (PublicEstimates).
    // (The upload, a copy on CUDA, only when there is a bound to check.)
    if (!compressed && ctx.normBound().enabled() &&
        !engine::acceptNearOwn(ctx.compute(), m, ctx.upload(m.payload(0)), ctx.params(),
                               ctx.normBound(), ctx.metrics(), name()))
      continue;
    received.push_back(std::move(m));
  }
  if (compressed) {
    consumeEstimates(ctx, std::move(received));
    return;
  }
  // k sequential pulls w = (1 - a) w + a w_j fold into one weighted sum: (1 - a)^k on w and
  // a (1 - a)^(k - j) on the j-th model; batches of kMaxWeightedInputs - 1 models.
  constexpr std::size_t kBatch = kernels::Compute::kMaxWeightedInputs - 1;
  const double a = options_.alpha;
  for (std::size_t begin = 0; begin < received.size(); begin += kBatch) {
    const std::size_t end = std::min(received.size(), begin + kBatch);
    const std::size_t k = end - begin;
    std::vector<engine::DeviceView> models;
    models.reserve(k);
    std::vector<kernels::WeightedInput> inputs{
        {static_cast<float>(std::pow(1 - a, static_cast<double>(k))), ctx.params()}};
    for (std::size_t j = begin; j < end; ++j) {
      models.push_back(ctx.upload(received[j].payload(0)));
      inputs.push_back({static_cast<float>(a * std::pow(1 - a, static_cast<double>(end - 1 - j))),
                        models.back()});
    }
    ctx.compute().weightedSum(ctx.params(), inputs);
  }
  if (!received.empty())
    ctx.metrics().add("tree-easgd.merged", static_cast<double>(received.size()));
}

void TreeEasgd::consumeEstimates(engine::PeerContext& ctx, std::vector<engine::Incoming> received) {
  const float a = static_cast<float>(options_.alpha);
  std::size_t merged = 0;
  for (const engine::Incoming& m : received) {
    const bool fromParent = parent_ && m.from == *parent_;
    const bool fromChild = std::find(children_.begin(), children_.end(), m.from) != children_.end();
    std::optional<std::span<const float>> x;
    engine::DeviceView whole;
    if (fromParent || fromChild) {
      PublicEstimates& stream = fromParent ? up_ : down_;
      stream.receive(ctx, m);
      x = stream.of(m.from);
    } else if (m.integers.empty() || m.integers[0] == PublicEstimates::kAnchor) {
      whole = ctx.upload(m.payload(0));  // a former neighbour's whole model
      x = whole;
    } else {
      ctx.metrics().add("tree-easgd.unusable", 1);
    }
    if (!x) continue;  // an estimate not known yet: its anchor is asked for
    ctx.compute().weightedSum(ctx.params(), {{1 - a, ctx.params()}, {a, *x}});
    ++merged;
  }
  if (merged > 0) ctx.metrics().add("tree-easgd.merged", static_cast<double>(merged));
}

void TreeEasgd::afterStep(engine::PeerContext& ctx) {
  end_.update(ctx);
  const std::uint64_t done = ctx.step() + 1;  // local steps done, this one included
  const bool compressed = ctx.compression().enabled();
  const engine::Message model{.kind = kModel, .step = done, .payloads = {ctx.params()}};
  if (parent_ && done % tauUp_ == 0) {
    if (compressed) {
      up_.send(ctx, std::span<const engine::PeerId>(&*parent_, 1), ctx.params(),
               {.kind = kModel, .step = done});
    } else {
      ctx.send(*parent_, model);
    }
    ctx.metrics().add("tree-easgd.sent_up", 1);
  }
  if (!children_.empty() && done % tauDown_ == 0) {
    if (compressed) {
      down_.send(ctx, children_, ctx.params(), {.kind = kModel, .step = done});
    } else {
      ctx.send(children_, model);
    }
    ctx.metrics().add("tree-easgd.sent_down", static_cast<double>(children_.size()));
  }
}

void TreeEasgd::finish(engine::PeerContext& ctx) {
  if (const std::size_t late = ctx.inbox().drain(kModel).size(); late > 0)
    ctx.metrics().add("tree-easgd.dropped", static_cast<double>(late));
}

}  // namespace gossamer::algorithms
