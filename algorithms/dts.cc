#include "algorithms/dts.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "algorithms/ring_allreduce.h"
#include "engine/base/enforce.h"

namespace gossamer::algorithms {

using engine::train::OptimizerKind;

void DtsOptions::validate() const {
  const std::uint64_t p = period.valueOr(1), t = delay.valueOr(0);
  GOSSAMER_ENFORCE(p >= 1, "dts.period must be at least 1 or auto, not {}", p);
  GOSSAMER_ENFORCE(pieces >= 1 && pieces <= kMaxRingPipeline,
                   "dts.pieces must be in [1, {}], not {}", kMaxRingPipeline, pieces);
  GOSSAMER_ENFORCE(t % p == 0,
                   "dts.delay must be a multiple of dts.period (a window is compensated at a "
                   "window's end), not {} with period {}",
                   t, p);
  GOSSAMER_ENFORCE(backups <= 1024, "dts.backups must be in [0, 1024], not {}", backups);
  GOSSAMER_ENFORCE(t / p <= 64,
                   "dts.delay must be at most 64 x dts.period (each of the floor(delay / period) "
                   "+ 1 rounds in flight holds three copies of what it sends), not {} with "
                   "period {}",
                   t, p);
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
    case OptimizerKind::kSgd:
      return {-lr, 0};
    case OptimizerKind::kMomentum:
      return {-lr, 1};
    case OptimizerKind::kNesterov:
      return {-lr * (1 + opt.mu), 1};
    case OptimizerKind::kAdam:
      break;
  }
  GOSSAMER_THROW("dts: adam is not a linear optimizer");
}

void windowResponse(kernels::Compute& compute, const Matrix& m, std::span<const float> w,
                    std::span<const float> v, std::span<const float> start, std::span<float> x) {
  const std::size_t n = w.size();
  const auto f = [](double value) { return static_cast<float>(value); };
  if (v.empty()) {
    GOSSAMER_ENFORCE(start.size() == n && x.size() == n, "dts: a window of {} floats", n);
    compute.weightedSum(x, {{1.0f, w}, {f(-m.ww), start}});
    return;
  }
  GOSSAMER_ENFORCE(start.size() == 2 * n && x.size() == 2 * n, "dts: a window of {} floats", 2 * n);
  const std::span<const float> ws = start.first(n), vs = start.subspan(n);
  compute.weightedSum(x.first(n), {{1.0f, w}, {f(-m.ww), ws}, {f(-m.wv), vs}});
  compute.weightedSum(x.subspan(n), {{1.0f, v}, {f(-m.vw), ws}, {f(-m.vv), vs}});
}

void compensate(kernels::Compute& compute, const Matrix& m, std::span<float> w, std::span<float> v,
                std::span<const float> average, std::span<const float> own) {
  const std::size_t n = w.size();
  const auto f = [](double value) { return static_cast<float>(value); };
  GOSSAMER_ENFORCE_EQ(average.size(), own.size(), "dts: a window's average and own sizes");
  if (average.size() == n) {
    // delta = average - own, carried on by M's first column.
    compute.weightedSum(w, {{1.0f, w}, {f(m.ww), average}, {f(-m.ww), own}});
    if (!v.empty()) compute.weightedSum(v, {{1.0f, v}, {f(m.vw), average}, {f(-m.vw), own}});
    return;
  }
  GOSSAMER_ENFORCE_EQ(average.size(), 2 * n, "dts: a window's difference has the wrong size");
  const std::span<const float> aw = average.first(n), av = average.subspan(n);
  const std::span<const float> ow = own.first(n), ov = own.subspan(n);
  compute.weightedSum(w, {{1.0f, w}, {f(m.ww), aw}, {f(-m.ww), ow}, {f(m.wv), av}, {f(-m.wv), ov}});
  if (!v.empty())
    compute.weightedSum(v,
                        {{1.0f, v}, {f(m.vw), aw}, {f(-m.vw), ow}, {f(m.vv), av}, {f(-m.vv), ov}});
}

}  // namespace dts

namespace {

std::span<float> velocity(engine::PeerContext& ctx) {
  for (auto& [name, buffer] : ctx.optimizer().state())
    if (name == "velocity") return buffer;
  return {};
}

}  // namespace

Dts::Dts(DtsOptions options) : options_(options) {
  delay_ = options_.delay.valueOr(0);
  period_ = options_.period.valueOr(std::gcd(delay_, kProvisionalPeriod));
}
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
  const bool twoVectors = period_ > 1 && ctx.optimizer().options().kind != OptimizerKind::kSgd;
  return twoVectors ? 2 * n : n;
}

