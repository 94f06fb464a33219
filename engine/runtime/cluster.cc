#include "engine/runtime/cluster.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/runtime/network.h"
#include "engine/train/progress.h"
#include "net/shaped/shaped_transport.h"

namespace gossamer::engine::runtime {
namespace {

using Seconds = std::chrono::duration<double>;

EvalPoint measure(const std::vector<std::unique_ptr<Peer>>& peers, std::size_t batch,
                  Clock::time_point start) {
  EvalPoint point;
  point.wallSeconds = Seconds(Clock::now() - start).count();
  point.minStep = UINT64_MAX;
  double bytes = 0, wait = 0, compute = 0;
  for (const auto& peer : peers) {
    const PeerStatus s = peer->status();
    point.minStep = std::min(point.minStep, s.step);
    point.maxStep = std::max(point.maxStep, s.step);
    point.meanStep += static_cast<double>(s.step) / static_cast<double>(peers.size());
    bytes += static_cast<double>(s.bytesSent);
    const StepFigures& f = s.lastStep;
    if (f.trainSeconds > 0) {
      wait += f.commWaitSeconds / f.trainSeconds;
      compute += f.computeSeconds / f.trainSeconds;
    }
  }
  const auto n = static_cast<double>(peers.size());
  point.samples = static_cast<std::int64_t>(point.meanStep * static_cast<double>(batch) * n);
  point.bytesSentPerPeer = bytes / n;
  point.commWaitFraction = wait / n;
  point.utilization = compute / n;
  return point;
}

}  // namespace

// Listen endpoint -> profile index of the cluster's peers, for the shaped transport.
struct LocalPeerConfigs::EndpointIndex {
  mutable std::mutex mutex;
  std::map<net::Endpoint, std::size_t> index;
};

// Peer id -> its identity key, made on first use.
struct LocalPeerConfigs::Identities {
  std::mutex mutex;
  std::map<PeerId, std::shared_ptr<const net::wire::Identity>> keys;
};

LocalPeerConfigs::LocalPeerConfigs(PeerConfig base, const Registry& registry)
    : base_(std::move(base)),
      index_(std::make_shared<EndpointIndex>()),
      identities_(std::make_shared<Identities>()) {
  if (base_.network.secret.empty()) {
    // The peers share a process: a fresh random secret is as good as any.
    std::random_device random;
    for (int i = 0; i < 32; ++i) base_.network.secret.push_back(static_cast<std::byte>(random()));
  }
  // One maker for every peer: they share what the transport shares (inproc: one hub).
  prepareTransport(base_.network, registry);
  base_.network.indexOf = [index = index_](const net::Endpoint& e) -> std::optional<std::size_t> {
    std::lock_guard lock(index->mutex);
    const auto it = index->index.find(e);
    if (it == index->index.end()) return std::nullopt;
    return it->second;
  };
}

PeerConfig LocalPeerConfigs::make(std::size_t index, std::optional<net::Endpoint> seed) const {
  PeerConfig c = base_;
  c.network.peerId = index + 1;
  c.network.profileIndex = index;
  c.training.minStepTime = stepTimeOf(c.training, index);
  const bool keptBesideCheckpoints =
      !c.training.checkpointDir.empty() || !c.training.checkpointFile.empty();
  if (!c.network.identity && !keptBesideCheckpoints) {
    std::lock_guard lock(identities_->mutex);
    auto& key = identities_->keys[c.network.peerId];
    if (!key) key = net::wire::Identity::generate();
    c.network.identity = key;
  }
  c.network.seeds.clear();
  if (seed) c.network.seeds = {*seed};
  return c;
}

void LocalPeerConfigs::listening(const net::Endpoint& endpoint, std::size_t index) {
  std::lock_guard lock(index_->mutex);
  index_->index[endpoint] = index;
}

ClusterResult runLocalCluster(const ClusterConfig& config, const Registry& registry,
                              std::shared_ptr<const DatasetPair> data) {
  GOSSAMER_ENFORCE(config.peers >= 1, "a local cluster needs at least one peer");
  PeerConfig base = config.peer;
  base.training.minPeers = config.peers;
  base.training.finalConsensus = false;  // the cluster evaluates once, below
  base.training.finalLocalEval = false;
  base.training.progress = false;
  auto board = std::make_shared<EvalPointBoard>();
  if (config.evalEvery > 0) {
    base.training.evalPoints = {.everySteps = static_cast<std::uint64_t>(config.evalEvery)};
    base.training.onEvalPoint = [board](PointSample sample) { board->add(std::move(sample)); };
  }
  // The latest merged model of time-boxed rounds, evaluated in place of the peers' mean.
  struct LatestMerged {
    std::mutex mutex;  // leaf
    std::uint64_t round = 0;
    std::vector<float> model;
  };
  auto merged = std::make_shared<LatestMerged>();
  base.training.onRoundMerged = [merged](std::uint64_t round, std::vector<float> model) {
    const std::lock_guard lock(merged->mutex);
    if (!merged->model.empty() && merged->round >= round) return;  // a later member's copy
    merged->round = round;
    merged->model = std::move(model);
  };
  LocalPeerConfigs configs(base, registry);

  std::vector<std::unique_ptr<Peer>> peers;
  for (std::size_t i = 0; i < config.peers; ++i) {
    const std::optional<net::Endpoint> seed =
        i == 0 ? std::nullopt : std::optional(peers.front()->endpoint());
    peers.push_back(std::make_unique<Peer>(configs.make(i, seed), registry, data));
    configs.listening(peers.back()->endpoint(), i);
  }
  if (config.onStart) {
    std::vector<Peer*> raw;
    for (auto& p : peers) raw.push_back(p.get());
    config.onStart(raw);
  }

  ClusterResult result;
  result.peers.resize(config.peers);
  std::vector<std::exception_ptr> errors(config.peers);  // read after the threads are joined
  std::atomic<bool> anyError{false};                     // what the monitor reads before
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < config.peers; ++i) {
    threads.emplace_back([&, i] {
      try {
        result.peers[i] = peers[i]->run();
      } catch (...) {
        errors[i] = std::current_exception();
        anyError = true;
      }
    });
  }

