#include "algorithms/adpsgd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/base/enforce.h"
#include "engine/base/log.h"

namespace gossamer::algorithms {
namespace {

using engine::Clock;
using engine::PeerId;

// How long finish() and leave() sleep at most between two looks at the inbox.
constexpr Clock::duration kTick = std::chrono::milliseconds(5);

bool contains(const std::vector<PeerId>& ids, PeerId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

void AdPsgdOptions::validate() const {
  GOSSAMER_ENFORCE(period >= 1, "ad-psgd.period must be at least 1, not {}", period);
  SharedEnd::validate("ad-psgd", end);
  GOSSAMER_ENFORCE(outstanding >= 1 && outstanding <= 64,
                   "ad-psgd.outstanding must be in [1, 64], not {}", outstanding);
  GOSSAMER_ENFORCE(std::isfinite(timeout) && timeout >= 0,
                   "ad-psgd.timeout must be >= 0 seconds (0: --comm-timeout), not {}", timeout);
}

bool AdPsgd::activeAt(std::size_t index, std::size_t count) {
  // Even positions are active; with an odd count the last position is even too, and on the ring
  // it neighbours position 0: it is made passive, so that no two active peers are adjacent.
  if (index % 2 != 0) return false;
  return !(count % 2 == 1 && index + 1 == count);
}

Clock::duration AdPsgd::timeout(engine::PeerContext& ctx) const {
  if (options_.timeout > 0)
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.timeout));
  return ctx.commTimeout();
}

void AdPsgd::publish(engine::PeerContext& ctx) {
  ctx.metrics().set("ad-psgd.active", active_ ? 1 : 0);
  ctx.metrics().set("ad-psgd.outstanding", static_cast<double>(offers_.size()));
}

void AdPsgd::setup(engine::PeerContext& ctx) {
  end_.start(ctx);
  const std::vector<PeerId>& members = ctx.members();
  const auto position = std::find(members.begin(), members.end(), ctx.self());
  active_ = position != members.end() &&
            activeAt(static_cast<std::size_t>(position - members.begin()), members.size());
  // An offer to a peer that left the view stays held until it expires: a leaver answers what it
  // holds before it goes, and that answer may still be on its way. It no longer counts toward
  // `outstanding` (the peer may be dead), and finish() does not wait for it.
  for (auto& [id, o] : offers_) o.departed = !contains(members, o.to);
  // The view changed: every stream of estimates anchors again (see "Compressed").
  estimates_.reset(members);
  publish(ctx);
}

std::size_t AdPsgd::inFlight() const {
  return static_cast<std::size_t>(std::count_if(
      offers_.begin(), offers_.end(), [](const auto& entry) { return !entry.second.departed; }));
}

void AdPsgd::refuse(engine::PeerContext& ctx, const engine::Incoming& m, const std::string& why) {
  log::get("algorithms")
      ->warn("ad-psgd: refused a message of kind {} from peer {:016x}: {}", m.kind, m.from, why);
  ctx.metrics().add("ad-psgd.refused", 1);
}

bool AdPsgd::acceptable(engine::PeerContext& ctx, const engine::Incoming& m) {
  const std::size_t n = ctx.params().size();
  const std::vector<std::uint64_t>& ints = m.integers;
  // Offers: {id} (a plain model) or {id, form, number} (a stream of estimates); answers: {id} (the
  // average) or {id, form} (a half-difference, or a miss without payload).
  engine::Expected expected{.payloads = {n}, .integers = 1};
  bool shaped = ints.size() == 1;
  if (m.kind == kOffer && ints.size() == 3) {
    shaped = (ints[1] == PublicEstimates::kAnchor || ints[1] == PublicEstimates::kDifference) &&
             ints[2] > 0;
  } else if (m.kind == kAnswer && ints.size() == 2) {
    shaped = ints[1] == kHalfDifference || ints[1] == kMissed;
    if (ints[1] == kMissed) expected.payloads.clear();
  }
  if (!engine::acceptMessage(m, expected, ctx.metrics(), name())) return false;
  if (!shaped)
    refuse(ctx, m, fmt::format("{} integers that are not an offer's or an answer's", ints.size()));
  return shaped;
}

void AdPsgd::exchange(engine::PeerContext& ctx) {
  // In arrival order: each offer and each answer is one pairwise exchange, and any interleaving
  // of them conserves the sum of the models.
  for (const engine::Incoming& m : ctx.inbox().drain()) {
    if (m.kind != kOffer && m.kind != kAnswer) {
      refuse(ctx, m, "not an ad-psgd message kind");
      continue;
    }
    if (!acceptable(ctx, m)) continue;
    if (m.kind == kOffer)
      answer(ctx, m);
    else
      apply(ctx, m);
  }
  const Clock::time_point now = ctx.now();
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    ctx.metrics().add(it->second.departed ? "ad-psgd.abandoned" : "ad-psgd.expired", 1);
    // Its receiver may have missed it (then its estimate lags): the next offer to it anchors.
    estimates_.unshare(it->second.to);
    spare_.give(std::move(it->second.model));
    it = offers_.erase(it);
  }
}