void Dts::setup(engine::PeerContext& ctx) {
  linear(ctx);  // refuses adam
  GOSSAMER_ENFORCE(options_.backups == 0 || !ctx.compression().enabled(),
                   "dts.backups does not combine with --compress: the list of contributors "
                   "travels with each window and must arrive exact");
  if (!allreduce_) {
    allreduce_ = std::make_unique<AsyncAllReduce>(AsyncAllReduceOptions{
        .kind = kWindow,
        .op = ReduceOp::kMean,
        .pieces = options_.pieces,
        .who = name(),
        // A faster member runs at most t steps ahead: floor(t / p) + 1 rounds (auto: t <= 64 p).
        .maxFutureRounds =
            (options_.delay.isAuto() || options_.period.isAuto() ? 64 : delay_ / period_) + 2,
        // The window's averaged gradients, with error feedback (--compress).
        .compress = true,
        .backups = options_.backups});
  }
  owners_.clear();
  // The members changed (or this is the first setup): rounds started with the old view fail.
  dropAll(ctx);
  if (options_.delay.isAuto() || options_.period.isAuto()) {
    // Provisional until the new view's first complete survey; windows anchored at step 0, as
    // every member's.
    fit_.reset();
    delay_ = options_.delay.valueOr(0);
    period_ = options_.period.valueOr(std::gcd(delay_, kProvisionalPeriod));
    anchor_ = 0;
  }
  startWindow(ctx);
}

void Dts::startWindow(engine::PeerContext& ctx) {
  windowSteps_ = 0;
  skipped_ = false;
  windowMap_ = dts::Matrix{};
  if (period_ == 1) return;  // the gradient itself is sent: no window state
  const std::size_t n = ctx.params().size(), size = width(ctx);
  if (start_.size() != size) start_ = ctx.compute().allocate<float>(size);
  const std::span<float> start = start_;
  ctx.compute().copy(start.first(n), ctx.params());
  if (size == 2 * n) ctx.compute().copy(start.subspan(n), velocity(ctx));
}

void Dts::endWindow(engine::PeerContext& ctx, std::uint64_t round) {
  // X = state now - (the state the window started from, carried through its steps without
  // gradients): the window's gradients' contribution, written straight into the round's buffer.
  std::shared_ptr<kernels::Buffer<float>> x = roundBuffer(ctx);
  const std::span<float> v =
      start_.size() == 2 * ctx.params().size() ? velocity(ctx) : std::span<float>();
  dts::windowResponse(ctx.compute(), windowMap_, ctx.params(), v, start_,
                      x->span().first(width(ctx)));
  startRound(ctx, round, std::move(x), dts::Matrix{});
}

void Dts::dropAll(engine::PeerContext& ctx) {
  if (!pending_.empty()) ctx.metrics().add("dts.fallbacks", static_cast<double>(pending_.size()));
  for (auto& [round, p] : pending_) {
    // One by one, not releaseAll(): that would also drop the messages of rounds that faster
    // members already started over the new view, and those rounds would then wait out their
    // deadline here and there.
    allreduce_->release(ctx, round);
  }
  pending_.clear();
}

void Dts::startRound(engine::PeerContext& ctx, std::uint64_t round,
                     std::shared_ptr<kernels::Buffer<float>> x, const dts::Matrix& m) {
  if (round <= lastRound_) {
    // The step count moved back (adoptStep): rounds are started in increasing order only, so
    // this window goes uncompensated.
    ctx.metrics().add("dts.fallbacks", 1);
    return;
  }
  Pending pending{.m = m, .due = round + delay_};
  if (options_.backups > 0) allreduce_->setOwners(owners_);
  if (skipped_) {
    // A window this peer caught up through: the others' round went on without it.
    allreduce_->listen(ctx, round, x->size());
    pending.own = std::move(x);
    ctx.metrics().add("dts.caught_up", 1);
  } else {
    allreduce_->start(ctx, round, std::move(x));
  }
  lastRound_ = round;
  pending_.emplace(round, std::move(pending));
}

std::shared_ptr<kernels::Buffer<float>> Dts::roundBuffer(engine::PeerContext& ctx) {
  const std::size_t size = width(ctx);
  if (options_.backups == 0) return allreduce_->buffer(ctx, size);
  std::shared_ptr<kernels::Buffer<float>> x = allreduce_->buffer(ctx, size + ctx.members().size());
  writePresence(ctx, x->span().subspan(size));
  return x;
}

bool Dts::behind(engine::PeerContext& ctx) {
  if (options_.backups == 0) return false;
  allreduce_->poll(ctx);
  // The end of the window this step belongs to. Its round already reduced somewhere means it
  // went on without this peer (the others may run ahead by up to t steps while they still wait
  // for this peer's response: only a reduced chunk says they do not).
  const std::uint64_t windowEnd = anchor_ + ((ctx.step() - anchor_) / period_ + 1) * period_;
  return allreduce_->latestReducedHeard() >= windowEnd;
}

