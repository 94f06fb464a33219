// One life of a simulated peer: its fiber's body (the training loop, finish), blocking in virtual
// time, the views it adopts at step boundaries, and its inbox.
#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/checkpoints.h"
#include "engine/runtime/speeds.h"
#include "engine/sim/context.h"
#include "engine/train/schedule.h"
#include "net/limits.h"

namespace gossamer::engine::sim::detail {

std::vector<Incoming> SimInbox::drain(std::optional<std::uint32_t> kind) {
  // The ones taken to the back, both parts in arrival order.
  const auto taken = std::stable_partition(
      queue_.begin(), queue_.end(), [&](const Incoming& m) { return kind && m.kind != *kind; });
  std::vector<Incoming> out(std::make_move_iterator(taken), std::make_move_iterator(queue_.end()));
  queue_.erase(taken, queue_.end());
  return out;
}

std::size_t SimInbox::discardBefore(std::uint64_t step) {
  const std::size_t before = queue_.size();
  std::erase_if(queue_, [step](const Incoming& m) { return m.step < step; });
  return before - queue_.size();
}

bool SimInbox::wait(std::optional<std::uint32_t> kind, Clock::time_point deadline) {
  const TimePoint start = peer_.world.now();
  const bool queued = peer_.block(
      [&] {
        return std::any_of(queue_.begin(), queue_.end(),
                           [&](const Incoming& m) { return !kind || m.kind == *kind; });
      },
      deadline);
  peer_.figures.commWait += peer_.world.now() - start;
  return queued;
}

// ---- a peer's life -----------------------------------------------------------------------------

SimPeer::SimPeer(World& w, PeerId peerId, std::size_t lifeNumber, bool joinsLate)
    : world(w), id(peerId), life(lifeNumber), late(joinsLate) {
  const Shared& s = w.shared();
  parts.rng.seed(s.config.training.seed * 0x9e3779b97f4a7c15ull ^ peerId);
  const runtime::TrainingConfig& t = s.training;
  // Decoded payloads get memory of their own (the simulator has no receive slots).
  parts.codec = std::make_unique<runtime::PayloadCodec>(
      *s.compute, *s.compute, t.compression, t.seed ^ peerId,
      [](std::size_t) { return net::Payload(); }, net::Limits{}.maxFrameBytes);
  parts.algorithm = s.registry.algorithms.get(s.algorithm).make(t.algorithmOptions);
  parts.context = std::make_unique<SimContext>(*this);
  parts.serveContext = std::make_unique<SimServe>(*this);
  lifecycle = std::make_unique<life::PeerLife>(id, t, *parts.algorithm, *s.compute, environment,
                                               life::StepCounters{step, totalSteps, runSteps});
}

SimPeer::~SimPeer() = default;

void SimPeer::start() {
  blocked.fiber = std::make_unique<Fiber>([this] { body(); }, world.shared().config.stackBytes);
}

bool SimPeer::block(const std::function<bool()>& ready, TimePoint deadline) {
  GOSSAMER_ENFORCE(world.inFiber(), "a simulated peer blocked outside its fiber");
  for (;;) {
    if (ready()) return true;
    if (world.now() >= deadline) return false;
    const std::uint64_t token = ++blocked.token;
    if (deadline != kNever) {
      world.at(deadline, [this, token] {
        if (blocked.waiting && blocked.token == token) world.resume(*this);
      });
    }
    blocked.waiting = true;
    blocked.fiber->yield();
    blocked.waiting = false;
    if (killed) throw Killed{};
  }
}

void SimPeer::poke() {
  if (blocked.waiting && !killed) world.resume(*this);
}

void SimPeer::noteSpeed() {
  const TimePoint now = world.now();
  const auto samples = static_cast<std::uint64_t>(parts.learner->samples());
  const auto reading = [&] {
    return runtime::LoopReading{.step = step,
                                .samples = samples,
                                .computeSeconds = Seconds(figures.computeTime).count(),
                                .loopSeconds = Seconds(now - figures.trainStart).count()};
  };
  if (speeds.open && now - speeds.start < runtime::kSpeedReportPeriod) return;
  if (speeds.open) {
    const runtime::LoopReading before{
        .step = speeds.step,
        .samples = speeds.samples,
        .computeSeconds = Seconds(speeds.compute).count(),
        .loopSeconds = Seconds(speeds.start - figures.trainStart).count()};
    if (std::optional<PeerSpeed> speed = runtime::speedBetween(before, reading()))
      speeds.last = speed;
  }
  speeds.open = true;
  speeds.start = now;
  speeds.step = step;
  speeds.samples = samples;
  speeds.compute = figures.computeTime;
}

bool SimPeer::othersDone(Phase mark) const {
  for (PeerId other : swim.view) {
    if (other == id) continue;
    const SimPeer* p = world.current(other);
    if (p == nullptr || p->phase == Phase::dead) return false;  // until the view drops it
    if (!world.phaseSeen(*p, *this, mark)) return false;
  }
  return true;
}

void SimPeer::body() {
  if (killed) return;
  try {
    run();
  } catch (const Killed&) {
    // A kill -9: nothing more of this life runs.
  } catch (const std::exception& e) {
    // The process would end: the others notice it as they notice a kill.
    error = e.what();
    phase = Phase::dead;
    serveOpen = false;
    log::get("sim")->warn("peer {} failed: {}", id, e.what());
    swim.protocol->stop();
  }
}

// The life of a real peer (runtime::Peer::run), on the fiber: start, the steps (or a leave at a
// step boundary), finish with the others, release them.
void SimPeer::run() {
  if (!lifecycle->start()) {
    // The cluster had trained all its steps: nothing to join; it leaves at once, holding nobody.
    leaveCluster();
    return;
  }
  phase = Phase::training;
  serveOpen = true;
  // As a real peer: the clock of its training starts here, and waiting for the others to show
  // up (or pulling a model to join) is not part of its waits.
  figures.trainStart = world.now();
  figures.commWait = {};
  while (step < totalSteps) {
    if (leaveRequested) {
      lifecycle->leave();
      leaveCluster();
      return;
    }
    if (lifecycle->step()) lifecycle->afterStep();
  }
  lifecycle->finish();
  lifecycle->release();
}

void SimPeer::leaveCluster() {
  if (phase != Phase::left) {
    figures.finishedAt = figures.releasedAt = world.now();
    phase = Phase::left;
  }
  serveOpen = false;
  world.pokeAll();
  swim.protocol->leave(std::chrono::milliseconds(2000), [] {});
}

}  // namespace gossamer::engine::sim::detail
