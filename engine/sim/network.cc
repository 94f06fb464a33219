// The simulated world's links: a send becomes one frame per recipient on the pair's
// net::shaped::LinkSchedule (partitions and added loss applied), delivered to the inbox or to
// serve() at its virtual arrival; the runtime's finished and released marks travel the same way.
#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/sim/context.h"

namespace gossamer::engine::sim::detail {
namespace {

Incoming incomingOf(const std::shared_ptr<const Wire>& wire) {
  Incoming in = wire->header;
  for (const std::vector<float>& p : wire->payloads) in.addPayload(std::span<const float>(p), wire);
  return in;
}

}  // namespace

bool World::phaseSeen(const SimPeer& peer, const SimPeer& observer, Phase phase) const {
  if (peer.phase < phase) return false;
  if (now_ <
      (phase == Phase::released ? peer.figures.releasedAt : peer.figures.finishedAt) + markDelay_)
    return false;
  const std::map<PeerId, std::size_t>& inflight =
      phase == Phase::released ? observer.heard.inflightAllFrom : observer.heard.inflightFrom;
  const auto it = inflight.find(peer.id);
  return it == inflight.end() || it->second == 0;
}

double World::extraLoss(PeerId a, PeerId b) const {
  double keep = 1;
  for (PeerId p : {a, b}) {
    const auto it = loss_.find(p);
    if (it != loss_.end() && now_ < it->second.first) keep *= 1 - it->second.second;
  }
  return 1 - keep;
}

bool World::partitioned(PeerId a, PeerId b) const {
  for (PeerId p : {a, b}) {
    const auto it = partitions_.find(p);
    if (it != partitions_.end() && now_ < it->second) return true;
  }
  return false;
}

void World::send(SimPeer& from, std::span<const PeerId> to, const Message& message, bool serve,
                 bool checkView) {
  if (to.empty()) return;  // nothing encoded, as by the runtime's Messenger
  // The payloads as the runtime sends them: encoded where the message marks them compressible and
  // the run has a codec (residuals and `sent` spans updated), else float32. serve()'s replies,
  // which the runtime encodes on its io thread's CPU Compute, encode the same with the one here.
  const runtime::WirePayloads encoded = from.parts.codec->encode(message);
  auto wire = std::make_shared<Wire>();
  wire->header.from = from.id;
  wire->header.kind = message.kind;
  wire->header.step = message.step;
  wire->header.tag = message.tag;
  wire->header.scalars = message.scalars;
  wire->header.integers = message.integers;
  wire->serve = serve;
  wire->beforeFinish = from.phase == Phase::waiting || from.phase == Phase::training;
  std::size_t bytes = kFrameHeaderBytes + 8 * (message.scalars.size() + message.integers.size());
  for (std::size_t i = 0; i < message.payloads.size(); ++i) {
    // Decoded once for every recipient, by the code a receiver runs (all decode the same bytes).
    const net::wire::PayloadDescriptor& descriptor = encoded.descriptors[i];
    const std::span<const std::byte> sent = encoded.bytes.spans[i];
    net::Payload payload(std::span<std::byte>(const_cast<std::byte*>(sent.data()), sent.size()),
                         nullptr);  // read only
    const runtime::DecodedPayload decoded = from.parts.codec->decode(descriptor, payload);
    GOSSAMER_ENFORCE(decoded.error.empty(), "peer {}: its own payload {} was refused: {}", from.id,
                     i, decoded.error);
    wire->payloads.emplace_back(decoded.data.begin(), decoded.data.end());
    bytes +=
        sent.size() +
        (descriptor.encoding.codec == net::wire::PayloadEncoding::Codec::none ? 0 : kEncodingBytes);
  }
  wire->bytes = bytes;
  std::shared_ptr<const Wire> frozen = std::move(wire);
  for (PeerId target : to) {
    if (target == from.id) {
      // To self: handed over as if it had arrived (the runtime's Messenger does so), no link.
      if (frozen->beforeFinish) ++from.heard.inflightFrom[from.id];
      ++from.heard.inflightAllFrom[from.id];
      at(now_, [this, frozen, target, life = from.life] { deliver(frozen, target, life); });
      continue;
    }
    if (checkView && !std::binary_search(from.swim.view.begin(), from.swim.view.end(), target)) {
      log::get("sim")->debug("peer {}: send to {} outside its view skipped", from.id, target);
      continue;
    }
    ++result_.messages;
    SimPeer* receiver = current(target);
    if (receiver == nullptr || receiver->phase == Phase::dead || receiver->phase == Phase::left ||
        partitioned(from.id, target)) {
      ++result_.dropped;
      continue;
    }
    if (message.kind < kMaxAlgorithmKind) from.figures.bytesSent += bytes;
    LinkState& link = links_[{from.id, target}];
    if (!link.schedule) {
      // Peer id i is profile index i - 1, as in a local cluster.
      link.schedule = std::make_unique<net::shaped::LinkSchedule>(
          config_.network.between(from.id - 1, target - 1),
          net::shaped::mixSeed(config_.training.seed, (from.id << 32) ^ target));
    }
    const net::shaped::LinkSchedule::Slot slot =
        link.schedule->admit(now_, bytes, extraLoss(from.id, target));
    if (slot.dropped) {
      ++result_.dropped;
      continue;
    }
    link.lastDelivery = slot.deliverAt;
    if (frozen->beforeFinish) ++receiver->heard.inflightFrom[from.id];
    ++receiver->heard.inflightAllFrom[from.id];
    const std::size_t life = receiver->life;
    at(slot.deliverAt, [this, frozen, target, life] { deliver(frozen, target, life); });
  }
}

void World::deliver(const std::shared_ptr<const Wire>& wire, PeerId to, std::size_t life) {
  SimPeer* peer = current(to);
  if (peer == nullptr || peer->life != life) {
    ++result_.dropped;  // sent to a life that has ended
    return;
  }
  if (auto it = peer->heard.inflightFrom.find(wire->header.from);
      wire->beforeFinish && it != peer->heard.inflightFrom.end() && it->second > 0)
    --it->second;
  if (auto it = peer->heard.inflightAllFrom.find(wire->header.from);
      it != peer->heard.inflightAllFrom.end() && it->second > 0)
    --it->second;
  if (peer->phase == Phase::dead || peer->phase == Phase::left ||
      partitioned(wire->header.from, to)) {
    ++result_.dropped;
    return;
  }
  if (wire->header.kind == kPullKind) {
    // The runtime's model pull: answered with the params and step as they are now.
    Message reply{.kind = kPullReplyKind, .step = peer->step, .tag = wire->header.tag};
    if (peer->parts.learner) reply.payloads = {peer->parts.learner->params()};
    send(*peer, std::span<const PeerId>(&wire->header.from, 1), reply, false, false);
    return;
  }
  if (wire->serve) {
    if (!peer->serveOpen) {
      // Held back until setup in the runtime; here it comes again shortly (rare: a joiner).
      at(now_ + std::chrono::milliseconds(1), [this, wire, to, life] {
        if (SimPeer* p = current(to); p != nullptr && p->life == life) {
          if (wire->beforeFinish) ++p->heard.inflightFrom[wire->header.from];
          ++p->heard.inflightAllFrom[wire->header.from];
        }
        deliver(wire, to, life);
      });
      return;
    }
    try {
      peer->parts.algorithm->serve(*peer->parts.serveContext, incomingOf(wire));
    } catch (const std::exception& e) {
      log::get("sim")->error("peer {}: {}::serve failed on a message of kind {} from {}: {}", to,
                             peer->parts.algorithm->name(), wire->header.kind, wire->header.from,
                             e.what());
    }
    peer->poke();
    return;
  }
  std::uint64_t& heard = peer->heard.steps[wire->header.from];
  heard = std::max(heard, wire->header.step);
  peer->inbox.push(incomingOf(wire));
  peer->poke();
}

}  // namespace gossamer::engine::sim::detail
