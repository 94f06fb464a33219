#include "algorithms/shared_end.h"

#include <algorithm>
#include <cmath>

#include "engine/base/enforce.h"

namespace gossamer::algorithms {
namespace {

using Seconds = std::chrono::duration<double>;
constexpr std::chrono::seconds kEvery{1};  // the members report their speeds once a second

}  // namespace

void SharedEnd::validate(const std::string& algorithm, const std::string& end) {
  GOSSAMER_ENFORCE(end == "steps" || end == "budget",
                   "{}.end must be steps (every peer the run's steps) or budget (the cluster's "
                   "steps, shared by speed), not '{}'",
                   algorithm, end);
}

SharedEnd::SharedEnd(const std::string& algorithm, const std::string& end)
    : who_(algorithm), enabled_(end == "budget") {
  validate(algorithm, end);
}

void SharedEnd::start(engine::PeerContext& ctx) {
  if (!enabled_ || started_) return;
  budget_ = static_cast<double>(ctx.runSteps() * ctx.members().size());
  ctx.setTotalSteps(static_cast<std::uint64_t>(budget_));
  next_ = ctx.now() + kEvery;
  started_ = true;
}

double SharedEnd::rate(const Heard& heard, Clock::time_point now) const {
  const double seconds = Seconds(now - heard.firstAt).count();
  if (seconds < 1) return 0;
  return static_cast<double>(heard.step - heard.firstStep) / seconds;
}

void SharedEnd::update(engine::PeerContext& ctx) {
  if (!enabled_ || !started_) return;
  const Clock::time_point now = ctx.now();
  if (now < next_) return;
  next_ = now + kEvery;
  const std::uint64_t own = ctx.step() + 1;  // this step, which afterStep follows
  double spent = static_cast<double>(own), rates = 0, ownRate = 0;
  for (const engine::PeerId member : ctx.members()) {
    std::uint64_t step = own;
    if (member != ctx.self()) {
      const std::optional<engine::PeerSpeed> speed = ctx.speedOf(member);
      if (!speed) continue;  // not heard yet: neither its steps nor its rate count
      step = speed->step;
      spent += static_cast<double>(step);
    }
    const auto it = heard_.try_emplace(member, Heard{step, now, step}).first;
    it->second.step = std::max(it->second.step, step);
    const double r = rate(it->second, now);
    rates += r;
    if (member == ctx.self()) ownRate = r;
  }
  std::erase_if(heard_, [&](const auto& entry) {
    return !std::binary_search(ctx.members().begin(), ctx.members().end(), entry.first);
  });
  ctx.metrics().set(who_ + ".cluster_steps", spent);
  spent_ = spent;
  if (spent >= budget_) {
    ctx.setTotalSteps(own);  // this step is this peer's last
    return;
  }
  if (rates <= 0 || ownRate <= 0) return;  // no estimate yet: the cap stays
  const double left = (budget_ - spent) / rates;
  ctx.setTotalSteps(
      own + std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(ownRate * left))));
}

std::optional<double> SharedEnd::progress() const {
  if (!spent_ || budget_ <= 0) return std::nullopt;
  return std::min(1.0, *spent_ / budget_);
}

engine::Invariants SharedEnd::adjust(engine::Invariants invariants) const {
  if (enabled_) invariants.sameStepCount = false;
  return invariants;
}

}  // namespace gossamer::algorithms
