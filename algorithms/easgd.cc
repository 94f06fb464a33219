#include "algorithms/easgd.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "algorithms/public_estimates.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void EasgdOptions::validate(const char* name) const {
  GOSSAMER_ENFORCE(tau >= 1, "{}.tau must be at least 1, not {}", name, tau);
  SharedEnd::validate(name, end);
  GOSSAMER_ENFORCE(alpha >= 0 && alpha < 1, "{}.alpha must be in [0, 1) (0: 0.9 / n), not {}", name,
                   alpha);
  GOSSAMER_ENFORCE(timeoutMs >= 0, "{}.timeout_ms must be >= 0 (0: --comm-timeout), not {}", name,
                   timeoutMs);
  GOSSAMER_ENFORCE(prefetch < tau, "{}.prefetch must be below {}.tau ({}), not {}", name, name, tau,
                   prefetch);
}

void EamsgdOptions::validate() const { elastic.validate("eamsgd"); }

// ---- ElasticCenter ----------------------------------------------------------------------------

void ElasticCenter::setup(engine::PeerContext& ctx) {
  const std::size_t workers = ctx.members().size();
  alpha_ = options_.alpha > 0 ? options_.alpha : 0.9 / static_cast<double>(workers);
  end_.start(ctx);
  centerPeer_ = ctx.graph().root();
  step_ = ctx.step();
  if (delta_.size() != ctx.params().size())
    delta_ = ctx.compute().allocate<float>(ctx.params().size());
  if (ctx.compression().enabled() && sent_.size() != ctx.params().size())
    sent_ = ctx.compute().allocate<float>(ctx.params().size());
  ctx.metrics().set(metric("alpha"), alpha_);

  const bool isCenter = centerPeer_ == ctx.self();
  std::unique_lock lock(mutex_);
  modelSize_ = ctx.params().size();
  if (!isCenter && holdsCenter_) {
    lock.unlock();
    handOver(ctx, centerPeer_, false);  // the center moved: w~ goes with it
    return;
  }
  if (!isCenter || holdsCenter_) return;
  // Rebuild: w~ starts as this peer's model: the common initial model at the first setup, the
  // latest local model when the center moves here without a handover (see the header comment).
  center_.resize(ctx.params().size());
  ctx.compute().download(std::span<float>(center_), std::span<const float>(ctx.params()));
  holdsCenter_ = true;
  if (ctx.step() > 0) {
    log::get("algorithms")
        ->info("{}: peer {:016x} rebuilds the center from its model at step {}", name_, ctx.self(),
               ctx.step());
    ctx.metrics().add(metric("center_restarts"), 1);
  }
}

void ElasticCenter::handOver(engine::PeerContext& ctx, engine::PeerId to, bool awaitReceipt) {
  std::vector<float> center;
  {
    std::lock_guard lock(mutex_);
    if (!holdsCenter_) return;
    center.swap(center_);
    holdsCenter_ = false;
  }
  log::get("algorithms")
      ->info("{}: peer {:016x} hands the center over to {:016x}", name_, ctx.self(), to);
  engine::Message handover{.kind = kHandover,
                           .step = ctx.step(),
                           .integers = {awaitReceipt ? 1u : 0u},
                           .payloads = {center}};
  ctx.metrics().add(metric("handovers"), 1);
  if (!awaitReceipt) {
    ctx.notify(to, handover);
    return;
  }
  // A leaving center waits for the receipt before its membership leave goes out: otherwise the
  // view change can reach the next center first, which then rebuilds a w~ the handover replaces.
  if (!ctx.request(to, handover, ctx.commTimeout()))
    log::get("algorithms")
        ->warn(
            "{}: peer {:016x} got no receipt for its handover from {:016x} within {} ms; it "
            "leaves anyway (that member rebuilds w~ if the handover was lost)",
            name_, ctx.self(), to,
            std::chrono::duration_cast<std::chrono::milliseconds>(ctx.commTimeout()).count());
}

void ElasticCenter::leave(engine::PeerContext& ctx) {
  // The star's center is a position in the sorted members: without this peer, the member after
  // it takes that position.
  const std::vector<engine::PeerId>& members = ctx.members();
  const auto self = std::find(members.begin(), members.end(), ctx.self());
  if (members.size() < 2 || self == members.end()) return;
  const auto next = std::next(self) == members.end() ? members.begin() : std::next(self);
  handOver(ctx, *next, true);
}

