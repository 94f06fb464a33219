#include "algorithms/diloco.h"

#include <chrono>
#include <cmath>

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

void OuterOptions::validate(const char* algorithm) const {
  GOSSAMER_ENFORCE(std::isfinite(lr) && lr > 0 && lr <= 2, "{}.outer-lr must be in (0, 2], not {}",
                   algorithm, lr);
  GOSSAMER_ENFORCE(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
                   "{}.outer-momentum must be in [0, 1), not {}", algorithm, momentum);
}

void DilocoOptions::validate() const {
  GOSSAMER_ENFORCE(h.valueOr(1) >= 1, "diloco.h must be at least 1 or auto, not {}", h.valueOr(1));
  outer.validate("diloco");
  GOSSAMER_ENFORCE(pipeline >= 1 && pipeline <= kMaxRingPipeline,
                   "diloco.pipeline must be in [1, {}], not {}", kMaxRingPipeline, pipeline);
  PeriodicAveragingOptions{.roundSeconds = roundSeconds, .quorum = quorum}.validate("diloco");
}

// ---- OuterState -------------------------------------------------------------------------------

void OuterState::setup(engine::PeerContext& ctx) {
  const std::size_t size = ctx.params().size();
  kernels::Compute& compute = ctx.compute();
  if (theta_.size() != size) {
    std::lock_guard lock(mutex_);
    onHost_ = compute.device() == kernels::Device::kCpu;
    theta_ = compute.allocate<float>(size);
    if (hasMomentum()) momentum_ = compute.allocate<float>(size);
    ready_ = false;
    hostTheta_ = {};
    hostMomentum_ = {};
  }
  if (!ready_) {
    compute.copy(theta_, ctx.params());
    if (hasMomentum()) compute.fill(momentum_, 0.0f);
    ready_ = true;
  }
  apply(ctx);  // a state adopted before setup (checkpoint, joiner) replaces the initial one
  publish(ctx);
}

void OuterState::apply(engine::PeerContext& ctx) {
  std::lock_guard lock(mutex_);
  if (!pending_) return;
  pending_ = false;
  GOSSAMER_ENFORCE(pendingTheta_.size() == theta_.size(),
                   "{}: the outer state holds {} parameters, the model has {}", who_,
                   pendingTheta_.size(), theta_.size());
  GOSSAMER_ENFORCE(pendingMomentum_.empty() || pendingMomentum_.size() == theta_.size(),
                   "{}: the outer momentum holds {} values, the model has {}", who_,
                   pendingMomentum_.size(), theta_.size());
  ctx.compute().upload(theta_.span(), pendingTheta_);
  if (hasMomentum()) {
    // A state without momentum (saved with mu = 0) starts the momentum at 0.
    if (pendingMomentum_.empty())
      ctx.compute().fill(momentum_, 0.0f);
    else
      ctx.compute().upload(momentum_.span(), pendingMomentum_);
  }
  pendingTheta_ = {};
  pendingMomentum_ = {};
}

void OuterState::adopt(std::vector<float> theta, std::vector<float> momentum,
                       std::uint64_t rounds) {
  std::lock_guard lock(mutex_);
  pendingTheta_ = std::move(theta);
  pendingMomentum_ = std::move(momentum);
  pending_ = true;
  rounds_ = rounds;
}

void OuterState::step(engine::PeerContext& ctx, std::size_t offset, std::span<const float> mean,
                      std::span<float> scratch) {
  kernels::Compute& compute = ctx.compute();
  const std::span<float> theta = theta_.span().subspan(offset, mean.size());
  const auto lr = static_cast<float>(options_.lr);
  const auto mu = static_cast<float>(options_.momentum);
  // serve() reads theta and m in place on the CPU backend.
  std::unique_lock lock(mutex_, std::defer_lock);
  if (onHost_) lock.lock();
  compute.weightedSum(scratch, {{1.0f, theta}, {-1.0f, mean}});  // Delta = theta - mean
  if (!hasMomentum()) {
    compute.axpby(theta, -lr, scratch, 1.0f);  // theta -= lr Delta
  } else {
    const std::span<float> m = momentum_.span().subspan(offset, mean.size());
    compute.axpby(m, 1.0f, scratch, mu);  // m = mu m + Delta
    if (options_.nesterov)
      compute.weightedSum(theta, {{1.0f, theta}, {-lr, scratch}, {-lr * mu, m}});
    else
      compute.axpby(theta, -lr, m, 1.0f);
  }
}

void OuterState::publish(engine::PeerContext& ctx) { publish(ctx, 0, theta_.size()); }

