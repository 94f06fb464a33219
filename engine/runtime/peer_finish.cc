// The end of a peer's run (runtime::Peer, peer_impl.h): the finish with the others, the
// consensus of the final models, and the result.
#include <algorithm>

#include "engine/runtime/peer_impl.h"

namespace gossamer::engine::runtime {

PeerResult Peer::Impl::finish(const LoopFigures& figures) {
  const TrainingConfig& t = config.training;
  if (training.cannotJoin || training.clusterDone) return notStartedResult();
  if (training.stallWatch)
    training.stallWatch->stop();  // the loop is over: the waits from here have their own bounds
  if (training.speeds) training.speeds->stop();
  const std::size_t shards = std::max(training.life->roster().shardCount, t.minPeers);
  const bool leaving = requests.leave && !requests.killed;
  const Clock::time_point finishing = Clock::now();
  const double loopEnd =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  finishWithOthers(leaving);
  const double finishSeconds = std::chrono::duration<double>(Clock::now() - finishing).count();
  if (checkpoints.enabled() && !requests.killed)
    checkpoints.save(*training.learner, *algorithm, status.step, status.totalSteps);
  publishSnapshot(true);
  status.finished = true;

  PeerResult result;
  result.peer = self;
  result.algorithm = algorithm->name();
  result.topology = topology->name();
  result.peers = shards;
  result.parameters = model->parameterCount();
  result.peakBytes = memory.peak();
  result.device = compute->describe();
  result.steps = status.step;
  result.samples = training.learner->samples();
  result.epochs = static_cast<double>(status.step) /
                  static_cast<double>(std::max<std::uint64_t>(training.stepsPerEpoch, 1));
  result.wallSeconds = figures.wallSeconds;
  result.finishSeconds = finishSeconds;
  result.loopEndUnixSeconds = loopEnd;
  result.samplesPerSecond = figures.samplesPerSecond;
  result.trainLoss = figures.trainLoss;
  result.stopped = requests.stop || requests.leave;
  if (training.stallWatch) result.stalled = training.stallWatch->verdict();
  result.commWaitSeconds = status.commWaitSeconds();
  EvalResult test;
  if (t.finalLocalEval && !requests.killed && training.loop->canEvaluate()) {
    test = training.loop->evaluate(0);
    result.testAccuracy = test.accuracy();
    result.testLoss = test.meanLoss();
  }
  if (t.finalConsensus && !requests.killed && !leaving && training.loop->canEvaluate())
    result.consensus = pullConsensus();
  // Everyone may still be pulling final models: leave once every member is done.
  if (!requests.killed && !leaving) training.life->release();
  const net::TrafficCounters traffic = comms->network.traffic(net::Traffic::algorithm);
  result.bytesSent = traffic.bytesSent;
  result.bytesReceived = traffic.bytesReceived;
  const net::TrafficCounters relayed = comms->network.traffic(net::Traffic::relay);
  result.relayBytesSent = relayed.bytesSent;
  result.relayBytesReceived = relayed.bytesReceived;
  // The waits lie within the loop's clock and the finish: the fractions never pass 1.
  const double runSeconds = result.wallSeconds + result.finishSeconds;
  result.commWaitFraction = runSeconds > 0 ? result.commWaitSeconds / runSeconds : 0;
  result.computeSeconds = status.computeSeconds();
  result.utilization = runSeconds > 0 ? result.computeSeconds / runSeconds : 0;
  result.metrics = metrics.values();
  training.loop->logFinal(result.steps, result.wallSeconds, test, result.samplesPerSecond,
                          result.bytesSent, result.commWaitFraction);
  return result;
}

// After the loop: a leaver hands over what must not leave with it; the others wait until every
// member finished (so that everything sent has arrived), then the algorithm's finish().
void Peer::Impl::finishWithOthers(bool leaving) {
  if (requests.killed) return;
  if (leaving) {
    training.life->leave();
    status.released = true;  // nobody waits for it from here
    return;
  }
  training.life->finish();
}

PeerResult Peer::Impl::notStartedResult() {
  PeerResult result;
  result.peer = self;
  result.steps = status.step;
  result.clusterDone = training.clusterDone;
  if (training.clusterDone)  // nothing to do with anyone: leave now, holding nobody
    comms->network.stop(true);
  else  // joined no one by the join deadline: why
    result.joinFailure =
        JoinFailure::of(comms->network.seedFailures(), config.training.joinTimeout);
  return result;
}

ConsensusResult Peer::Impl::pullConsensus() {
  // An evaluation, not training: its wait is not communication time.
  const std::vector<PeerId> everyone = comms->network.members();
  GatherResult got = comms->control.pullModels(everyone, config.training.finishTimeout);
  std::vector<Snapshot> snapshots;
  for (const Incoming& m : got.messages) {
    if (m.payloadCount() != 1 || m.payload(0).size() != training.learner->params().size()) continue;
    const std::span<const float> params = m.payload(0);
    snapshots.push_back(Snapshot{m.from, m.step, std::vector<float>(params.begin(), params.end())});
  }
  if (snapshots.size() < everyone.size())
    peerLogger()->warn("peer {:016x}: {} members sent no final model; the consensus averages {}",
                       self, everyone.size() - snapshots.size(), snapshots.size());
  if (!external) {
    ConsensusEvaluator evaluator(registry, config.training.model, config.training.modelConfig,
                                 data->test);
    return evaluator.evaluate(snapshots);
  }
  // The caller's evaluation reads the Compute's memory.
  kernels::Buffer<float> params = compute->allocate<float>(training.learner->params().size());
  ConsensusEvaluator evaluator([&](std::span<const float> host, std::size_t samples) {
    compute->upload(params.span(), host);
    return external->evaluate(params.span(), samples);
  });
  return evaluator.evaluate(snapshots);
}

}  // namespace gossamer::engine::runtime