  ConsensusEvaluator evaluator(
      registry, base.training.model,
      [&] {
        ModelConfig m = base.training.modelConfig;
        m.inputs = data->train.features;
        m.classes = data->train.classes;
        return m;
      }(),
      data->test);
  auto snapshots = [&](Clock::duration timeout) {
    std::vector<Snapshot> out;
    for (const auto& peer : peers) {
      if (std::optional<Snapshot> s = peer->snapshot(timeout)) out.push_back(std::move(*s));
    }
    return out;
  };

  // The evaluation points every peer has passed, or will not pass: its loop ended (it finished,
  // having passed every point, or it was killed, left or failed), unless the whole cluster was
  // stopped, which leaves the points after the stop incomplete (a consensus of some of the peers
  // would not be the cluster's). A peer whose loop runs owes every point it has not sampled: it
  // samples each as it passes it (its step count is not enough: it moves before the sample).
  std::vector<PeerId> ids;
  for (const auto& peer : peers) ids.push_back(peer->id());
  bool stopping = false;
  const auto owes = [&](PeerId id, std::uint64_t) {
    const auto it = std::find(ids.begin(), ids.end(), id);
    return stopping || !peers[static_cast<std::size_t>(it - ids.begin())]->status().loopEnded;
  };
  double lastAccuracy = -1;
  std::vector<AveragedPoint> deferred;  // evaluateAfterRun: the points, averaged, in order
  const auto evaluate = [&](AveragedPoint averaged) {
    EvalPoint point = evaluateAveraged(std::move(averaged), evaluator, config.evalSamples);
    lastAccuracy = point.consensus.accuracy;
    result.curve.push_back(point);
    if (config.onEval) config.onEval(point);
  };
  const auto evaluatePoints = [&] {
    for (std::vector<PointSample>& samples : board->takeComplete(ids, owes)) {
      AveragedPoint averaged = averagePoint(std::move(samples));
      if (config.evaluateAfterRun) {
        deferred.push_back(std::move(averaged));
      } else {
        evaluate(std::move(averaged));
      }
    }
  };