void OuterState::publish(engine::PeerContext& ctx, std::size_t offset, std::size_t count) {
  std::lock_guard lock(mutex_);
  if (onHost_) {
    hostTheta_ = theta_.span();
    hostMomentum_ = momentum_.span();
    return;
  }
  mirrorTheta_.resize(theta_.size());
  ctx.compute().download(std::span<float>(mirrorTheta_).subspan(offset, count),
                         std::span<const float>(theta_.span()).subspan(offset, count));
  hostTheta_ = mirrorTheta_;
  if (hasMomentum()) {
    mirrorMomentum_.resize(momentum_.size());
    ctx.compute().download(std::span<float>(mirrorMomentum_).subspan(offset, count),
                           std::span<const float>(momentum_.span()).subspan(offset, count));
    hostMomentum_ = mirrorMomentum_;
  }
}

bool OuterState::snapshot(std::vector<float>& theta, std::vector<float>& momentum,
                          std::uint64_t& rounds) const {
  std::lock_guard lock(mutex_);
  if (pending_) {  // loaded, not yet applied: the state to keep is the loaded one
    theta = pendingTheta_;
    momentum = pendingMomentum_;
  } else {
    if (hostTheta_.empty()) return false;
    theta.assign(hostTheta_.begin(), hostTheta_.end());
    momentum.assign(hostMomentum_.begin(), hostMomentum_.end());
  }
  rounds = rounds_;
  return true;
}

// ---- joiners and checkpoints -------------------------------------------------------------------

void serveOuterState(engine::ServiceContext& ctx, const engine::Incoming& request,
                     const OuterState& outer, std::uint32_t replyKind, std::uint64_t step,
                     const std::string& who) {
  if (!engine::acceptMessage(request, {}, ctx.metrics(), who)) return;
  std::vector<float> theta, momentum;
  std::uint64_t rounds = 0;
  if (outer.busy()) {
    ctx.reply(request, engine::Message{.kind = replyKind, .step = step, .integers = {1}});
    return;
  }
  if (!outer.snapshot(theta, momentum, rounds)) {
    ctx.reply(request, engine::Message{.kind = replyKind, .step = step});
    return;
  }
  engine::Message reply{.kind = replyKind, .step = step, .integers = {rounds}};
  reply.payloads.push_back(theta);
  if (!momentum.empty()) reply.payloads.push_back(momentum);
  ctx.reply(request, reply);
  ctx.metrics().add(who + ".served_joiners", 1);
}

std::optional<engine::SharedState> sharedOuterState(const OuterState& outer, std::uint64_t step) {
  if (outer.busy()) return std::nullopt;
  std::vector<float> theta, momentum;
  std::uint64_t rounds = 0;
  if (!outer.snapshot(theta, momentum, rounds)) return std::nullopt;
  theta.insert(theta.end(), momentum.begin(), momentum.end());
  return engine::SharedState{step, rounds, {rounds}, std::move(theta)};
}

bool joinFromOuterState(engine::PeerContext& ctx, OuterState& outer, const std::string& who,
                        std::uint32_t requestKind) {
  const std::size_t size = ctx.params().size();
  std::vector<engine::PeerId> others;
  for (engine::PeerId member : ctx.members())
    if (member != ctx.self()) others.push_back(member);
  const std::size_t floats = size * (outer.hasMomentum() ? 2 : 1);
  if (std::optional<engine::CaughtUpModel> state =
          ctx.catchUpState(others, floats, 2 * ctx.commTimeout());
      state && state->integers.size() == 1) {
    const std::span<const float> all = state->params();
    ctx.compute().upload(ctx.params(), all.first(size));
    outer.adopt(std::vector<float>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(size)),
                std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(size), all.end()),
                state->integers[0]);
    ctx.optimizer().resetState();
    ctx.adoptStep(state->step);
    log::get("algorithms")
        ->info("{}: peer {:016x} joined at step {} with the outer state of {} member(s)", who,
               ctx.self(), state->step, state->from.size());
    ctx.metrics().add(who + ".joined", 1);
    ctx.metrics().add(who + ".joined_from_members", static_cast<double>(state->from.size()));
    return true;
  }
  engine::Expected expected{.integers = 1};
  expected.payloads.push_back(size);
  if (outer.hasMomentum()) expected.payloads.push_back(size);
  const engine::Clock::time_point deadline = ctx.now() + ctx.commTimeout();
  for (bool busy = true; busy && ctx.now() < deadline;) {
    busy = false;
    for (engine::PeerId from : ctx.members()) {
      if (from == ctx.self()) continue;
      const std::optional<engine::Incoming> reply = ctx.request(
          from, engine::Message{.kind = requestKind, .step = ctx.step()}, ctx.commTimeout());
      if (!reply) continue;
      // No payload: that member has no outer state yet, or is busy (integer 0 = 1).
      if (reply->payloadCount() == 0) {
        busy = busy || (reply->integers.size() == 1 && reply->integers[0] == 1);
        continue;
      }
      if (!engine::acceptMessage(*reply, expected, ctx.metrics(), who)) continue;
      const std::span<const float> theta = reply->payload(0);
      std::vector<float> momentum;
      if (outer.hasMomentum()) momentum.assign(reply->payload(1).begin(), reply->payload(1).end());
      ctx.compute().upload(ctx.params(), theta);
      outer.adopt(std::vector<float>(theta.begin(), theta.end()), std::move(momentum),
                  reply->integer(0));
      ctx.optimizer().resetState();
      ctx.adoptStep(reply->step);
      log::get("algorithms")
          ->info("{}: peer {:016x} joined at step {} with the outer state of {:016x}", who,
                 ctx.self(), reply->step, from);
      ctx.metrics().add(who + ".joined", 1);
      return true;
    }
    if (busy) ctx.pause(std::chrono::milliseconds(1));
  }
  return false;
}

