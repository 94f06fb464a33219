#include "engine/algorithm.h"

#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"

namespace gossamer::engine {

std::span<const float> Incoming::payload(std::size_t index) const {
  GOSSAMER_ENFORCE(index < payloads_.size(),
                   "message of kind {} from peer {:016x} has {} payloads, not {}", kind, from,
                   payloads_.size(), index + 1);
  return payloads_[index].data;
}

double Incoming::scalar(std::size_t index) const {
  GOSSAMER_ENFORCE(index < scalars.size(),
                   "message of kind {} from peer {:016x} has {} scalars, not {}", kind, from,
                   scalars.size(), index + 1);
  return scalars[index];
}

void Incoming::addPayload(std::span<const float> data, std::shared_ptr<const void> owner) {
  payloads_.push_back(Held{data, std::move(owner)});
}

std::uint64_t Tags::forRound(std::uint32_t kind, std::uint64_t step, std::uint32_t round) {
  // splitmix64 over the three values; the top bit is left clear (fresh() tags set it). Each
  // round is a bijection of x for a fixed v and of v for a fixed x, so two tags that differ in one
  // value collide only if their mixes differ in the top bit alone (starting from x = key instead
  // made x ^ (x + c), which maps rounds 0 and 2 alike).
  const std::uint64_t key = (static_cast<std::uint64_t>(kind) << 32) ^ round;
  std::uint64_t x = 0;
  for (std::uint64_t v : {key, step}) {
    x ^= v + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
  }
  return x & ~(std::uint64_t{1} << 63);
}

double Algorithm::step(PeerContext& ctx) {
  beforeStep(ctx);
  const double loss = ctx.computeGradients();
  ctx.applyOptimizer();
  afterStep(ctx);
  return loss;
}

void Algorithm::join(PeerContext& ctx) {
  std::vector<PeerId> candidates;
  for (const topology::WeightedPeer& n : ctx.graph().inNeighbors(ctx.self()))
    candidates.push_back(n.id);
  for (PeerId member : ctx.members()) {
    if (member != ctx.self() &&
        std::find(candidates.begin(), candidates.end(), member) == candidates.end())
      candidates.push_back(member);
  }
  for (PeerId from : candidates) {
    std::optional<Incoming> model = ctx.pullModel(from, ctx.commTimeout());
    if (!model || model->payloadCount() != 1 || model->payload(0).size() != ctx.params().size())
      continue;
    ctx.compute().upload(ctx.params(), model->payload(0));
    ctx.optimizer().resetState();
    ctx.adoptStep(model->step);
    log::get("peer")->info("peer {:016x} joined at step {} with the model of {:016x}", ctx.self(),
                           model->step, from);
    return;
  }
  log::get("peer")->warn("peer {:016x}: no member sent its model; starting from the initial one",
                         ctx.self());
}

}  // namespace gossamer::engine