bool ElasticCenter::join(engine::PeerContext& ctx) {
  // The center of this view first; any other member that holds w~ (the center of an older view)
  // answers too, the others answer without it.
  std::vector<engine::PeerId> candidates;
  if (ctx.graph().root() != ctx.self()) candidates.push_back(ctx.graph().root());
  for (engine::PeerId member : ctx.members())
    if (member != ctx.self() && member != ctx.graph().root()) candidates.push_back(member);
  for (engine::PeerId from : candidates) {
    const std::optional<engine::Incoming> reply =
        ctx.request(from, engine::Message{.kind = kPull, .step = ctx.step()}, ctx.commTimeout());
    // No payload: that member does not hold w~.
    if (!reply || reply->payloadCount() == 0 ||
        !engine::acceptMessage(*reply, {.payloads = {ctx.params().size()}}, ctx.metrics(), name_))
      continue;
    ctx.compute().upload(ctx.params(), reply->payload(0));
    ctx.optimizer().resetState();
    ctx.adoptStep(reply->step);
    log::get("algorithms")
        ->info("{}: peer {:016x} joined at step {} with the center of {:016x}", name_, ctx.self(),
               reply->step, from);
    ctx.metrics().add(metric("joined_from_center"), 1);
    return true;
  }
  return false;
}

void ElasticCenter::saveState(engine::AlgorithmState& state) const {
  std::lock_guard lock(mutex_);
  if (holdsCenter_) state.tensors["center"] = center_;
}

void ElasticCenter::loadState(const engine::AlgorithmState& state) {
  const auto it = state.tensors.find("center");
  std::lock_guard lock(mutex_);
  holdsCenter_ = it != state.tensors.end();
  center_ = holdsCenter_ ? it->second : std::vector<float>{};
}

void ElasticCenter::beforeStep(engine::PeerContext& ctx) {
  end_.update(ctx);
  step_ = ctx.step();
  const std::uint64_t t = ctx.step();
  if (t % options_.tau == 0) exchange(ctx);
  // 0 < prefetch < tau: never the step of an exchange. No pull for an exchange past the end.
  const std::uint64_t ahead = t + options_.prefetch;
  if (options_.prefetch > 0 && ahead % options_.tau == 0 && ahead < ctx.totalSteps())
    prefetch(ctx, ahead);
}

engine::Clock::duration ElasticCenter::pullTimeout(engine::PeerContext& ctx) const {
  return options_.timeoutMs > 0 ? std::chrono::milliseconds(options_.timeoutMs) : ctx.commTimeout();
}

bool ElasticCenter::usable(engine::PeerContext& ctx, const std::optional<engine::Incoming>& reply) {
  // No payload: the peer asked does not hold the center (yet). A w~ of the wrong size or with a
  // non-finite value is refused (counted in "<name>.refused"), and missed all the same.
  if (!reply || reply->payloadCount() == 0 ||
      !engine::acceptMessage(*reply, {.payloads = {ctx.params().size()}}, ctx.metrics(), name_)) {
    ctx.metrics().add(metric("missed"), 1);
    return false;
  }
  return true;
}

std::optional<engine::Incoming> ElasticCenter::pull(engine::PeerContext& ctx) {
  pending_.reset();  // a prefetched reply still to come is late like the others below
  // Replies to pulls that timed out earlier are of no use now.
  if (const std::size_t late = ctx.inbox().drain(kCenter).size(); late > 0)
    ctx.metrics().add(metric("late_replies"), static_cast<double>(late));
  std::optional<engine::Incoming> reply =
      ctx.request(centerPeer_, pullMessage(ctx), pullTimeout(ctx));
  if (!usable(ctx, reply)) return std::nullopt;
  return reply;
}

engine::Message ElasticCenter::pullMessage(engine::PeerContext& ctx) const {
  engine::Message message{.kind = kPull, .step = ctx.step()};
  if (ctx.compression().enabled())
    message.integers = {estimateFrom_ == centerPeer_ ? estimateSeq_ : 0};
  return message;
}

std::optional<std::span<const float>> ElasticCenter::centerOf(engine::PeerContext& ctx,
                                                              const engine::Incoming& reply) {
  const std::span<const float> payload = reply.payload(0);
  if (reply.integers.size() < 2) return payload;  // w~ itself
  kernels::Compute& compute = ctx.compute();
  const std::uint64_t form = reply.integers[0], seq = reply.integers[1];
  if (form == PublicEstimates::kAnchor) {
    if (estimate_.size() != payload.size()) estimate_ = compute.allocate<float>(payload.size());
    compute.upload(estimate_.span(), payload);
  } else if (form == PublicEstimates::kDifference && estimateFrom_ == reply.from &&
             estimateSeq_ != 0 && seq == estimateSeq_ + 1 && estimate_.size() == payload.size()) {
    const engine::DeviceView q = ctx.upload(payload);
    compute.weightedSum(estimate_, {{1.0f, estimate_}, {1.0f, q}});  // as the center did
  } else {
    estimateSeq_ = 0;  // the next pull asks for an anchor
    ctx.metrics().add(metric("missed"), 1);
    return std::nullopt;
  }
  estimateFrom_ = reply.from;
  estimateSeq_ = seq;
  return estimate_.span();
}