void endOnConsensus(engine::PeerContext& ctx, OuterState& outer, std::span<float> scratch,
                    std::uint32_t kind, std::uint64_t step, std::size_t pipeline,
                    const std::string& who) {
  const RingOutcome outcome = ringAllReduce(
      ctx, outer.theta(), scratch,
      {.kind = kind, .step = step, .op = ReduceOp::kMean, .pipeline = pipeline, .who = who});
  if (outcome != RingOutcome::kComplete) {
    ctx.metrics().add(who + ".consensus_failed", 1);
    return;
  }
  ctx.compute().copy(outer.theta(), scratch);
  ctx.compute().copy(ctx.params(), scratch);
  outer.publish(ctx);
  ctx.metrics().add(who + ".consensus", 1);
}

void saveOuterState(const OuterState& outer, engine::AlgorithmState& state) {
  std::vector<float> theta, momentum;
  std::uint64_t rounds = 0;
  if (!outer.snapshot(theta, momentum, rounds)) return;
  state.tensors["outer_theta"] = std::move(theta);
  if (!momentum.empty()) state.tensors["outer_momentum"] = std::move(momentum);
  state.values["outer_rounds"] = static_cast<double>(rounds);
}

void loadOuterState(OuterState& outer, const engine::AlgorithmState& state) {
  const auto theta = state.tensors.find("outer_theta");
  if (theta == state.tensors.end()) return;  // a checkpoint from before the first setup
  const auto momentum = state.tensors.find("outer_momentum");
  const auto rounds = state.values.find("outer_rounds");
  outer.adopt(theta->second,
              momentum == state.tensors.end() ? std::vector<float>{} : momentum->second,
              rounds == state.values.end() ? 0 : static_cast<std::uint64_t>(rounds->second));
}

// ---- Diloco -----------------------------------------------------------------------------------

Diloco::Diloco(DilocoOptions options)
    : PeriodicAveraging(
          PeriodicAveragingOptions{
              .tau = options.h, .roundSeconds = options.roundSeconds, .quorum = options.quorum},
          "diloco", {.exchange = Exchange::kDirect, .low = 10, .high = 500, .knob = "h"}),
      options_(options),
      outer_("diloco", options.outer),
      exchange_({.kind = kAverage,
                 .op = ReduceOp::kMean,
                 .pieces = options.pipeline,
                 .who = "diloco",
                 .compress = true}) {}

void Diloco::setup(engine::PeerContext& ctx) {
  outer_.setup(ctx);
  if (mean_.size() != ctx.params().size())
    mean_ = ctx.compute().allocate<float>(ctx.params().size());
  step_ = ctx.step();
  PeriodicAveraging::setup(ctx);
}

void Diloco::afterStep(engine::PeerContext& ctx) {
  step_ = ctx.step() + 1;
  PeriodicAveraging::afterStep(ctx);
}

