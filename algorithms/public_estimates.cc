#include "algorithms/public_estimates.h"

#include <algorithm>

#include "engine/base/log.h"

namespace gossamer::algorithms {

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
  kernels::Compute& compute = ctx.compute();
  if (own_.size() != w.size()) {
    own_ = compute.allocate<float>(w.size());
    difference_ = compute.allocate<float>(w.size());
    sent_ = compute.allocate<float>(w.size());
    ownShared_ = false;
  }
  // Without a codec a difference would travel whole: the model itself is as cheap and exact.
  const bool anchor = !ownShared_ || anchorAsked_ || !ctx.compression().enabled();
  message.integers = {anchor ? kAnchor : kDifference};
  for (const auto& [j, estimate] : neighbours_)
    if (!estimate.known) message.integers.push_back(j);  // asking j for an anchor
  if (anchor) {
    message.payloads = {w};
    message.compressible.clear();
    ctx.send(to, message);
    compute.copy(own_, w);
    ownShared_ = true;
    anchorAsked_ = false;
    lastAnchor_ = message.step;
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
  const auto asked = message.integers.empty() ? message.integers.end() : message.integers.begin() + 1;
  // A request in a message of round s was sent before this peer's anchor of round s arrived
  // there: an anchor sent at s or later answers it.
  if (std::find(asked, message.integers.end(), ctx.self()) != message.integers.end() &&
      (!lastAnchor_ || *lastAnchor_ < message.step))
    anchorAsked_ = true;

  Estimate& estimate = neighbours_[message.from];
  kernels::Compute& compute = ctx.compute();
  const std::span<const float> payload = message.payload(0);
  // A message without integers is a peer's plain model (one that does not compress this round).
  const std::uint64_t form = message.integers.empty() ? kAnchor : message.integers[0];
  if (form == kAnchor) {
    if (estimate.x.size() != payload.size()) estimate.x = compute.allocate<float>(payload.size());
    compute.upload(estimate.x.span(), payload);
    estimate.known = true;
    return;
  }
  if (form == kDifference && estimate.known && estimate.x.size() == payload.size()) {
    const engine::DeviceView q = ctx.upload(payload);
    compute.weightedSum(estimate.x, {{1.0f, estimate.x}, {1.0f, q}});  // as the sender did
    return;
  }
  if (form != kDifference) {
    log::get("algorithms")
        ->warn("{}: peer {:016x} sent a model of unknown form {}; treated as missing", who_,
               message.from, form);
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

}  // namespace gossamer::algorithms