void ElasticCenter::replyCompressed(engine::ServiceContext& ctx, const engine::Incoming& request,
                                    std::uint64_t seen) {
  kernels::Compute& host = ctx.hostCompute();
  WorkerEstimate& worker = workerEstimates_[request.from];
  engine::Message reply{.kind = kCenter, .step = step_};
  if (seen != 0 && seen == worker.seq && worker.x.size() == center_.size()) {
    replyDifference_.resize(center_.size());
    replySent_.resize(center_.size());
    host.weightedSum(replyDifference_, {{1.0f, center_}, {-1.0f, worker.x}});
    reply.integers = {PublicEstimates::kDifference, ++worker.seq};
    reply.payloads = {replyDifference_};
    reply.compressible = {{.payload = 0, .sent = replySent_}};
    ctx.reply(request, reply);  // encodes now: replySent_ holds what the worker decodes
    host.weightedSum(worker.x, {{1.0f, worker.x}, {1.0f, replySent_}});
    return;
  }
  reply.integers = {PublicEstimates::kAnchor, ++worker.seq};
  reply.payloads = {center_};
  ctx.reply(request, reply);
  worker.x = center_;
  ctx.metrics().add(metric("center_anchors"), 1);
}

void ElasticCenter::prefetch(engine::PeerContext& ctx, std::uint64_t at) {
  // Replies to pulls that timed out earlier (and to a prefetch whose exchange never came: the
  // step moved) are of no use now; only one pull is ever in flight.
  pending_.reset();
  if (const std::size_t late = ctx.inbox().drain(kCenter).size(); late > 0)
    ctx.metrics().add(metric("late_replies"), static_cast<double>(late));
  // A notify with a fresh tag: serve() answers it like a request, into this peer's inbox with
  // that tag (ServiceContext::reply), and nothing waits for it now.
  const std::uint64_t tag = ctx.tags().fresh();
  engine::Message message = pullMessage(ctx);
  message.tag = tag;
  ctx.notify(centerPeer_, message);
  pending_ = Pending{.tag = tag, .from = centerPeer_, .step = at};
  ctx.metrics().add(metric("prefetches"), 1);
}

std::optional<engine::Incoming> ElasticCenter::collect(engine::PeerContext& ctx) {
  const Pending pending = *pending_;
  pending_.reset();
  const engine::Clock::time_point deadline = ctx.now() + pullTimeout(ctx);
  std::optional<engine::Incoming> reply;
  for (bool first = true;; first = false) {
    // Any other reply queued is an earlier pull's that came too late: dropped.
    for (engine::Incoming& m : ctx.inbox().drain(kCenter)) {
      if (!reply && m.tag == pending.tag && m.from == pending.from) {
        reply = std::move(m);
      } else {
        ctx.metrics().add(metric("late_replies"), 1);
      }
    }
    if (reply) break;
    if (first) ctx.metrics().add(metric("late"), 1);  // not there yet: waited for
    if (!ctx.inbox().wait(kCenter, deadline)) break;
  }
  if (!usable(ctx, reply)) return std::nullopt;
  return reply;
}

void ElasticCenter::exchange(engine::PeerContext& ctx) {
  // The prefetched pull when there is one for this exchange, from the center of this view (a
  // membership change may have moved the center since it left); else a blocking pull.
  const bool prefetched = pending_ && pending_->step == ctx.step() && pending_->from == centerPeer_;
  const std::optional<engine::Incoming> reply = prefetched ? collect(ctx) : pull(ctx);
  if (!reply) return;
  const std::optional<std::span<const float>> received = centerOf(ctx, *reply);
  if (!received) return;
  const engine::DeviceView center = received->data() == reply->payload(0).data()
                                        ? ctx.upload(*received)
                                        : engine::DeviceView(*received, nullptr);
  kernels::Compute& compute = ctx.compute();
  if (!engine::acceptNearOwn(compute, *reply, center, ctx.params(), ctx.normBound(), ctx.metrics(),
                             name_)) {
    estimateSeq_ = 0;  // an estimate made by an outlier is no estimate: ask for an anchor
    return;
  }
  const auto a = static_cast<float>(alpha_);
  compute.weightedSum(delta_, {{a, ctx.params()}, {-a, center}});  // delta = alpha (w_i - w~)
  engine::Message message{.kind = kDelta, .step = ctx.step(), .payloads = {delta_.span()}};
  // With a codec the delta is encoded as it leaves (notify encodes before it returns), with no
  // residual: what the codec drops stays in w_i - w~ and is in the next delta (see the header
  // comment). w_i gives up exactly the decoded bits that the center adds, so w_i + w~ stays
  // conserved.
  const bool compressed = ctx.compression().enabled();
  if (compressed) message.compressible = {{.payload = 0, .sent = sent_}};
  ctx.notify(centerPeer_, message);                                       // the center: w~ += sent
  compute.axpby(ctx.params(), -1.0f, compressed ? sent_ : delta_, 1.0f);  // w_i = w_i - sent
  ctx.metrics().add(metric("exchanges"), 1);
}