void Diloco::timedRound(engine::PeerContext& ctx) {
  // Numbered by the rounds attempted: every member counts a failed round too.
  std::uint64_t round = outer_.rounds() + 1;
  outer_.setBusy(true);  // a joiner handed the round count now would start a round behind
  const std::optional<RoundAgreement> agreed =
      timed()->exchange(ctx, exchange_, round, ctx.params(), mean_);
  outer_.skipTo(round);
  if (agreed) {
    // theta and m move by the weighted mean; else they stay and w_i goes on (as a fallback). A
    // member left out of the round keeps its change w_i - theta, from the new theta on.
    kernels::Compute& compute = ctx.compute();
    const bool rebase = TimedRounds::rebased(*agreed);
    if (rebase) compute.axpby(ctx.params(), -1.0f, outer_.theta(), 1.0f);
    outer_.step(ctx, 0, mean_, mean_);
    if (rebase) {
      compute.axpby(ctx.params(), 1.0f, outer_.theta(), 1.0f);
    } else {
      compute.copy(ctx.params(), outer_.theta());
    }
    ctx.roundMerged(round, outer_.theta());
    outer_.publish(ctx);
    count(ctx, "rounds");
    ctx.metrics().set("diloco.outer_rounds", static_cast<double>(outer_.rounds()));
  }
  outer_.setBusy(false);
}

void Diloco::average(engine::PeerContext& ctx, std::uint64_t round) {
  // Started and awaited at once: the direct exchange takes two one-way latencies where the ring
  // takes 2 (n-1), and uses the n-1 links of every peer at once.
  // Uncompressed, the models travel: their mean re-synchronises theta on every member, even one
  // whose theta drifted (a round that failed only here). Compressed (--compress), the outer
  // gradient Delta_i = theta - w_i travels, as the paper compresses it, with error feedback: the
  // mean of the models is then theta - mean(Delta), which assumes the members share theta (the
  // same seed, and every complete round since).
  kernels::Compute& compute = ctx.compute();
  const bool compressed = ctx.compression().enabled();
  if (compressed) {
    std::shared_ptr<kernels::Buffer<float>> delta = exchange_.buffer(ctx, ctx.params().size());
    compute.weightedSum(delta->span(), {{1.0f, outer_.theta()}, {-1.0f, ctx.params()}});
    exchange_.start(ctx, round, std::move(delta));
  } else {
    exchange_.start(ctx, round, ctx.params());
  }
  const RingOutcome outcome = exchange_.wait(ctx, round, ctx.now() + ctx.commTimeout());
  if (outcome != RingOutcome::kComplete) {
    // theta and m stay; this peer goes on from its own w_i (see the header comment).
    exchange_.release(ctx, round);
    count(ctx, "fallbacks");
    count(ctx, ringOutcomeName(outcome));
    return;
  }
  if (compressed) {
    compute.weightedSum(mean_, {{1.0f, outer_.theta()}, {-1.0f, exchange_.result(round)}});
    outer_.step(ctx, 0, mean_, mean_);
  } else {
    outer_.step(ctx, 0, exchange_.result(round), mean_);
  }
  exchange_.release(ctx, round);
  compute.copy(ctx.params(), outer_.theta());
  outer_.publish(ctx);
  outer_.countRound();
  count(ctx, "rounds");
  ctx.metrics().set("diloco.outer_rounds", static_cast<double>(outer_.rounds()));
  if (outer_.hasMomentum())
    ctx.metrics().set("diloco.outer_momentum_norm", ctx.compute().norm2(outer_.momentum()));
}

void Diloco::finish(engine::PeerContext& ctx) {
  if (timed()) {
    // Ended by the budget, the run ended at a round complete on every member: one theta
    // everywhere already. At this peer's cap instead (rounds kept failing), the thetas may differ.
    if (!timed()->endedByBudget() && ctx.step() == ctx.totalSteps())
      endOnConsensus(ctx, outer_, mean_, kConsensus, outer_.rounds(), options_.pipeline, name());
    return;
  }
  PeriodicAveraging::finish(ctx);
  if (ctx.step() == ctx.totalSteps())
    endOnConsensus(ctx, outer_, mean_, kConsensus, ctx.step(), options_.pipeline, name());
}

void Diloco::serve(engine::ServiceContext& ctx, const engine::Incoming& request) {
  if (request.kind != kStateRequest) {
    ctx.metrics().add(name() + ".refused", 1);
    return;
  }
  serveOuterState(ctx, request, outer_, kState, step_, name());
}

void Diloco::join(engine::PeerContext& ctx) {
  if (timed()) timed()->joined();
  if (joinFromOuterState(ctx, outer_, name(), kStateRequest)) return;
  // Nobody had an outer state: a member's model, theta = that model, m = 0 (setup()).
  ctx.metrics().add(name() + ".join_fallbacks", 1);
  engine::Algorithm::join(ctx);
}

void Diloco::saveState(engine::AlgorithmState& state) const {
  saveOuterState(outer_, state);
  PeriodicAveraging::saveState(state);
}

void Diloco::loadState(const engine::AlgorithmState& state) {
  loadOuterState(outer_, state);
  PeriodicAveraging::loadState(state);
}

}  // namespace gossamer::algorithms
