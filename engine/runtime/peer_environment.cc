// runtime::Peer as the environment of its life (engine/life/peer_life.h): the start rule asked
// through the cluster-control protocol, the membership view, the data shards, the topology's
// graphs, the checkpoint file, the cluster's evaluation points and the end-of-run barriers.
// Compute thread.
#include <cmath>

#include "engine/base/enforce.h"
#include "engine/runtime/peer_impl.h"

namespace gossamer::engine::runtime {
namespace {

std::string seedList(const NetworkConfig& n) {
  std::string seeds;
  for (const auto& seed : n.seeds) {
    if (!seeds.empty()) seeds += ',';
    seeds += seed.str();
  }
  return seeds.empty() ? "none (this peer started the cluster)" : seeds;
}

ClusterControl::Barrier controlBarrier(life::Barrier barrier) {
  return barrier == life::Barrier::finished ? ClusterControl::Barrier::finished
                                            : ClusterControl::Barrier::released;
}

}  // namespace

StartPlan Peer::Impl::awaitStart() {
  const TrainingConfig& t = config.training;
  return comms->control.awaitStart(t.minPeers, resumeCheckpoint.has_value(), t.startTimeout,
                                   joinDeadline, seedList(config.network));
}

void Peer::Impl::startedWith(const std::vector<PeerId>& members) {
  comms->control.startedWith(members);
}

std::vector<PeerId> Peer::Impl::members() { return comms->network.members(); }

std::uint64_t Peer::Impl::epoch() { return comms->network.epoch(); }

PeerContext& Peer::Impl::context() {
  if (!training.context) {
    GOSSAMER_ENFORCE(training.learner != nullptr, "the context exists once the learner does");
    training.context = std::make_unique<ComputeContext>(
        ComputeParts{self, config.training, *compute, *training.learner, training.life->roster(),
                     comms->network, comms->messenger, comms->inbox, comms->control, comms->staging,
                     status, metrics, [life = training.life.get()](std::span<const PeerId> order) {
                       life->placeMembers(order);
                     }});
  }
  return *training.context;
}

std::vector<std::size_t> Peer::Impl::shardOf(std::size_t count, std::size_t rank) const {
  const TrainingConfig& t = config.training;
  return data::shardIndices(
      data->train.labels, data->train.classes,
      {.shards = count, .kind = t.split, .dirichletAlpha = t.dirichletAlpha, .seed = t.seed})[rank];
}

train::Learner& Peer::Impl::takeShard(std::size_t count, std::size_t rank) {
  const TrainingConfig& t = config.training;
  if (external) return *training.learner;  // the caller takes its part of its data (Peer::shard)
  if (!training.learner) {
    training.learner = std::make_unique<train::Learner>(*compute, *model, t.optimizer, data->train,
                                                        shardOf(count, rank), t.batch, t.seed);
  } else {
    training.learner->setShard(shardOf(count, rank));
    peerLogger()->debug("peer {:016x}: data rebalanced to shard {} of {}", self, rank, count);
  }
  return *training.learner;
}

std::shared_ptr<const topology::Graph> Peer::Impl::graph(const std::vector<PeerId>& members,
                                                         std::uint64_t step) {
  return std::make_shared<const topology::Graph>(topology->build(members, step));
}

std::optional<std::uint64_t> Peer::Impl::heardStep(PeerId member) {
  return comms->inbox.latestStepFrom(member);
}

std::uint64_t Peer::Impl::expiredWaits() {
  return training.context ? training.context->expiredWaits() : 0;
}

bool Peer::Impl::timeVaryingGraph() const { return topology->timeVarying(); }

std::optional<std::uint64_t> Peer::Impl::trainingStep(PeerId member) {
  const std::optional<control::Status> status =
      comms->control.statusOf(member, std::chrono::seconds(1));
  if (!status || !status->training) return std::nullopt;
  return status->step;
}

std::uint64_t Peer::Impl::totalSteps(std::size_t shards) {
  const TrainingConfig& t = config.training;
  if (t.maxSteps > 0) return t.maxSteps;  // always, for an externally driven peer
  // The same on every peer: passes of the whole cluster over the training set.
  const std::size_t perPass = (data->train.count() + shards * t.batch - 1) / (shards * t.batch);
  return static_cast<std::uint64_t>(std::ceil(t.epochs * static_cast<double>(perPass)));
}

const train::Checkpoint* Peer::Impl::resumeFrom() {
  return resumeCheckpoint ? &*resumeCheckpoint : nullptr;
}

void Peer::Impl::resumed(std::uint64_t step) {
  peerLogger()->info("peer {:016x}: resumed from {} at step {}", self, checkpoints.path(), step);
}

void Peer::Impl::atEvalPoint(std::uint64_t step, std::uint64_t point) {
  const PointSink& sink = config.training.onEvalPoint;
  if (!sink) return;
  // Off the loop's clock: the figures are the loop's as of this step.
  training.loop->offClock([&] {
    PointSample sample{.point = point,
                       .model = {self, step, std::vector<float>(training.learner->params().size())},
                       .figures = status.lastStep(),
                       .samples = training.learner->samples(),
                       .bytesSent = bytesSent()};
    compute->download(std::span<float>(sample.model.params),
                      std::span<const float>(training.learner->params()));
    sink(std::move(sample));
  });
}

bool Peer::Impl::checkpointDue(std::uint64_t step) { return checkpoints.dueAfter(step); }

void Peer::Impl::keepCheckpoint(train::Checkpoint checkpoint) { checkpoints.write(checkpoint); }

void Peer::Impl::announce(life::Barrier barrier) {
  comms->control.announce(controlBarrier(barrier), without(comms->network.members(), self),
                          config.training.commTimeout);
  if (barrier == life::Barrier::released) status.released = true;
}

// Waiting for the others to finish counts as communication (they are behind); waiting for them
// to release this peer is past its run.
bool Peer::Impl::awaitOthers(life::Barrier barrier) {
  const Clock::time_point start = Clock::now();
  const bool done = comms->control.await(controlBarrier(barrier), config.training.finishTimeout);
  if (barrier == life::Barrier::finished) status.addCommWait(Clock::now() - start);
  return done;
}

}  // namespace gossamer::engine::runtime
