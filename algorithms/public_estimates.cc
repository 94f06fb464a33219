#include "algorithms/public_estimates.h"

#include <algorithm>

#include "engine/base/log.h"

namespace gossamer::algorithms {

double chocoGamma(const kernels::Codec& codec) {
  // A sparse difference moves the estimates by a fraction of the way: a consensus step far
  // beyond that share oscillates and blows up (lr 0 on a ring of 5, 68 parameters: top-k 10%
  // converged at gamma <= 0.2 and diverged at 0.4, random-k 10% at 0.1 and 0.2, random-k 25% at
  // 0.25 and not at 0.4; Fashion-MNIST MLP, 4 peers, top-k 1%: 85.5% at 0.02, 85.6% at 0.05,
  // 85.9% at 0.15, diverged at 0.3). Twice the share is the safe end; tune upward.
  switch (codec.kind) {
    case kernels::CodecKind::kTopK:
      return std::min(1.0, 2 * codec.fraction);
    case kernels::CodecKind::kRandK:
      return codec.fraction;
    default:
      return 1.0;
  }
}

void PublicEstimates::reset(std::span<const engine::PeerId> neighbours) {
  ownShared_ = false;
  anchorAsked_ = false;
  std::erase_if(neighbours_, [&](const auto& entry) {
    return std::find(neighbours.begin(), neighbours.end(), entry.first) == neighbours.end();
  });
  for (engine::PeerId j : neighbours) neighbours_[j].known = false;
}

void PublicEstimates::send(engine::PeerContext& ctx, std::span<const engine::PeerId> to,
                           std::span<const float> w, engine::Message message) {
  if (to.empty()) return;  // nobody holds x^_i: nothing to keep in step
  kernels::Compute& compute = ctx.compute();
  if (own_.size() != w.size()) {
    own_ = compute.allocate<float>(w.size());
    difference_ = compute.allocate<float>(w.size());
    sent_ = compute.allocate<float>(w.size());
    ownShared_ = false;
  }
  // Without a codec a difference would travel whole: the model itself is as cheap and exact.
  const bool anchor = !ownShared_ || anchorAsked_ || !ctx.compression().enabled();
  const std::uint64_t seq = ++sequence_;
  message.integers = {anchor ? kAnchor : kDifference, seq};
  for (const auto& [j, estimate] : neighbours_)
    if (!estimate.known) message.integers.insert(message.integers.end(), {j, estimate.seq});
  if (anchor) {
    message.payloads = {w};
    message.compressible.clear();
    ctx.send(to, message);
    compute.copy(own_, w);
    ownShared_ = true;
    anchorAsked_ = false;
    lastAnchor_ = seq;
    ctx.metrics().add(who_ + ".anchors", 1);
    return;
  }
  compute.weightedSum(difference_, {{1.0f, w}, {-1.0f, own_}});
  message.payloads = {difference_};
  message.compressible = {{.payload = 0, .sent = sent_}};
  ctx.send(to, message);  // encodes now: sent_ holds what the receivers will decode
  compute.weightedSum(own_, {{1.0f, own_}, {1.0f, sent_}});
}

void PublicEstimates::receive(engine::PeerContext& ctx, const engine::Incoming& message) {
  const std::vector<std::uint64_t>& ints = message.integers;
  Estimate& estimate = neighbours_[message.from];
  // A message without integers is a peer's plain model (one that does not compress now).
  const bool plain = ints.empty();
  if (!plain && (ints.size() < 2 || ints.size() % 2 != 0 ||
                 (ints[0] != kAnchor && ints[0] != kDifference))) {
    log::get("algorithms")
        ->warn("{}: peer {:016x} sent a model whose integers ({} of them, form {}) are not an "
               "estimate's; treated as missing",
               who_, message.from, ints.size(), ints.empty() ? 0 : ints[0]);
    missed(message.from);
    return;
  }
  // Requests for this peer's anchor: (peer, the last number it saw from here). An anchor sent
  // after that number answers it (it is on its way: messages of one link arrive in order).
  for (std::size_t i = 2; i + 1 < ints.size(); i += 2)
    if (ints[i] == ctx.self() && (!lastAnchor_ || *lastAnchor_ <= ints[i + 1])) anchorAsked_ = true;

  kernels::Compute& compute = ctx.compute();
  const std::span<const float> payload = message.payload(0);
  const std::uint64_t number = plain ? 0 : ints[1];
  // A difference applies to the estimate of the message just before it, and to no other.
  const bool follows = estimate.known && number == estimate.seq + 1;
  estimate.seq = number;
  const bool anchor = plain || ints[0] == kAnchor;
  // Under a NormBound, the estimate this message makes must be near this peer's model: an
  // outlier is dropped like a lost message, and the next anchor heals it.
  const engine::NormBound bound = ctx.normBound();
  if (bound.enabled() && ctx.params().size() == payload.size() && (anchor || follows)) {
    const engine::DeviceView q = ctx.upload(payload);
    std::span<const float> made = q;
    if (!anchor) {
      if (difference_.size() != payload.size()) difference_ = compute.allocate<float>(payload.size());
      compute.weightedSum(difference_.span(), {{1.0f, estimate.x}, {1.0f, q}});
      made = difference_.span();
    }
    if (!engine::acceptNearOwn(compute, message, made, ctx.params(), bound, ctx.metrics(), who_)) {
      missed(message.from);
      return;
    }
  }
  if (anchor) {
    if (estimate.x.size() != payload.size()) estimate.x = compute.allocate<float>(payload.size());
    compute.upload(estimate.x.span(), payload);
    estimate.known = true;
    return;
  }
  if (follows && estimate.x.size() == payload.size()) {
    const engine::DeviceView q = ctx.upload(payload);
    compute.weightedSum(estimate.x, {{1.0f, estimate.x}, {1.0f, q}});  // as the sender did
    return;
  }
  missed(message.from);
  ctx.metrics().add(who_ + ".estimate_misses", 1);
}

void PublicEstimates::missed(engine::PeerId from) { neighbours_[from].known = false; }

std::optional<std::span<const float>> PublicEstimates::of(engine::PeerId j) const {
  const auto it = neighbours_.find(j);
  if (it == neighbours_.end() || !it->second.known) return std::nullopt;
  return it->second.x.span();
}

// ---- PairEstimates ----------------------------------------------------------------------------

void PairEstimates::reset(std::span<const engine::PeerId> members) {
  const auto gone = [&](const auto& entry) {
    return std::find(members.begin(), members.end(), entry.first) == members.end();
  };
  std::erase_if(out_, gone);
  std::erase_if(in_, gone);
  for (auto& [j, out] : out_) out.shared = false;
  for (auto& [j, in] : in_) in.known = false;
}

void PairEstimates::unshare(engine::PeerId to) {
  const auto it = out_.find(to);
  if (it != out_.end()) it->second.shared = false;
}

PairEstimates::Sent PairEstimates::send(engine::PeerContext& ctx, engine::PeerId to,
                                        std::span<const float> w, engine::Message message,
                                        bool anchor) {
  kernels::Compute& compute = ctx.compute();
  Out& out = out_[to];
  if (out.x.size() != w.size()) {
    out.x = compute.allocate<float>(w.size());
    out.shared = false;
  }
  if (difference_.size() != w.size()) {
    difference_ = compute.allocate<float>(w.size());
    sent_ = compute.allocate<float>(w.size());
  }
  // Without a codec a difference would travel whole: the model itself is as cheap and exact.
  anchor = anchor || !out.shared || !ctx.compression().enabled();
  const std::uint64_t form = anchor ? PublicEstimates::kAnchor : PublicEstimates::kDifference;
  const std::uint64_t number = ++out.number;
  message.integers.insert(message.integers.end(), {form, number});
  if (anchor) {
    message.payloads = {w};
    message.compressible.clear();
    ctx.send(to, message);
    compute.copy(out.x, w);
    out.shared = true;
    ctx.metrics().add(who_ + ".anchors", 1);
  } else {
    compute.weightedSum(difference_, {{1.0f, w}, {-1.0f, out.x}});
    message.payloads = {difference_};
    message.owner = nullptr;
    message.compressible = {{.payload = 0, .sent = sent_}};
    ctx.send(to, message);  // encodes now: sent_ holds what the receiver will decode
    compute.weightedSum(out.x, {{1.0f, out.x}, {1.0f, sent_}});
    ctx.metrics().add(who_ + ".differences", 1);
  }
  return Sent{.form = form, .number = number, .estimate = out.x.span()};
}

std::optional<engine::DeviceView> PairEstimates::receive(engine::PeerContext& ctx,
                                                         engine::PeerId from, std::uint64_t form,
                                                         std::uint64_t number,
                                                         std::span<const float> payload) {
  kernels::Compute& compute = ctx.compute();
  In& in = in_[from];
  if (form == PublicEstimates::kAnchor) {
    // An older anchor (a resent message) is a complete model, but the estimate stays the later one.
    if (!in.known || number > in.number) {
      if (in.x.size() != payload.size()) in.x = compute.allocate<float>(payload.size());
      compute.upload(in.x.span(), payload);
      in.known = true;
      in.number = number;
    }
    return ctx.upload(payload);
  }
  if (form == PublicEstimates::kDifference && in.known && number == in.number + 1 &&
      in.x.size() == payload.size()) {
    const engine::DeviceView q = ctx.upload(payload);
    compute.weightedSum(in.x, {{1.0f, in.x}, {1.0f, q}});  // as the sender did
    in.number = number;
    return engine::DeviceView(in.x.span(), nullptr);
  }
  in.known = false;
  ctx.metrics().add(who_ + ".estimate_misses", 1);
  return std::nullopt;
}

}  // namespace gossamer::algorithms
