#include "algorithms/dts.h"

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {

using engine::train::OptimizerKind;

void DtsOptions::validate() const {
  GOSSAMER_ENFORCE(period >= 1, "dts.period must be at least 1, not {}", period);
  GOSSAMER_ENFORCE(pieces >= 1 && pieces <= kMaxRingPipeline, "dts.pieces must be in [1, {}], not {}",
                   kMaxRingPipeline, pieces);
  GOSSAMER_ENFORCE(delay / period <= 64,
                   "dts.delay must be at most 64 x dts.period (each of the floor(delay / period) "
                   "+ 1 rounds in flight holds three copies of what it sends), not {} with "
                   "period {}",
                   delay, period);
}

namespace dts {

Matrix stepMap(const Linear& opt, double lr) {
  const double mu = opt.mu, wd = opt.wd;
  switch (opt.kind) {
    case OptimizerKind::kSgd:
      return {1 - lr * wd, 0, 0, 0};
    case OptimizerKind::kMomentum:
      // dv' = wd dw + mu dv;  dw' = dw - lr dv'
      return {1 - lr * wd, -lr * mu, wd, mu};
    case OptimizerKind::kNesterov:
      // dv' = wd dw + mu dv;  dw' = dw - lr (wd dw + mu dv')
      return {1 - lr * wd * (1 + mu), -lr * mu * mu, wd, mu};
    case OptimizerKind::kAdam:
      break;
  }
  GOSSAMER_THROW("dts: adam is not a linear optimizer");
}

std::array<double, 2> injection(const Linear& opt, double lr) {
  switch (opt.kind) {
    case OptimizerKind::kSgd: return {-lr, 0};
    case OptimizerKind::kMomentum: return {-lr, 1};
    case OptimizerKind::kNesterov: return {-lr * (1 + opt.mu), 1};
    case OptimizerKind::kAdam: break;
  }
  GOSSAMER_THROW("dts: adam is not a linear optimizer");
}

void accumulate(kernels::Compute& compute, const Linear& opt, double lr, std::span<float> xw,
                std::span<float> xv, std::span<const float> g) {
  const auto f = [](double x) { return static_cast<float>(x); };
  switch (opt.kind) {
    case OptimizerKind::kSgd:
      // Xw' = (1 - lr wd) Xw - lr g
      compute.axpby(xw, f(-lr), g, f(1 - lr * opt.wd));
      return;
    case OptimizerKind::kMomentum:
      // Xv' = mu Xv + wd Xw + g;  Xw' = Xw - lr Xv'
      compute.weightedSum(xv, {{f(opt.mu), xv}, {f(opt.wd), xw}, {1.0f, g}});
      compute.axpby(xw, f(-lr), xv, 1.0f);
      return;
    case OptimizerKind::kNesterov:
      // Xv' = mu Xv + wd Xw + g;  Xw' = (1 - lr wd) Xw - lr g - lr mu Xv'
      compute.weightedSum(xv, {{f(opt.mu), xv}, {f(opt.wd), xw}, {1.0f, g}});
      compute.weightedSum(xw, {{f(1 - lr * opt.wd), xw}, {f(-lr), g}, {f(-lr * opt.mu), xv}});
      return;
    case OptimizerKind::kAdam:
      break;
  }
  GOSSAMER_THROW("dts: adam is not a linear optimizer");
}

void compensate(kernels::Compute& compute, const Matrix& m, std::span<float> w,
                std::span<float> v, std::span<const float> d) {
  const std::size_t n = w.size();
  const auto f = [](double x) { return static_cast<float>(x); };
  if (d.size() == n) {
    compute.axpby(w, f(m.ww), d, 1.0f);
    if (!v.empty()) compute.axpby(v, f(m.vw), d, 1.0f);
    return;
  }
  GOSSAMER_ENFORCE_EQ(d.size(), 2 * n, "dts: a window's difference has the wrong size");
  const std::span<const float> dw = d.first(n), dv = d.subspan(n);
  compute.weightedSum(w, {{1.0f, w}, {f(m.ww), dw}, {f(m.wv), dv}});
  if (!v.empty()) compute.weightedSum(v, {{1.0f, v}, {f(m.vw), dw}, {f(m.vv), dv}});
}

}  // namespace dts

namespace {

std::span<float> velocity(engine::PeerContext& ctx) {
  for (auto& [name, buffer] : ctx.optimizer().state())
    if (name == "velocity") return buffer;
  return {};
}

}  // namespace

Dts::Dts(DtsOptions options) : options_(options) {}
Dts::~Dts() = default;

dts::Linear Dts::linear(engine::PeerContext& ctx) const {
  const engine::train::OptimizerOptions& o = ctx.optimizer().options();
  GOSSAMER_ENFORCE(o.kind != OptimizerKind::kAdam,
                   "dts compensates with the local optimizer's linear response to a gradient, "
                   "and adam is not linear: use --optimizer sgd|momentum|nesterov");
  return {.kind = o.kind, .mu = o.momentum, .wd = o.weightDecay};
}

std::size_t Dts::width(engine::PeerContext& ctx) const {
  const std::size_t n = ctx.params().size();
  const bool twoVectors =
      options_.period > 1 && ctx.optimizer().options().kind != OptimizerKind::kSgd;
  return twoVectors ? 2 * n : n;
}

void Dts::setup(engine::PeerContext& ctx) {
  linear(ctx);  // refuses adam
  if (!allreduce_) {
    allreduce_ = std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{
        .kind = kWindow,
        .op = ReduceOp::kMean,
        .pieces = options_.pieces,
        .who = name(),
        // A faster member runs at most t steps ahead: floor(t / p) + 1 rounds.
        .maxFutureRounds = static_cast<std::size_t>(options_.delay / options_.period) + 2});
  }
  // The members changed (or this is the first setup): rounds started with the old view fail.
  dropAll(ctx);
  const std::size_t size = width(ctx);
  if (window_.size() != size) window_ = ctx.compute().allocate<float>(size);
  ctx.compute().fill(window_, 0.0f);
  windowSteps_ = 0;
}