  // Monitor: progress and the evaluations, until every peer's loop is over.
  Clock::time_point start{};
  bool started = false;
  std::unique_ptr<train::Progress> progress;
  Clock::time_point lastEvalAt{};
  for (;;) {
    const bool allDone = std::all_of(peers.begin(), peers.end(), [](const auto& p) {
      const PeerStatus s = p->status();
      return s.finished;
    });
    if (allDone || anyError) break;
    if (config.stopRequested && config.stopRequested()) {
      stopping = true;
      for (const auto& p : peers) p->requestStop();
    }
    if (!started) {
      if (std::any_of(peers.begin(), peers.end(),
                      [](const auto& p) { return p->status().training; })) {
        started = true;
        start = Clock::now();
        lastEvalAt = start;
        progress = std::make_unique<train::Progress>(
            static_cast<std::int64_t>(peers[0]->status().totalSteps), config.progress);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
    }
    evaluatePoints();
    EvalPoint point = measure(peers, base.training.batch, start);
    const bool timeDue =
        config.evalInterval.count() > 0 && Clock::now() - lastEvalAt >= config.evalInterval;
    if (timeDue && point.minStep < peers[0]->status().totalSteps) {
      lastEvalAt = Clock::now();
      const std::vector<Snapshot> taken = snapshots(base.training.commTimeout);
      point = measure(peers, base.training.batch, start);
      point.consensus = evaluator.evaluate(taken, config.evalSamples, true);
      std::vector<float> latest;
      {
        const std::lock_guard lock(merged->mutex);
        latest = merged->model;
      }
      if (!latest.empty()) {  // at round boundaries: the merged model, the peers' own beside it
        const EvalResult model = evaluator.evaluateModel(latest, config.evalSamples);
        point.consensus.accuracy = model.accuracy();
        point.consensus.loss = model.meanLoss();
      }
      lastAccuracy = point.consensus.accuracy;
      result.curve.push_back(point);
      if (config.onEval) config.onEval(point);
    }
    double loss = 0;
    for (const auto& p : peers) loss += p->status().loss / static_cast<double>(peers.size());
    progress->update(
        static_cast<std::int64_t>(point.minStep),
        fmt::format("loss {:.3f}{} {:.1f} MB/peer wait {:.0f}%", loss,
                    lastAccuracy >= 0 ? fmt::format(" consensus {:.1f}%", 100 * lastAccuracy) : "",
                    point.bytesSentPerPeer / 1e6, 100 * point.commWaitFraction));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (progress) progress->finish();

  // Every peer's final model is published before its barrier; evaluate them before anyone is gone
  // (a peer that failed publishes none: the run is over with its error, nothing to wait for).
  std::vector<Snapshot> finals =
      anyError ? std::vector<Snapshot>{} : snapshots(base.training.finishTimeout);
  evaluatePoints();  // the points passed last (every loop is over: none is owed any more)
  for (AveragedPoint& averaged : deferred) evaluate(std::move(averaged));
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (errors[i]) {
      try {
        std::rethrow_exception(errors[i]);
      } catch (const std::exception& e) {
        GOSSAMER_THROW("peer {} of the local cluster failed: {}", i + 1, e.what());
      }
    }
  }
  for (const PeerResult& r : result.peers)
    result.wallSeconds = std::max(result.wallSeconds, r.wallSeconds);
  result.consensus = evaluator.evaluate(finals, 0, true);
  // The whole run: the loops and the finish, each peer's fractions over its own time.
  EvalPoint last = measure(peers, base.training.batch, start);
  last.wallSeconds = result.wallSeconds;
  last.consensus = result.consensus;
  last.commWaitFraction = last.utilization = 0;
  for (const PeerResult& r : result.peers) {
    last.commWaitFraction += r.commWaitFraction / static_cast<double>(result.peers.size());
    last.utilization += r.utilization / static_cast<double>(result.peers.size());
  }
  result.curve.push_back(last);
  if (config.onEval) config.onEval(last);
  result.finals = std::move(finals);
  return result;
}

}  // namespace gossamer::engine::runtime
