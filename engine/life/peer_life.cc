#include "engine/life/peer_life.h"

#include <algorithm>
#include <cmath>

#include "engine/base/enforce.h"
#include "engine/runtime/checkpoints.h"
#include "engine/train/schedule.h"
#include "topology/placement.h"

namespace gossamer::engine::life {
namespace {

// The one of `candidates` whose step (`stepOf`: nullopt when unknown) is furthest above `floor`.
template <typename StepOf>
std::optional<PeerId> furthestAbove(const std::vector<PeerId>& candidates, std::uint64_t floor,
                                    StepOf stepOf) {
  std::optional<PeerId> ahead;
  for (PeerId member : candidates) {
    const std::optional<std::uint64_t> step = stepOf(member);
    if (step && *step > floor) {
      ahead = member;
      floor = *step;
    }
  }
  return ahead;
}

}  // namespace

const char* name(Phase phase) {
  switch (phase) {
    case Phase::waiting:
      return "waiting";
    case Phase::training:
      return "training";
    case Phase::finishing:
      return "finishing";
    case Phase::released:
      return "released";
    case Phase::left:
      return "left";
    case Phase::notStarted:
      return "not started";
  }
  return "?";
}

PeerLife::PeerLife(PeerId self, const runtime::TrainingConfig& config, Algorithm& algorithm,
                   kernels::Compute& compute, LifeEnvironment& environment, StepCounters counters)
    : self_(self),
      config_(config),
      algorithm_(algorithm),
      compute_(compute),
      env_(environment),
      counters_(counters) {}

// The training set split over the current members, this peer taking the shard of its rank: every
// peer computes the same partition from the same member list, so the data of a peer that left is
// covered again, and a newcomer gets its share. A fixed shard (config.shards) never moves.
void PeerLife::takeShard() {
  const std::vector<PeerId>& members = roster_.members;
  const std::size_t count = config_.shards > 0 ? config_.shards : members.size();
  const std::size_t rank =
      config_.shards > 0 ? config_.shardIndex
                         : static_cast<std::size_t>(
                               std::find(members.begin(), members.end(), self_) - members.begin());
  if (learner_ != nullptr && count == roster_.shardCount && rank == roster_.shardRank) return;
  roster_.shardCount = count;
  roster_.shardRank = rank;
  learner_ = &env_.takeShard(count, rank);
}

void PeerLife::buildGraph() {
  roster_.unplaced = env_.graph(roster_.members, counters_.step);
  const std::vector<PeerId>& order = roster_.placement;
  if (order.empty() || !std::is_permutation(order.begin(), order.end(), roster_.members.begin(),
                                            roster_.members.end())) {
    roster_.placement.clear();
    roster_.graph = roster_.unplaced;
    return;
  }
  roster_.graph =
      std::make_shared<const topology::Graph>(topology::placeMembers(*roster_.unplaced, order));
}

void PeerLife::placeMembers(std::span<const PeerId> order) {
  roster_.placement.assign(order.begin(), order.end());
  if (roster_.unplaced) buildGraph();
}

void PeerLife::adoptView(bool force) {
  const std::uint64_t epoch = env_.epoch();
  if (!force && epoch == roster_.epoch) return;
  const std::vector<PeerId> before = std::move(roster_.members);
  roster_.members = env_.members();
  roster_.epoch = epoch;
  takeShard();
  buildGraph();
  algorithm_.setup(env_.context());
  if (phase_ == Phase::training && algorithm_.lockstep()) realignWithReturned(before);
  known_.insert(roster_.members.begin(), roster_.members.end());
}

void PeerLife::realignWithReturned(const std::vector<PeerId>& before) {
  std::vector<PeerId> returned;
  for (PeerId member : roster_.members)
    if (member != self_ && known_.count(member) > 0 &&
        std::find(before.begin(), before.end(), member) == before.end())
      returned.push_back(member);
  const std::optional<PeerId> ahead = furthestAbove(
      returned, counters_.step, [this](PeerId member) { return env_.trainingStep(member); });
  if (ahead) algorithm_.realign(env_.context(), *ahead);
}

bool PeerLife::start() {
  GOSSAMER_ENFORCE(phase_ == Phase::waiting, "a peer's life starts once");
  plan_ = env_.awaitStart();
  if (plan_.cannotJoin || plan_.clusterDone) {
    phase_ = Phase::notStarted;
    return false;
  }
  roster_.epoch = env_.epoch();
  roster_.members = env_.members();
  env_.startedWith(roster_.members);
  takeShard();
  counters_.totalSteps = plan_.totalSteps > 0
                             ? plan_.totalSteps
                             : env_.totalSteps(std::max(roster_.shardCount, config_.minPeers));
  counters_.runSteps = plan_.runSteps > 0 ? plan_.runSteps : counters_.totalSteps.load();
  buildGraph();
  known_.insert(roster_.members.begin(), roster_.members.end());
  // The model and step to start from: its checkpoint (going on from the cluster's step when that
  // is later, the algorithm told that the others went on without it), a live peer's (joining
  // late), or the initial model.
  if (const train::Checkpoint* saved = env_.resumeFrom()) {
    counters_.step = runtime::PeerCheckpoints::restore(*saved, *learner_, algorithm_);
    if (plan_.late) {
      counters_.step = std::max(counters_.step.load(), plan_.step);
      algorithm_.resumedLate(env_.context());
    }
    env_.resumed(counters_.step);
  } else if (plan_.late) {
    algorithm_.join(env_.context());
  } else if (config_.initialParams) {
    const std::vector<float> initial =
        config_.initialParams(roster_.shardRank, learner_->params().size());
    GOSSAMER_ENFORCE_EQ(initial.size(), learner_->params().size(),
                        "initialParams returned the wrong size");
    compute_.upload(learner_->params(), std::span<const float>(initial));
  }
  startStep_ = counters_.step;
  algorithm_.setup(env_.context());
  phase_ = Phase::training;
  return true;
}

void PeerLife::realignIfBehind() {
  const std::uint64_t expired = env_.expiredWaits();
  if (expired == expiredWaits_) return;
  expiredWaits_ = expired;
  std::vector<PeerId> others = roster_.members;
  std::erase(others, self_);
  // One round ahead is the ordinary skew of a lockstep round.
  const std::optional<PeerId> ahead = furthestAbove(
      others, counters_.step + 1, [this](PeerId member) { return env_.heardStep(member); });
  if (ahead) algorithm_.realign(env_.context(), *ahead);
}

std::optional<double> PeerLife::step() {
  GOSSAMER_ENFORCE(phase_ == Phase::training, "a step of a life that is {}", name(phase_));
  adoptView(false);
  if (algorithm_.lockstep()) realignIfBehind();
  if (counters_.step >= counters_.totalSteps) return std::nullopt;
  if (env_.timeVaryingGraph()) buildGraph();
  learner_->optimizer().setLearningRate(learningRate());
  const double loss = algorithm_.step(env_.context());
  ++counters_.step;
  return loss;
}

float PeerLife::learningRate() const {
  std::uint64_t step = counters_.step, total = counters_.totalSteps;
  const std::uint64_t warmup = config_.schedule.warmupSteps;
  // Warm-up is each peer's own; after it, a run that ends at a budget the cluster shares is where
  // an even run of runSteps steps would be at the same share.
  if (step >= warmup)
    if (const std::optional<double> progress = algorithm_.runProgress()) {
      total = counters_.runSteps;
      const auto at = static_cast<std::uint64_t>(
          std::llround(std::clamp(*progress, 0.0, 1.0) * static_cast<double>(total)));
      step = std::max(at, warmup);
    }
  return train::scheduledRate(config_.optimizer.lr, config_.schedule, step, total);
}

void PeerLife::afterStep() {
  const std::uint64_t step = counters_.step;
  if (const std::optional<std::uint64_t> point = config_.evalPoints.pointAfter(step))
    env_.atEvalPoint(step, *point);
  if (env_.checkpointDue(step))
    env_.keepCheckpoint(
        runtime::PeerCheckpoints::capture(*learner_, algorithm_, step, counters_.totalSteps));
}

void PeerLife::leave() {
  GOSSAMER_ENFORCE(phase_ == Phase::training, "a life that is {} leaves", name(phase_));
  algorithm_.leave(env_.context());
  env_.announce(Barrier::finished);
  phase_ = Phase::left;  // nobody waits for it from here
}

void PeerLife::finish() {
  GOSSAMER_ENFORCE(phase_ == Phase::training, "a life that is {} finishes", name(phase_));
  env_.announce(Barrier::finished);
  env_.awaitOthers(Barrier::finished);
  roster_.finishing = true;
  phase_ = Phase::finishing;
  // The barrier may have ended because a member left the view (a crash): finish() works with
  // the members as they are now, like a step would (setup() first when they changed; a new epoch
  // with the same members changes nothing).
  if (env_.members() != roster_.members) adoptView(true);
  algorithm_.finish(env_.context());
}

void PeerLife::release() {
  GOSSAMER_ENFORCE(phase_ == Phase::finishing, "a life that is {} releases", name(phase_));
  env_.announce(Barrier::released);
  phase_ = Phase::released;
  env_.awaitOthers(Barrier::released);
}

}  // namespace gossamer::engine::life