void AdPsgd::answer(engine::PeerContext& ctx, const engine::Incoming& offer) {
  if (!contains(ctx.members(), offer.from)) {
    // The answer could not be sent: applying the offer would move mass one way only.
    ctx.metrics().add("ad-psgd.strangers", 1);
    return;
  }
  const std::span<float> x = ctx.params();
  if (offer.integers.size() == 1) {
    // x_j = (x_j + s) / 2, and the average goes back (staged before send returns).
    const engine::DeviceView s = ctx.upload(offer.payload(0));
    // An outlier (the run's NormBound) gets no answer: the offer expires at its sender.
    if (!withinBound(ctx, offer, s)) return;
    ctx.compute().axpby(x, 0.5f, s, 0.5f);
    ctx.send(
        offer.from,
        engine::Message{
            .kind = kAnswer, .step = ctx.step(), .integers = {offer.integer(0)}, .payloads = {x}});
    ctx.metrics().add("ad-psgd.answered", 1);
    return;
  }
  // Compressed: s' = the offerer's model as its estimate here stands after the offer.
  const std::optional<engine::DeviceView> s =
      estimates_.receive(ctx, offer.from, offer.integer(1), offer.integer(2), offer.payload(0));
  // An outlier (the run's NormBound) is answered as a miss: its estimate here is then replaced by
  // the sender's next anchor.
  if (!s || !withinBound(ctx, offer, *s)) {
    // Nothing moves; the offerer forgets the offer and anchors its next one to this peer.
    ctx.send(offer.from,
             engine::Message{
                 .kind = kAnswer, .step = ctx.step(), .integers = {offer.integer(0), kMissed}});
    return;
  }
  // d = (s' - x_j) / 2, sent compressed; both sides move by the decoded d^: x_j += d^, x_i -= d^.
  if (half_.size() != x.size()) {
    half_ = ctx.compute().allocate<float>(x.size());
    halfSent_ = ctx.compute().allocate<float>(x.size());
  }
  ctx.compute().weightedSum(half_, {{0.5f, *s}, {-0.5f, x}});
  ctx.send(offer.from, engine::Message{.kind = kAnswer,
                                       .step = ctx.step(),
                                       .integers = {offer.integer(0), kHalfDifference},
                                       .payloads = {half_},
                                       .compressible = {{.payload = 0, .sent = halfSent_}}});
  ctx.compute().weightedSum(x, {{1.0f, x}, {1.0f, halfSent_}});
  ctx.metrics().add("ad-psgd.answered", 1);
}

void AdPsgd::apply(engine::PeerContext& ctx, const engine::Incoming& answer) {
  const bool missed = answer.integers.size() == 2 && answer.integer(1) == kMissed;
  if (missed) {
    // The receiver could not decode the offer: its estimate of this peer is unknown, and the
    // next offer to it anchors. Nothing moved. The earlier offers to it still held were lost:
    // their answers would have come before this one (one link, in order).
    estimates_.unshare(answer.from);
    ctx.metrics().add("ad-psgd.anchors_asked", 1);
    for (auto it = offers_.begin(); it != offers_.end() && it->first <= answer.integer(0);) {
      if (it->second.to != answer.from) {
        ++it;
        continue;
      }
      if (it->first < answer.integer(0)) ctx.metrics().add("ad-psgd.lost", 1);
      spare_.give(std::move(it->second.model));
      it = offers_.erase(it);
    }
    return;
  }
  const auto it = offers_.find(answer.integer(0));
  if (it == offers_.end() || it->second.to != answer.from) {
    // Forgotten (expired, or its receiver left the view and came back): its snapshot is gone.
    ctx.metrics().add("ad-psgd.late", 1);
    return;
  }
  const std::span<float> x = ctx.params();
  const engine::DeviceView received = ctx.upload(answer.payload(0));
  // An outlier (the run's NormBound): the average far from x_i, or a half-difference longer than
  // R ||x_i||. The offer is dropped as if it had expired.
  const bool average = answer.integers.size() == 1;
  if (!(average ? withinBound(ctx, answer, received)
                : engine::acceptNormWithin(ctx.compute(), answer, received, x, ctx.normBound(),
                                           ctx.metrics(), name()))) {
    estimates_.unshare(answer.from);
    spare_.give(std::move(it->second.model));
    offers_.erase(it);
    return;
  }
  if (average) {
    if (!it->second.model) {  // an average answering a compressed offer: no snapshot to use
      refuse(ctx, answer, "a model answering a compressed offer");
      return;
    }
    // x_i = a + (x_i - s): the average, plus the progress made since the offer left.
    const engine::DeviceView& a = received;
    ctx.compute().weightedSum(x, {{1.0f, x}, {1.0f, a}, {-1.0f, it->second.model->span()}});
  } else {
    // x_i -= d^: what the receiver gained.
    ctx.compute().axpby(x, -1.0f, received, 1.0f);
  }
  spare_.give(std::move(it->second.model));
  offers_.erase(it);
  ctx.metrics().add("ad-psgd.merged", 1);
}