void Dts::complete(engine::PeerContext& ctx, std::uint64_t round) {
  Pending& p = pending_.at(round);
  const RingOutcome outcome = allreduce_->wait(ctx, round, ctx.now() + ctx.commTimeout());
  const std::size_t size = width(ctx);
  if (outcome == RingOutcome::kComplete) {
    // The state += M (X~ - X_j), in one pass over each of w and v.
    const std::span<const float> mean = allreduce_->result(round);
    const std::span<const float> own = p.own ? p.own->span() : allreduce_->input(round);
    dts::compensate(ctx.compute(), p.m, ctx.params(), velocity(ctx), mean.first(size),
                    own.first(size));
    ctx.metrics().add("dts.rounds", 1);
    if (options_.backups > 0) {
      // The members whose response made this round own the next ones' chunks.
      owners_ = presentMembers(ctx, mean.subspan(size));
    }
  } else {
    // This window keeps its local updates (a listener: its steps without gradients).
    ctx.metrics().add("dts.fallbacks", 1);
    ctx.metrics().add(std::string("dts.") + ringOutcomeName(outcome), 1);
    owners_.clear();
  }
  allreduce_->release(ctx, round);
  pending_.erase(round);
}

void Dts::completeDue(engine::PeerContext& ctx, std::uint64_t done) {
  allreduce_->poll(ctx);
  while (!pending_.empty() && pending_.begin()->second.due <= done)
    complete(ctx, pending_.begin()->first);
}

double Dts::step(engine::PeerContext& ctx) {
  double loss = lastLoss_;
  if (behind(ctx)) {
    // g = 0: the optimizer applies only the step's map A_k (see "Backup workers").
    ctx.compute().fill(ctx.grads(), 0.0f);
    skipped_ = true;
  } else {
    loss = lastLoss_ = ctx.computeGradients();
  }
  ctx.applyOptimizer();
  // The rate the schedule set for this step, and the step count once it is done.
  const double lr = ctx.optimizer().options().lr;
  const std::uint64_t done = ctx.step() + 1;
  const dts::Linear opt = linear(ctx);
  const dts::Matrix a = dts::stepMap(opt, lr);
  for (auto& [round, p] : pending_) p.m = a * p.m;
  if (period_ == 1) {
    // X = B g: send g, with the injection as M's first column.
    const auto [cw, cv] = dts::injection(opt, lr);
    std::shared_ptr<kernels::Buffer<float>> g = roundBuffer(ctx);
    ctx.compute().copy(g->span().first(ctx.grads().size()), ctx.grads());
    startRound(ctx, done, std::move(g), dts::Matrix{cw, 0, cv, 0});
    skipped_ = false;  // p = 1: each step is its own window
    completeDue(ctx, done);
    fit(ctx, done);
    return loss;
  }
  windowMap_ = a * windowMap_;
  ++windowSteps_;
  if (!windowEnds(done)) {
    allreduce_->poll(ctx);
    fit(ctx, done);  // a fixed p that does not divide the survey steps: only t changes there
    return loss;
  }
  // A window's end: its response leaves before the compensations due now change the state
  // (they are perturbations after this step), then the next window starts from that state. The
  // delay is a multiple of the period, so compensations land on window ends only.
  endWindow(ctx, done);
  completeDue(ctx, done);
  startWindow(ctx);
  fit(ctx, done);
  return loss;
}

void Dts::fit(engine::PeerContext& ctx, std::uint64_t done) {
  if (!options_.delay.isAuto() && !options_.period.isAuto()) return;
  const std::optional<NetworkFacts> facts = fit_.step(ctx, done);
  if (!facts) return;
  const double gradient = static_cast<double>(ctx.params().size()) * sizeof(float);
  const double window =
      ctx.optimizer().options().kind == OptimizerKind::kSgd ? gradient : 2 * gradient;
  const DtsChoice choice =
      chooseDts(*facts, gradient, window, options_.delay.fixed, options_.period.fixed);
  if (choice.period != period_) {
    // A new window length from this window's end (provisional p divides every survey step): the
    // rounds in flight are compensated now, exactly (their maps are carried to this step), and
    // the windows start again from here.
    while (!pending_.empty()) complete(ctx, pending_.begin()->first);
    period_ = choice.period;
    anchor_ = done;
    startWindow(ctx);
  }
  delay_ = choice.delay;
  const std::string why = fmt::format(
      "survey at step {}: {} members, slowest step {:.4f} s, a window's exchange of {:.1f} MB "
      "{:.4f} s",
      done, facts->members(), facts->slowestStepSeconds(), (period_ == 1 ? gradient : window) / 1e6,
      facts->exchangeSeconds(Exchange::kDirect, period_ == 1 ? gradient : window));
  if (options_.period.isAuto())
    reportChosen(ctx, name(), "period", static_cast<double>(period_), why);
  if (options_.delay.isAuto()) reportChosen(ctx, name(), "delay", static_cast<double>(delay_), why);
}

void Dts::finish(engine::PeerContext& ctx) {
  // The last, partial window: the same steps on every peer (they all end at the same count).
  if (period_ > 1 && windowSteps_ > 0) endWindow(ctx, ctx.step());
  while (!pending_.empty()) complete(ctx, pending_.begin()->first);
  startWindow(ctx);
}

void Dts::leave(engine::PeerContext& ctx) {
  dropAll(ctx);
  if (allreduce_) allreduce_->releaseAll(ctx);
}

}  // namespace gossamer::algorithms
