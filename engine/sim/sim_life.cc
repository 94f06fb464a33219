// A simulated peer as the environment of its life (engine/life/peer_life.h), in virtual time: what
// a real peer learns through the cluster-control protocol (a member's status, its finished and
// released marks) is read off the world's other lives, as it would arrive over their links.
#include <algorithm>

#include "engine/base/enforce.h"
#include "engine/runtime/checkpoints.h"
#include "engine/sim/context.h"

namespace gossamer::engine::sim::detail {

life::MemberStatus SimLife::statusOf(const SimPeer& other) const {
  const bool done = other.phase == Phase::finished || other.phase == Phase::released;
  return life::MemberStatus{.training = other.phase == Phase::training,
                            .done = done,
                            .expected = other.environment.expects(p_.id, p_.life),
                            .step = other.step,
                            .totalSteps = other.totalSteps,
                            .runSteps = other.runSteps,
                            .members = other.swim.view.size()};
}

bool SimLife::expects(PeerId id, std::size_t life) const {
  const auto it = startLives_.find(id);
  return it != startLives_.end() && it->second == life;
}

life::StartPlan SimLife::awaitStart() {
  const Shared& s = p_.world.shared();
  // The initial peers start together in the cluster the world formed.
  if (!p_.late) return life::StartPlan{};
  // As the runtime's ClusterControl::awaitStart: ask the members (those alive answer) until the
  // start rule gives a plan, or the start timeout passes.
  std::optional<life::StartPlan> plan;
  const auto ready = [&] {
    std::vector<life::MemberStatus> statuses;
    for (PeerId other : p_.swim.view) {
      const SimPeer* q = p_.world.current(other);
      if (other == p_.id || q == nullptr || q->phase == Phase::dead || q->phase == Phase::left)
        continue;
      statuses.push_back(statusOf(*q));
    }
    // A life that comes late needs someone to learn from: never alone in its view.
    plan = life::planStart({.statuses = statuses,
                            .members = p_.swim.view.size(),
                            .minPeers = std::max<std::size_t>(s.training.minPeers, 2),
                            .resumed = resumeFrom_ != nullptr,
                            .joined = p_.swim.protocol->joined()});
    return plan.has_value();
  };
  const bool started = p_.block(ready, p_.world.now() + s.training.startTimeout);
  GOSSAMER_ENFORCE(started, "peer {} joined no one within {} ms (every seed dead or cut off)",
                   p_.id, s.training.startTimeout.count());
  return *plan;
}

void SimLife::startedWith(const std::vector<PeerId>& members) {
  startLives_.clear();
  for (PeerId member : members)
    if (const SimPeer* q = p_.world.current(member)) startLives_[member] = q->life;
}

std::vector<PeerId> SimLife::members() { return p_.swim.view; }

std::uint64_t SimLife::epoch() { return p_.swim.viewEpoch; }

PeerContext& SimLife::context() { return *p_.parts.context; }

train::Learner& SimLife::takeShard(std::size_t count, std::size_t rank) {
  const Shared& s = p_.world.shared();
  const runtime::TrainingConfig& t = s.training;
  if (!p_.parts.learner) {
    p_.parts.learner =
        std::make_unique<train::Learner>(*s.compute, *s.model, t.optimizer, s.data->train,
                                         p_.world.shard(count, rank), t.batch, t.seed);
  } else {
    p_.parts.learner->setShard(p_.world.shard(count, rank));
  }
  return *p_.parts.learner;
}

std::shared_ptr<const topology::Graph> SimLife::graph(const std::vector<PeerId>& members,
                                                      std::uint64_t step) {
  return p_.world.graph(members, step);
}

// Read off its life (a real peer asks it: a round trip).
std::optional<std::uint64_t> SimLife::trainingStep(PeerId member) {
  const SimPeer* q = p_.world.current(member);
  if (q == nullptr || q->phase != Phase::training) return std::nullopt;
  return q->step.load();
}

std::optional<std::uint64_t> SimLife::heardStep(PeerId member) {
  const auto it = p_.heard.steps.find(member);
  if (it == p_.heard.steps.end()) return std::nullopt;
  return it->second;
}

std::uint64_t SimLife::expiredWaits() { return p_.heard.expiredWaits; }

bool SimLife::timeVaryingGraph() const { return p_.world.shared().topology->timeVarying(); }

std::uint64_t SimLife::totalSteps(std::size_t) { return p_.world.shared().totalSteps; }

void SimLife::atEvalPoint(std::uint64_t, std::uint64_t point) { p_.world.samplePoint(p_, point); }

bool SimLife::checkpointDue(std::uint64_t step) {
  return runtime::PeerCheckpoints::dueEvery(p_.world.shared().training.checkpointEvery, step);
}

// Kept in memory as a real peer keeps it in its file.
void SimLife::keepCheckpoint(train::Checkpoint checkpoint) {
  p_.world.keepCheckpoint(p_.id, std::move(checkpoint));
}

void SimLife::announce(life::Barrier barrier) {
  if (barrier == life::Barrier::finished) {
    p_.phase = Phase::finished;
    p_.figures.finishedAt = p_.world.now();
  } else {
    p_.phase = Phase::released;
    p_.figures.releasedAt = p_.world.now();
  }
  p_.world.pokeAll();
}

// The released barrier keeps a real peer's final model available to the others' final
// consensus pulls; the simulator evaluates the final models itself and nobody pulls them, so
// nothing is waited for there (a real run ends that one-way latency later).
bool SimLife::awaitOthers(life::Barrier barrier) {
  if (barrier == life::Barrier::released) return true;
  const TimePoint start = p_.world.now();
  const bool done = p_.block([this] { return p_.othersDone(Phase::finished); },
                             start + p_.world.shared().training.finishTimeout);
  p_.figures.commWait += p_.world.now() - start;
  return done;
}

}  // namespace gossamer::engine::sim::detail