bool AdPsgd::withinBound(engine::PeerContext& ctx, const engine::Incoming& m,
                         std::span<const float> model) {
  return engine::acceptNearOwn(ctx.compute(), m, model, ctx.params(), ctx.normBound(),
                               ctx.metrics(), name());
}

void AdPsgd::offer(engine::PeerContext& ctx) {
  if (inFlight() >= static_cast<std::size_t>(options_.outstanding)) {
    ctx.metrics().add("ad-psgd.throttled", 1);
    return;
  }
  const topology::Graph& graph = ctx.graph();
  std::vector<PeerId> partners;
  for (PeerId j : graph.outNeighbors(ctx.self()))
    if (!activeAt(graph.indexOf(j), graph.size())) partners.push_back(j);
  if (partners.empty()) {
    ctx.metrics().add("ad-psgd.no_partner", 1);
    if (!warnedNoPartner_ && graph.size() > 1)
      log::get("algorithms")
          ->warn(
              "peer {:016x}: ad-psgd: this active peer has no passive out-neighbour in the "
              "topology (roles: even positions active, odd ones passive), so it never offers; "
              "use --topology ring (or one where even and odd positions are neighbours)",
              ctx.self());
    warnedNoPartner_ = true;
    return;
  }
  std::uniform_int_distribution<std::size_t> pick(0, partners.size() - 1);
  const PeerId to = partners[pick(ctx.rng())];
  const std::uint64_t id = nextId_++;
  Offer o{.to = to, .expires = ctx.now() + timeout(ctx)};
  if (ctx.compression().enabled()) {
    // The difference from the estimate `to` holds (or an anchor); the answer is a difference
    // itself, so nothing of the offer is kept.
    estimates_.send(ctx, to, ctx.params(),
                    engine::Message{.kind = kOffer, .step = ctx.step(), .integers = {id}});
    offers_.emplace(id, std::move(o));
    ctx.metrics().add("ad-psgd.offers", 1);
    return;
  }
  o.model = spare_.take(ctx.compute(), ctx.params().size());
  ctx.compute().copy(o.model->span(), ctx.params());
  // The snapshot is never written while the offer is held: it is sent from where it is (no
  // staging copy on a CPU peer), kept alive by the message until the transport is done.
  ctx.send(to, engine::Message{.kind = kOffer,
                               .step = ctx.step(),
                               .integers = {id},
                               .payloads = {o.model->span()},
                               .owner = o.model});
  offers_.emplace(id, std::move(o));
  ctx.metrics().add("ad-psgd.offers", 1);
}

double AdPsgd::step(engine::PeerContext& ctx) {
  // The paper's order: the gradient at the model as it is before the averaging...
  const double loss = ctx.computeGradients();
  // ...then the averaging (the offers and answers that arrived)...
  exchange(ctx);
  // ...then the step with that gradient, applied to the averaged model.
  ctx.applyOptimizer();
  if (active_ && ctx.step() % static_cast<std::uint64_t>(options_.period) == 0) offer(ctx);
  publish(ctx);
  end_.update(ctx);
  return loss;
}

void AdPsgd::settle(engine::PeerContext& ctx, const char* when) {
  const Clock::time_point deadline = ctx.now() + timeout(ctx);
  for (;;) {
    exchange(ctx);
    const Clock::time_point now = ctx.now();
    if (inFlight() == 0 || now >= deadline) break;
    ctx.inbox().wait(std::nullopt, std::min(deadline, now + kTick));
  }
  if (const std::size_t unanswered = inFlight(); unanswered > 0) {
    ctx.metrics().add("ad-psgd.unsettled", static_cast<double>(unanswered));
    log::get("algorithms")
        ->warn("peer {:016x}: ad-psgd {}: {} offers unanswered after {} ms; forgotten", ctx.self(),
               when, unanswered,
               std::chrono::duration_cast<std::chrono::milliseconds>(timeout(ctx)).count());
  }
  // Offers to peers that left the view are not waited for: whatever came from them was applied.
  const std::size_t departed = offers_.size() - inFlight();
  if (departed > 0) ctx.metrics().add("ad-psgd.abandoned", static_cast<double>(departed));
  offers_.clear();
  publish(ctx);
  // Nothing is sent after this: the buffers go back to the Compute now.
  spare_.clear();
}

void AdPsgd::finish(engine::PeerContext& ctx) { settle(ctx, "finish"); }

void AdPsgd::leave(engine::PeerContext& ctx) { settle(ctx, "leave"); }

}  // namespace gossamer::algorithms
