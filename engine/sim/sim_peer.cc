// One life of a simulated peer: its fiber's body (the training loop, finish), blocking in virtual
// time, the views it adopts at step boundaries, and its inbox.
#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/checkpoints.h"
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
  peer_.commWait += peer_.world.now() - start;
  return queued;
}

// ---- a peer's life -----------------------------------------------------------------------------

SimPeer::SimPeer(World& w, PeerId peerId, std::size_t lifeNumber, bool joinsLate)
    : world(w),
      id(peerId),
      life(lifeNumber),
      late(joinsLate),
      rng(w.shared().config.training.seed * 0x9e3779b97f4a7c15ull ^ peerId) {
  const Shared& s = w.shared();
  const runtime::TrainingConfig& t = s.config.training;
  // Decoded payloads get memory of their own (the simulator has no receive slots).
  codec = std::make_unique<runtime::PayloadCodec>(
      *s.compute, *s.compute, t.compression, t.seed ^ peerId,
      [](std::size_t) { return net::Payload(); }, net::Limits{}.maxFrameBytes);
  algorithm = s.registry.algorithms.get(s.algorithm).make(t.algorithmOptions);
  context = std::make_unique<SimContext>(*this);
  serveContext = std::make_unique<SimServe>(*this);
}

SimPeer::~SimPeer() = default;

void SimPeer::start() {
  fiber = std::make_unique<Fiber>([this] { body(); }, world.shared().config.stackBytes);
}

bool SimPeer::block(const std::function<bool()>& ready, TimePoint deadline) {
  GOSSAMER_ENFORCE(world.inFiber(), "a simulated peer blocked outside its fiber");
  for (;;) {
    if (ready()) return true;
    if (world.now() >= deadline) return false;
    const std::uint64_t token = ++blockToken;
    if (deadline != kNever) {
      world.at(deadline, [this, token] {
        if (waiting && blockToken == token) world.resume(*this);
      });
    }
    waiting = true;
    fiber->yield();
    waiting = false;
    if (killed) throw Killed{};
  }
}

void SimPeer::poke() {
  if (waiting && !killed) world.resume(*this);
}

void SimPeer::adoptView() {
  members = view;
  epoch = viewEpoch;
  const std::size_t rank =
      static_cast<std::size_t>(std::find(members.begin(), members.end(), id) - members.begin());
  const std::size_t count = members.size();
  const Shared& s = world.shared();
  const runtime::TrainingConfig& t = s.config.training;
  if (!learner) {
    learner = std::make_unique<train::Learner>(*s.compute, *s.model, t.optimizer, s.data->train,
                                               world.shard(count, rank), t.batch, t.seed);
  } else if (count != shardCount || rank != shardRank) {
    learner->setShard(world.shard(count, rank));
  }
  shardCount = count;
  shardRank = rank;
  graph = world.graph(members, step);
}

bool SimPeer::othersDone(bool released) const {
  for (PeerId other : view) {
    if (other == id) continue;
    const SimPeer* p = world.current(other);
    if (p == nullptr || p->phase == Phase::dead) return false;  // until the view drops it
    if (!world.phaseSeen(*p, *this, released ? Phase::released : Phase::finished)) return false;
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
    membership->stop();
  }
}

void SimPeer::run() {
  const Shared& s = world.shared();
  const runtime::TrainingConfig& t = s.config.training;
  if (late) {
    // As the runtime's start: admitted by a seed, and someone else in the view to learn from.
    const bool admitted = block([this] { return membership->joined() && view.size() > 1; },
                                world.now() + t.startTimeout);
    GOSSAMER_ENFORCE(admitted, "peer {} joined no one within {} ms (every seed dead or cut off)",
                     id, t.startTimeout.count());
  }
  adoptView();
  if (const train::Checkpoint* saved = late ? world.checkpointOf(id) : nullptr) {
    // A restart from its checkpoint, as a resumed peer starts (runtime::Peer's startFrom): the
    // learner and the algorithm's state restored; when others are training, it goes on from
    // their step if that is later, and drops what the others counted as lost with it.
    step = runtime::PeerCheckpoints::restore(*saved, *learner, *algorithm);
    std::optional<std::uint64_t> clusterStep;
    for (PeerId other : view) {
      const SimPeer* p = world.current(other);
      if (other != id && p != nullptr && p->phase == Phase::training)
        clusterStep = std::max(clusterStep.value_or(0), p->step);
    }
    if (clusterStep) {
      step = std::max(step, *clusterStep);
      algorithm->resumedLate(*context);
    }
  } else if (late) {
    algorithm->join(*context);
  } else if (t.initialParams) {
    const std::vector<float> initial = t.initialParams(shardRank, learner->params().size());
    GOSSAMER_ENFORCE_EQ(initial.size(), learner->params().size(),
                        "initialParams returned the wrong size");
    s.compute->upload(learner->params(), std::span<const float>(initial));
  }
  startStep = step;
  algorithm->setup(*context);
  serveOpen = true;
  // As a real peer: the clock of its training starts here, and waiting for the others to show
  // up (or pulling a model to join) is not part of its waits.
  trainStart = world.now();
  commWait = {};
  const runtime::EvalSchedule points{.everySteps = s.config.evalEverySteps};
  while (step < s.totalSteps) {
    if (epoch != viewEpoch) {
      adoptView();
      algorithm->setup(*context);
    } else if (s.topology->timeVarying()) {
      graph = world.graph(members, step);
    }
    learner->optimizer().setLearningRate(
        train::scheduledRate(t.optimizer.lr, t.schedule, step, s.totalSteps));
    algorithm->step(*context);
    ++step;
    if (const std::optional<std::uint64_t> point = points.pointAfter(step))
      world.samplePoint(*this, *point);
    // The runtime's checkpointIfDue (a real peer writes it to its file; the last one, at the
    // end, matters to no restart here: only a peer in training is killed).
    if (t.checkpointEvery > 0 && step % static_cast<std::uint64_t>(t.checkpointEvery) == 0)
      world.keepCheckpoint(
          id, runtime::PeerCheckpoints::capture(*learner, *algorithm, step, s.totalSteps));
  }
  phase = Phase::finished;
  finishedAt = world.now();
  world.pokeAll();
  const TimePoint start = world.now();
  block([this] { return othersDone(false); }, start + t.finishTimeout);
  commWait += world.now() - start;
  finishing = true;
  if (epoch != viewEpoch) {
    adoptView();
    algorithm->setup(*context);
  }
  algorithm->finish(*context);
  phase = Phase::released;
  releasedAt = world.now();
  world.pokeAll();
}

}  // namespace gossamer::engine::sim::detail