void Dts::dropAll(engine::PeerContext& ctx) {
  if (!pending_.empty()) ctx.metrics().add("dts.fallbacks", static_cast<double>(pending_.size()));
  for (auto& [round, p] : pending_) {
    // One by one, not releaseAll(): that would also drop the messages of rounds that faster
    // members already started over the new view, and those rounds would then wait out their
    // deadline here and there.
    allreduce_->release(ctx, round);
    spare_.push_back(std::move(p.sent));
  }
  pending_.clear();
}

void Dts::startRound(engine::PeerContext& ctx, std::uint64_t round, std::span<const float> x,
                     const dts::Matrix& m) {
  if (round <= lastRound_) {
    // The step count moved back (adoptStep): rounds are started in increasing order only, so
    // this window goes uncompensated.
    ctx.metrics().add("dts.fallbacks", 1);
    return;
  }
  Pending p;
  while (!spare_.empty() && p.sent.size() != x.size()) {
    if (spare_.back().size() == x.size()) p.sent = std::move(spare_.back());
    spare_.pop_back();
  }
  if (p.sent.size() != x.size()) p.sent = ctx.compute().allocate<float>(x.size());
  ctx.compute().copy(p.sent, x);
  p.m = m;
  p.due = round + options_.delay;
  allreduce_->start(ctx, round, x);
  lastRound_ = round;
  pending_.emplace(round, std::move(p));
}

void Dts::complete(engine::PeerContext& ctx, std::uint64_t round) {
  Pending& p = pending_.at(round);
  const RingOutcome outcome =
      allreduce_->wait(ctx, round, engine::Clock::now() + ctx.commTimeout());
  if (outcome == RingOutcome::kComplete) {
    // delta = X~ - X_j, in place of this peer's copy; then the state += M delta.
    ctx.compute().axpby(p.sent, 1.0f, allreduce_->result(round), -1.0f);
    dts::compensate(ctx.compute(), p.m, ctx.params(), velocity(ctx), p.sent);
    ctx.metrics().add("dts.rounds", 1);
  } else {
    ctx.metrics().add("dts.fallbacks", 1);  // this window keeps its local updates
    ctx.metrics().add(std::string("dts.") + ringOutcomeName(outcome), 1);
  }
  allreduce_->release(ctx, round);
  spare_.push_back(std::move(p.sent));
  pending_.erase(round);
}

double Dts::step(engine::PeerContext& ctx) {
  const double loss = ctx.computeGradients();
  ctx.applyOptimizer();
  // The rate the schedule set for this step, and the step count once it is done.
  const double lr = ctx.optimizer().options().lr;
  const std::uint64_t done = ctx.step() + 1;
  const dts::Linear opt = linear(ctx);
  const dts::Matrix a = dts::stepMap(opt, lr);
  for (auto& [round, p] : pending_) p.m = a * p.m;
  if (options_.period == 1) {
    // X = B g: send g, with the injection as M's first column.
    const auto [cw, cv] = dts::injection(opt, lr);
    startRound(ctx, done, ctx.grads(), dts::Matrix{cw, 0, cv, 0});
  } else {
    const std::size_t n = ctx.params().size();
    const std::span<float> x = window_;
    dts::accumulate(ctx.compute(), opt, lr, x.first(n), x.subspan(n), ctx.grads());
    ++windowSteps_;
    if (done % options_.period == 0) {
      startRound(ctx, done, window_, dts::Matrix{});
      ctx.compute().fill(window_, 0.0f);
      windowSteps_ = 0;
    }
  }
  allreduce_->poll(ctx);
  while (!pending_.empty() && pending_.begin()->second.due <= done)
    complete(ctx, pending_.begin()->first);
  return loss;
}

void Dts::finish(engine::PeerContext& ctx) {
  // The last, partial window: the same steps on every peer (they all end at the same count).
  if (windowSteps_ > 0) {
    startRound(ctx, ctx.step(), window_, dts::Matrix{});
    ctx.compute().fill(window_, 0.0f);
    windowSteps_ = 0;
  }
  while (!pending_.empty()) complete(ctx, pending_.begin()->first);
}

void Dts::leave(engine::PeerContext& ctx) {
  dropAll(ctx);
  if (allreduce_) allreduce_->releaseAll(ctx);
}

}  // namespace gossamer::algorithms