void ElasticCenter::finish(engine::PeerContext& ctx) {
  if (!options_.finalCenter) return;
  // In float32 (no integers in the pull): the run ends on w~ itself, not on an estimate of it.
  std::optional<engine::Incoming> reply = ctx.request(
      centerPeer_, engine::Message{.kind = kPull, .step = ctx.step()}, pullTimeout(ctx));
  if (!usable(ctx, reply)) return;
  ctx.compute().copy(ctx.params(), ctx.upload(reply->payload(0)));
  ctx.metrics().set(metric("final_center"), 1);
}

void ElasticCenter::serve(engine::ServiceContext& ctx, const engine::Incoming& request) {
  std::lock_guard lock(mutex_);
  switch (request.kind) {
    case kPull:
      if (!engine::acceptMessage(request, {}, ctx.metrics(), name_)) return;
      if (!holdsCenter_) {
        ctx.reply(request, engine::Message{.kind = kCenter});
        ctx.metrics().add(metric("not_center"), 1);
        return;
      }
      if (!request.integers.empty()) {
        replyCompressed(ctx, request, request.integers[0]);
        return;
      }
      ctx.reply(request, engine::Message{.kind = kCenter, .step = step_, .payloads = {center_}});
      return;
    case kDelta: {
      if (!holdsCenter_) {
        ctx.metrics().add(metric("not_center"), 1);
        return;
      }
      if (!engine::acceptMessage(request, {.payloads = {center_.size()}}, ctx.metrics(), name_) ||
          !engine::acceptNormWithin(ctx.hostCompute(), request, request.payload(0), center_,
                                    ctx.normBound(), ctx.metrics(), name_))
        return;
      ctx.hostCompute().axpby(center_, 1.0f, request.payload(0), 1.0f);  // w~ = w~ + delta
      ctx.metrics().add(metric("center_updates"), 1);
      return;
    }
    case kHandover: {
      // The handed-over w~ carries every delta the old center applied: it replaces a w~ rebuilt
      // here in the meantime.
      if (!engine::acceptMessage(request, {.payloads = {modelSize_}, .integers = 1}, ctx.metrics(),
                                 name_))
        return;
      const std::span<const float> center = request.payload(0);
      center_.assign(center.begin(), center.end());
      holdsCenter_ = true;
      ctx.metrics().add(metric("handovers_received"), 1);
      if (request.integer(0) == 1) ctx.reply(request, engine::Message{.kind = kHandover});
      return;
    }
    default:
      log::get("algorithms")
          ->warn("{}: refused a message of kind {} from peer {:016x}: not an {} message kind",
                 name_, request.kind, request.from, name_);
      ctx.metrics().add(metric("refused"), 1);
  }
}

std::optional<std::vector<float>> ElasticCenter::center() const {
  std::lock_guard lock(mutex_);
  if (!holdsCenter_) return std::nullopt;
  return center_;
}

// ---- Eamsgd ------------------------------------------------------------------------------------

void Easgd::join(engine::PeerContext& ctx) {
  if (!elastic_.join(ctx)) Algorithm::join(ctx);
}

void Eamsgd::join(engine::PeerContext& ctx) {
  // Either way the local optimizer's state (the velocity) starts at zero.
  if (!elastic_.join(ctx)) Algorithm::join(ctx);
}

void Eamsgd::setup(engine::PeerContext& ctx) {
  const engine::train::OptimizerKind kind = ctx.optimizer().options().kind;
  GOSSAMER_ENFORCE(
      kind == engine::train::OptimizerKind::kNesterov ||
          kind == engine::train::OptimizerKind::kMomentum,
      "eamsgd's local steps are momentum steps (EAMSGD, Zhang et al. 2015: Nesterov momentum), "
      "taken by the local optimizer: use --optimizer nesterov (the paper's rule; --momentum sets "
      "its coefficient) or momentum (heavy-ball), not {}; for elastic averaging with plain SGD or "
      "Adam steps use --algorithm easgd",
      engine::train::optimizerName(kind));
  if (kind == engine::train::OptimizerKind::kMomentum && !warnedHeavyBall_) {
    log::get("algorithms")
        ->info(
            "eamsgd with --optimizer momentum takes heavy-ball local steps; the paper's EAMSGD "
            "uses Nesterov momentum (--optimizer nesterov)");
    warnedHeavyBall_ = true;
  }
  elastic_.setup(ctx);
}

}  // namespace gossamer::algorithms
