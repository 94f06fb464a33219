// GoSGD (gosgd.h): the push-sum rule (merge what arrived before a step, push half the weight
// after it) on ReliableDelivery (reliable_delivery.h), which keeps every transfer in escrow until
// it is acknowledged; then the messages that carry it, and finish, leave, join and checkpoints.
// Lives and the checks a transfer passes are in gosgd_lives.cc.
#include "algorithms/gosgd.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "algorithms/network_survey.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

using engine::Clock;
using engine::PeerId;

// How often finish() and leave() repeat their announcements while they wait, and how long
// finish() goes on announcing once it is done (so that a lost SETTLED costs the others nothing).
constexpr Clock::duration kTick = std::chrono::milliseconds(5);
constexpr Clock::duration kLinger = 4 * kTick;

bool contains(const std::vector<PeerId>& ids, PeerId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// This life's number: the wall clock in ns when it began (never 0; in a simulated world, the
// virtual time: PeerContext::wallNow).
std::uint64_t newLife(std::chrono::system_clock::time_point wall) {
  const auto now = wall.time_since_epoch();
  return std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(
             std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
}

}  // namespace

void GosgdOptions::validate() const {
  GOSSAMER_ENFORCE(p.valueOr(1) > 0 && p.valueOr(1) <= 1,
                   "gosgd.p must be in (0, 1] or auto, not {}", p.valueOr(1));
  SharedEnd::validate("gosgd", end);
  GOSSAMER_ENFORCE(retransmit > 0 && retransmit <= 1, "gosgd.retransmit must be in (0, 1], not {}",
                   retransmit);
  GOSSAMER_ENFORCE(maxInflightBytes >= 0,
                   "gosgd.max_inflight_bytes must be >= 0 (0: estimated), not {}",
                   maxInflightBytes);
  GOSSAMER_ENFORCE(std::isfinite(gamma) && gamma >= 0 && gamma <= 1,
                   "gosgd.gamma must be in (0, 1] (0: the codec's default), not {}", gamma);
}

double GosgdOptions::gammaFor(const kernels::Codec& codec) const {
  return gamma > 0 ? gamma : chocoGamma(codec);
}

Gosgd::Gosgd(GosgdOptions options) : options_(options), end_("gosgd", options.end) {}

void Gosgd::fitP(engine::PeerContext& ctx) {
  if (!options_.p.isAuto()) return;
  const double step = ownStepSeconds(ctx, stepClock_);
  if (!(step > 0)) return;
  // The mean seconds one model takes on this peer's links to the members it measured (a draw
  // picks a member at random).
  const double bytes = static_cast<double>(transferBytes(ctx));
  double wire = 0;
  std::size_t measured = 0;
  for (const auto& [peer, path] : ctx.measuredPaths()) {
    if (peer == ctx.self() || !contains(ctx.members(), peer)) continue;
    ++measured;
    if (path.bytesPerSecond > 0 && std::isfinite(path.bytesPerSecond))
      wire += bytes / path.bytesPerSecond;
  }
  if (measured == 0) return;
  const double p = chooseGossipProbability(step, wire / static_cast<double>(measured));
  // Two digits: the measurements' noise does not move it.
  const double rounded = std::max(std::round(p * 100) / 100, kMinGossip);
  if (chosenP_ == rounded) return;
  chosenP_ = rounded;
  reportChosen(ctx, "gosgd", "p", rounded,
               fmt::format("step {:.4f} s, a model of {:.1f} MB {:.4f} s on a link on average",
                           step, bytes / 1e6, wire / static_cast<double>(measured)));
}

// ---- The rule: merge before a step, push after it -----------------------------------------------

void Gosgd::setup(engine::PeerContext& ctx) {
  if (life_ == 0) life_ = newLife(ctx.wallNow());  // before anything is sent
  end_.start(ctx);
  // alpha_i = 1/n once, at the start; later membership changes keep every peer's weight.
  if (!started_) {
    alpha_ = 1.0 / static_cast<double>(ctx.members().size());
    started_ = true;
  }
  // A peer that left the view ended its life (recorded, and sent to the others), and the escrow
  // toward it stays unresolved for good: it may have merged it before it went, so it is not
  // reclaimed, but counted as lost with that peer.
  for (const auto& [peer, life] : lives_)
    if (!contains(ctx.members(), peer)) endLife(ctx, peer, false);
  delivery_.loseAllBut(ctx.members());
  // The view changed: every stream anchors again (see "Compressed").
  estimates_.reset(ctx.members());
  publish(ctx);
  fitP(ctx);
}

void Gosgd::beforeStep(engine::PeerContext& ctx) {
  exchange(ctx);
  publish(ctx);
}

void Gosgd::merge(engine::PeerContext& ctx, std::vector<engine::Incoming>& transfers) {
  std::map<PeerId, std::vector<std::uint64_t>> acks, missed;
  // w = (a_i w + sum a_j w_j) / (a_i + sum a_j) over a batch that fits one weightedSum.
  double total = alpha_;
  std::vector<engine::DeviceView> models;
  std::vector<kernels::WeightedInput> inputs;
  std::size_t merged = 0;
  const auto flush = [&] {
    if (inputs.empty()) return;
    if (total > 0) {
      inputs.insert(inputs.begin(), {static_cast<float>(alpha_ / total), ctx.params()});
      for (std::size_t k = 1; k < inputs.size(); ++k)
        inputs[k].weight = static_cast<float>(inputs[k].weight / total);
      ctx.compute().weightedSum(ctx.params(), inputs);
      alpha_ = total;
    } else {
      // Weight 0 on both sides (peers that joined late or were restored with weight 0 and got
      // none yet): no mass moves, and the weighted average would be 0/0. Keep w_i.
      ctx.metrics().add("gosgd.weightless", static_cast<double>(inputs.size()));
    }
    inputs.clear();
    models.clear();
  };
  // In arrival order, each transfer whole (dedup, decoding, merge) before the next: a resent
  // anchor behind a difference that missed is then the copy that is merged.
  for (const engine::Incoming& m : transfers) {
    const std::uint64_t id = m.integer(0);
    const ReliableDelivery::Arrival arrival = delivery_.arrived(m.from, id, m.integer(1));
    if (arrival == ReliableDelivery::Arrival::kJudged) {  // an outlier, judged once
      ctx.metrics().add("gosgd.outliers_resent", 1);
      continue;
    }
    if (arrival == ReliableDelivery::Arrival::kDuplicate) {  // merged, and the ack was lost
      acks[m.from].push_back(id);
      ctx.metrics().add("gosgd.duplicates", 1);
      continue;
    }
    // The sender's model: the payload, or its estimate here plus the difference.
    const bool estimated = m.integers.size() == 4;
    std::optional<engine::DeviceView> model =
        estimated ? estimates_.receive(ctx, m.from, m.integer(2), m.integer(3), m.payload(0))
                  : std::optional(ctx.upload(m.payload(0)));
    if (!model) {
      // Not merged, not acknowledged: the sender resends it as an anchor when told so.
      missed[m.from].push_back(id);
      continue;
    }
    // Under the run's NormBound, a model far from w_i is an outlier: not merged, not acknowledged
    // (its weight stays in the sender's escrow, as a refused transfer's does).
    if (!engine::acceptNearOwn(ctx.compute(), m, *model, ctx.params(), ctx.normBound(),
                               ctx.metrics(), name())) {
      delivery_.judged(m.from, id);
      continue;
    }
    delivery_.merged(m.from, id, m.scalar(0));
    mergedFrom_[m.from] = ctx.now();
    acks[m.from].push_back(id);
    ++merged;
    total += m.scalar(0);
    models.push_back(std::move(*model));
    inputs.push_back({static_cast<float>(m.scalar(0)), models.back()});
    // An estimate changes with the next difference from its sender: merge it now.
    if ((estimated && m.integer(2) == PublicEstimates::kDifference) ||
        inputs.size() + 1 == kernels::Compute::kMaxWeightedInputs)
      flush();
  }
  flush();
  if (merged > 0) ctx.metrics().add("gosgd.merged", static_cast<double>(merged));
  const auto reply = [&](std::uint32_t kind, PeerId to, const std::vector<std::uint64_t>& ids) {
    engine::Message message = stamped(ctx, kind, to);
    message.integers.insert(message.integers.end(), ids.begin(), ids.end());
    ctx.send(to, message);
  };
  for (const auto& [to, ids] : acks) reply(kAck, to, ids);
  for (const auto& [to, ids] : missed) reply(kMissed, to, ids);
}

void Gosgd::afterStep(engine::PeerContext& ctx) {
  end_.update(ctx);
  stepClock_.tick(ctx.now());
  if (surveys(ctx.step() + 1, ViewFit::kSurveyEvery)) fitP(ctx);
  // A peer without weight (a late joiner, or one restored with weight 0, that has received none
  // yet) has nothing to give: a transfer of weight 0 moves no mass, and two of them meeting
  // would make a 0/0 average.
  if (!(alpha_ > 0)) return;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  if (coin(ctx.rng()) >= chosenP_.value_or(options_.p.valueOr(GosgdOptions::kProvisionalP))) return;
  // Bytes in flight: every transfer is one model (a peer whose acks stop coming stops gossiping,
  // and keeps its weight, instead of piling up model copies).
  const std::size_t bytes = transferBytes(ctx);
  if (!delivery_.allows(bytes)) {
    ctx.metrics().add("gosgd.throttled", 1);
    ++throttled_;
    return;
  }
  std::optional<PeerId> partner;
  for (int attempt = 0; attempt < 4 && (!partner || !choosable(*partner)); ++attempt)
    partner = ctx.graph().randomPartner(ctx.self(), ctx.rng());
  if (!partner || !choosable(*partner)) return;
  transfer(ctx, *partner, false);
  inflightPeak_ = std::max(inflightPeak_, delivery_.bytesInFlight());
  publish(ctx);
}

void Gosgd::transfer(engine::PeerContext& ctx, PeerId to, bool whole) {
  // Compressed (see "Compressed"): a difference carries gamma alpha_i / 2 and the decoded model v;
  // an anchor (and a whole handover) carries alpha_i / 2 (alpha_i) and w itself.
  const bool difference = ctx.compression().enabled() && !whole && estimates_.shares(to);
  const double gamma = difference ? options_.gammaFor(ctx.compression().codec) : 1.0;
  const double weight = whole ? alpha_ : gamma * alpha_ / 2;
  const std::uint64_t id = delivery_.escrow(to, weight, ctx.compute(), ctx.params().size(),
                                            transferBytes(ctx), ctx.now(), retransmitAfter(ctx));
  ReliableDelivery::Transfer& t = delivery_.transfer(id);
  ctx.metrics().add("gosgd.sent", 1);
  if (!ctx.compression().enabled()) {
    ctx.compute().copy(t.model->span(), ctx.params());
    alpha_ -= weight;
    sendEscrow(ctx, id);
    return;
  }
  engine::Message message = stamped(ctx, kTransfer, to, alpha_ - weight);
  message.scalars.push_back(weight);
  message.integers.insert(message.integers.end(), {id, delivery_.floor(to, id)});
  if (difference) {
    const PairEstimates::Sent sent = estimates_.send(ctx, to, ctx.params(), message);
    t.number = sent.number;
    ctx.compute().copy(t.model->span(), sent.estimate);  // v, what the receiver merges
    // The mass that did not travel stays here: alpha_i w_i - a v over the weight left.
    const double left = alpha_ - weight;
    ctx.compute().weightedSum(ctx.params(),
                              {{static_cast<float>(alpha_ / left), ctx.params()},
                               {static_cast<float>(-weight / left), t.model->span()}});
  } else {
    ctx.compute().copy(t.model->span(), ctx.params());
    message.owner = t.model;
    t.number = estimates_.send(ctx, to, t.model->span(), message, true).number;
  }
  alpha_ -= weight;
}

// ---- Delivery: acks, retransmissions, anchors ---------------------------------------------------

void Gosgd::exchange(engine::PeerContext& ctx) {
  std::vector<engine::Incoming> transfers;
  for (engine::Incoming& m : ctx.inbox().drain()) {
    if (!admit(ctx, m)) continue;
    switch (m.kind) {
      case kTransfer:
        if (acceptTransfer(ctx, m)) transfers.push_back(std::move(m));
        break;
      case kAck:
        if (engine::acceptMessage(m, {}, ctx.metrics(), name()))
          delivery_.acked(m.from, m.integers, ctx.now());
        break;
      case kMissed:
        if (!engine::acceptMessage(m, {.integers = 1}, ctx.metrics(), name())) break;
        resendAnchors(ctx, m.from, *std::max_element(m.integers.begin(), m.integers.end()));
        break;
      case kSettled:
        settled_.insert(m.from);
        readDead(ctx, m);
        break;
      case kDead:
        readDead(ctx, m);
        break;
      case kLeaving:
        leavers_.insert(m.from);
        break;
      default:
        refuse(ctx, m, "not a gosgd message kind");
    }
  }
  merge(ctx, transfers);
  const Clock::time_point now = ctx.now();
  for (std::uint64_t id : delivery_.due(now, retransmitAfter(ctx))) {
    sendEscrow(ctx, id);
    ctx.metrics().add("gosgd.retransmits", 1);
  }
  // A leaver waits for every member to owe it nothing; tell it so (again every tick).
  for (PeerId leaver : leavers_) {
    if (!contains(ctx.members(), leaver)) continue;
    Clock::time_point& last = settledSent_[leaver];
    if (delivery_.owes(leaver) || now - last < kTick) continue;
    engine::Message settled = stamped(ctx, kSettled, leaver);
    appendDead(settled);
    ctx.send(leaver, settled);
    last = now;
  }
}

void Gosgd::sendEscrow(engine::PeerContext& ctx, std::uint64_t id) {
  const ReliableDelivery::Transfer& t = delivery_.transfer(id);
  if (!t.model) return;  // released after finish() or leave()
  // The escrowed model is never written while it is in escrow: it is sent from where it is (no
  // staging copy on a CPU peer), the buffer kept alive by the message until the transport is done.
  // On a stream of estimates it goes as the anchor of its number: the model first sent, in float32.
  engine::Message message = stamped(ctx, kTransfer, t.to);
  message.scalars.push_back(t.weight);
  message.integers.insert(message.integers.end(), {id, delivery_.floor(t.to, id)});
  message.payloads = {t.model->span()};
  message.owner = t.model;
  if (t.number > 0)
    message.integers.insert(message.integers.end(), {PublicEstimates::kAnchor, t.number});
  ctx.send(t.to, message);
}

void Gosgd::resendAnchors(engine::PeerContext& ctx, PeerId to, std::uint64_t upTo) {
  // Its estimate of this peer is unknown until an anchor; the transfers it could not decode (and
  // any unacknowledged before them, lost on the way) go again now, each the anchor of its model.
  estimates_.unshare(to);
  for (std::uint64_t id : delivery_.resend(to, upTo, ctx.now(), retransmitAfter(ctx))) {
    sendEscrow(ctx, id);
    ctx.metrics().add("gosgd.anchors_requested", 1);
  }
}

bool Gosgd::choosable(PeerId peer) const {
  return leavers_.count(peer) == 0 && !delivery_.overdue(peer);
}

Clock::duration Gosgd::retransmitAfter(engine::PeerContext& ctx) const {
  return std::chrono::duration_cast<Clock::duration>(ctx.commTimeout() * options_.retransmit);
}

std::size_t Gosgd::transferBytes(engine::PeerContext& ctx) const {
  return ctx.params().size() * sizeof(float);
}

Gosgd::Ledger Gosgd::ledger() const {
  return Ledger{.alpha = alpha_,
                .mergedFrom = delivery_.mergedFrom(),
                .ackedBy = delivery_.ackedBy(),
                .escrowTo = delivery_.escrowTo(),
                .lostTo = delivery_.lostTo()};
}

void Gosgd::publish(engine::PeerContext& ctx) {
  ctx.metrics().set("gosgd.alpha", alpha_);
  ctx.metrics().set("gosgd.escrow", escrowed());
  ctx.metrics().set("gosgd.lost", lost());
  ctx.metrics().set("gosgd.dead_weight", deadWeight(ctx.members(), ctx.self()));
  const InflightBound& bound = delivery_.bound();
  ctx.metrics().set("gosgd.inflight_limit_bytes",
                    static_cast<double>(bound.limit(transferBytes(ctx))));
  ctx.metrics().set("gosgd.inflight_peak_bytes", static_cast<double>(inflightPeak_));
  ctx.metrics().set("gosgd.ack_rtt_ms", bound.rttSeconds() * 1e3);
  ctx.metrics().set("gosgd.ack_rate_mbps", bound.rateBytesPerSecond() * 8e-6);
}

// ---- Finish, leave, join and checkpoints --------------------------------------------------------

void Gosgd::broadcast(engine::PeerContext& ctx, std::uint32_t kind, const std::vector<PeerId>& to) {
  for (PeerId peer : to) {
    engine::Message message = stamped(ctx, kind, peer);
    if (kind == kSettled) appendDead(message);
    ctx.send(peer, message);
  }
}

std::vector<PeerId> Gosgd::unsettledOthers(engine::PeerContext& ctx) const {
  std::vector<PeerId> out;
  for (PeerId peer : ctx.members())
    if (peer != ctx.self() && settled_.count(peer) == 0) out.push_back(peer);
  return out;
}

template <typename Done>
bool Gosgd::waitUntil(engine::PeerContext& ctx, std::uint32_t announce, Done done) {
  const Clock::time_point deadline = ctx.now() + ctx.commTimeout();
  Clock::time_point nextAnnounce{}, doneSince{};
  bool wasDone = false;
  for (;;) {
    exchange(ctx);
    const Clock::time_point now = ctx.now();
    std::vector<PeerId> others;
    for (PeerId peer : ctx.members())
      if (peer != ctx.self()) others.push_back(peer);
    const std::vector<PeerId> waiting = unsettledOthers(ctx);
    const auto [ready, finished] = done(waiting);
    if (ready && now >= nextAnnounce) {
      broadcast(ctx, announce, announce == kSettled ? others : waiting);
      nextAnnounce = now + kTick;
    }
    if (finished) {
      if (!wasDone) doneSince = now;
      wasDone = true;
      if (announce != kSettled || now - doneSince >= kLinger) return true;
    }
    if (now >= deadline) return false;
    // Sleep until a message comes (an ack, a transfer, an announcement) or the next tick, when
    // the announcements and the retransmissions are due again.
    ctx.inbox().wait(std::nullopt, std::min(deadline, now + kTick));
  }
}

void Gosgd::finish(engine::PeerContext& ctx) {
  // Merge what is left and settle: every transfer acknowledged, and nobody owes us anything.
  const bool settled = waitUntil(ctx, kSettled, [&](const std::vector<PeerId>& waiting) {
    const bool mine = delivery_.empty();
    return std::pair{mine, mine && waiting.empty()};
  });
  if (!settled) {
    ctx.metrics().add("gosgd.unsettled", 1);
    log::get("algorithms")
        ->warn(
            "peer {:016x}: gosgd finish: {} transfers unacknowledged (weight {}) and {} member(s) "
            "not settled (still training, or their last transfers unanswered) after {} ms",
            ctx.self(), delivery_.size(), escrowed(), unsettledOthers(ctx).size(),
            std::chrono::duration_cast<std::chrono::milliseconds>(ctx.commTimeout()).count());
  }
  publish(ctx);
  log::get("algorithms")
      ->info(
          "peer {:016x}: gosgd sent {} transfers ({} retransmitted), skipped {} draws for the "
          "bound on bytes in flight ({} bytes, {:.1f} transfers; ack rtt {:.1f} ms, {:.1f} "
          "Mbit/s)",
          ctx.self(), delivery_.sends(), delivery_.retransmits(), throttled_,
          delivery_.bound().limit(transferBytes(ctx)),
          static_cast<double>(delivery_.bound().limit(transferBytes(ctx))) /
              static_cast<double>(std::max<std::size_t>(transferBytes(ctx), 1)),
          delivery_.bound().rttSeconds() * 1e3, delivery_.bound().rateBytesPerSecond() * 8e-6);
  // Nothing is sent after this: the buffers go back to the Compute now, not whenever the
  // algorithm is destroyed.
  delivery_.release();
}

void Gosgd::leave(engine::PeerContext& ctx) {
  std::vector<PeerId> heirs;
  for (PeerId peer : ctx.members())
    if (peer != ctx.self()) heirs.push_back(peer);
  if (heirs.empty()) return;
  // Hand the whole weight (and whatever is merged meanwhile) to live peers that stay, and wait
  // until every member owes us nothing: then nothing unmerged is left behind.
  const bool clean = waitUntil(ctx, kLeaving, [&](const std::vector<PeerId>& waiting) {
    std::vector<PeerId> staying;
    for (PeerId peer : heirs)
      if (leavers_.count(peer) == 0) staying.push_back(peer);
    if (alpha_ > 0 && !staying.empty()) {
      std::uniform_int_distribution<std::size_t> pick(0, staying.size() - 1);
      transfer(ctx, staying[pick(ctx.rng())], true);
    }
    return std::pair{true, alpha_ == 0 && delivery_.empty() && waiting.empty()};
  });
  if (!clean) {
    ctx.metrics().add("gosgd.unsettled", 1);
    log::get("algorithms")
        ->warn("peer {:016x}: gosgd leave: weight {} not handed over, {} in escrow after {} ms",
               ctx.self(), alpha_, escrowed(),
               std::chrono::duration_cast<std::chrono::milliseconds>(ctx.commTimeout()).count());
  }
  publish(ctx);
  delivery_.release();
}

void Gosgd::join(engine::PeerContext& ctx) {
  Algorithm::join(ctx);
  // A newcomer brings no mass: weight 0 and a copy of a live peer's model.
  alpha_ = 0;
  started_ = true;
}

void Gosgd::saveState(engine::AlgorithmState& state) const {
  state.values["alpha"] = alpha_ + escrowed();
}

void Gosgd::loadState(const engine::AlgorithmState& state) {
  const auto it = state.values.find("alpha");
  if (it == state.values.end()) return;  // a checkpoint of another algorithm's state: setup()
  GOSSAMER_ENFORCE(it->second >= 0 && it->second <= 1,
                   "gosgd: the checkpoint's weight {} is not in [0, 1]", it->second);
  alpha_ = it->second;
  started_ = true;
}

void Gosgd::resumedLate(engine::PeerContext& ctx) {
  log::get("algorithms")
      ->info(
          "gosgd: peer {:016x} resumed into a running cluster with weight 0 (its checkpoint "
          "held {:.6g}, counted as lost by the others when it failed)",
          ctx.self(), alpha_);
  ctx.metrics().set("gosgd.restored_weight_dropped", alpha_);
  alpha_ = 0;
}

}  // namespace gossamer::algorithms
