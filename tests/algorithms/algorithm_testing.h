// What the algorithm tests share: a small synthetic task, an in-process cluster configured for
// it, and rank-dependent initial models whose exact average is the consensus oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/data/synthetic.h"
#include "engine/models/softmax_regression.h"
#include "engine/runtime/cluster.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::test {

inline const engine::Registry& registry() {
  static const engine::Registry r = algorithms::makeRegistry();
  return r;
}

// One in-process network for peers made apart from runLocalCluster's (late joiners): the peers
// given this maker reach each other.
inline engine::TransportMaker sharedInprocNetwork() {
  return registry().transports.get("inproc").prepare({});
}

// 4000 training and 1000 test samples of 16 features in 4 well separated Gaussian classes.
inline std::shared_ptr<const engine::DatasetPair> smallData() {
  static const auto data = [] {
    engine::data::SyntheticOptions options{.count = 4000,
                                           .features = 16,
                                           .classes = 4,
                                           .separation = 3.0,
                                           .noise = 1.0,
                                           .distributionSeed = 11,
                                           .sampleSeed = 12};
    engine::DatasetPair pair;
    pair.train = engine::data::makeSynthetic(options);
    options.count = 1000;
    options.sampleSeed = 13;
    pair.test = engine::data::makeSynthetic(options);
    return std::make_shared<const engine::DatasetPair>(std::move(pair));
  }();
  return data;
}

// `peers` in-process peers running `algorithm` on smallData(): softmax regression (convex), plain
// SGD with `lr`, batch 32, `steps` steps each, no progress output.
inline engine::runtime::ClusterConfig algorithmCluster(const std::string& algorithm,
                                                       std::size_t peers, std::uint64_t steps,
                                                       double lr = 0.05,
                                                       engine::OptionValues options = {}) {
  engine::runtime::ClusterConfig c;
  c.peers = peers;
  c.progress = false;
  c.peer.network.transport = "inproc";
  engine::runtime::TrainingConfig& t = c.peer.training;
  t.model = "softmax";
  t.algorithm = algorithm;
  t.algorithmOptions = std::move(options);
  t.optimizer.kind = engine::train::OptimizerKind::kSgd;
  t.optimizer.lr = static_cast<float>(lr);
  t.batch = 32;
  t.maxSteps = steps;
  t.commTimeout = std::chrono::seconds(10);
  t.finishTimeout = std::chrono::seconds(20);
  return c;
}

// A different, deterministic model per rank.
inline std::vector<float> distinctParams(std::size_t rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(
        std::sin(0.37 * static_cast<double>(i) + 1.3 * static_cast<double>(rank)) *
        (1.0 + static_cast<double>(rank)));
  return v;
}

// Per coordinate, the smallest and the largest value of distinctParams over ranks 0..peers-1.
struct Hull {
  std::vector<float> low, high;
};
inline Hull hullOfDistinct(std::size_t peers, std::size_t count) {
  Hull hull{std::vector<float>(count, INFINITY), std::vector<float>(count, -INFINITY)};
  for (std::size_t r = 0; r < peers; ++r) {
    const std::vector<float> w = distinctParams(r, count);
    for (std::size_t k = 0; k < count; ++k) {
      hull.low[k] = std::min(hull.low[k], w[k]);
      hull.high[k] = std::max(hull.high[k], w[k]);
    }
  }
  return hull;
}

// The exact average of distinctParams over ranks 0..peers-1.
inline std::vector<float> averageOfDistinct(std::size_t peers, std::size_t count) {
  std::vector<double> sum(count, 0.0);
  for (std::size_t r = 0; r < peers; ++r) {
    const std::vector<float> v = distinctParams(r, count);
    for (std::size_t i = 0; i < count; ++i) sum[i] += v[i];
  }
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(sum[i] / static_cast<double>(peers));
  return out;
}

inline double maxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return worst;
}

// The convex oracle: the unique minimiser of mean softmax cross-entropy on smallData()'s training
// set plus (weightDecay / 2) ||w||^2 (softmax regression; strongly convex for weightDecay > 0),
// by full-batch gradient descent run to a gradient norm below 1e-7, or until a step leaves w
// unchanged in float32 (its fixed point: further steps would change nothing), made once per
// weight decay and process (convexOptimum below).
inline std::vector<float> computeConvexOptimum(float weightDecay) {
  const engine::DatasetPair& data = *smallData();
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  const std::size_t n = data.train.count();
  engine::models::SoftmaxRegression model(*compute, data.train.features, data.train.classes, n);
  std::vector<float> w(model.parameterCount(), 0.0f), g(w.size());
  const engine::DeviceBatch batch{data.train.inputs, data.train.labels, n};
  for (int iteration = 0; iteration < 20000; ++iteration) {
    model.forwardBackward(batch, w, g);
    double norm = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      g[i] += weightDecay * w[i];
      norm += static_cast<double>(g[i]) * g[i];
    }
    if (std::sqrt(norm) < 1e-7) break;
    bool moved = false;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const float next = w[i] - 0.5f * g[i];
      moved = moved || next != w[i];
      w[i] = next;
    }
    if (!moved) break;
  }
  return w;
}

// computeConvexOptimum(weightDecay), computed once per process. Thread-safe.
inline const std::vector<float>& convexOptimum(float weightDecay) {
  static std::mutex mutex;
  static std::map<float, std::vector<float>> made;
  std::lock_guard lock(mutex);
  auto it = made.find(weightDecay);
  if (it == made.end()) it = made.emplace(weightDecay, computeConvexOptimum(weightDecay)).first;
  return it->second;
}

// ||a - b|| / ||b||.
inline double relativeError(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Element-wise mean of the peers' final models.
inline std::vector<float> meanOf(const std::vector<engine::runtime::Snapshot>& snapshots) {
  std::vector<double> sum(snapshots.front().params.size(), 0.0);
  for (const auto& s : snapshots)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += s.params[i];
  std::vector<float> out(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i)
    out[i] = static_cast<float>(sum[i] / static_cast<double>(snapshots.size()));
  return out;
}

// Kills peer `index` of the cluster (as kill -9 would) once the slowest peer has made `step`
// steps. The kill comes from the cluster's monitoring thread (onEval, with evalEvery = step),
// while every peer is alive; it replaces config.onStart, onEval and evalEvery.
inline void killPeerAt(engine::runtime::ClusterConfig& config, std::size_t index,
                       std::uint64_t step) {
  auto peers = std::make_shared<std::vector<engine::runtime::Peer*>>();
  auto killed = std::make_shared<bool>(false);
  config.onStart = [peers](std::vector<engine::runtime::Peer*>& all) { *peers = all; };
  config.evalEvery = static_cast<std::int64_t>(step);
  config.evalSamples = 100;
  config.onEval = [peers, killed, index, step](const engine::runtime::EvalPoint& point) {
    if (*killed || point.minStep < step) return;
    *killed = true;
    (*peers)[index]->kill();
  };
}

// The consensus (average model) of the peers of `result` other than `killed`, evaluated on
// smallData()'s test set with the softmax model (algorithmCluster's).
inline engine::runtime::ConsensusResult survivorsConsensus(
    const engine::runtime::ClusterResult& result, std::size_t killed) {
  std::vector<engine::runtime::Snapshot> survivors;
  for (std::size_t i = 0; i < result.finals.size(); ++i)
    if (i != killed) survivors.push_back(result.finals[i]);
  engine::runtime::ConsensusEvaluator evaluator(
      registry(), "softmax", engine::ModelConfig{16, 4, {}, 256}, smallData()->test);
  return evaluator.evaluate(survivors);
}

// Four peers of an asynchronous algorithm learn the synthetic task in 300 steps with `lr` and
// `optimizer` (steps of at least 1 ms, so that the exchanges keep up with them): consensus
// accuracy above 0.9, every peer above 0.85, every step made, something sent. Returns the result
// for the algorithm's own checks.
inline engine::runtime::ClusterResult checkLearnsAsync(
    const std::string& algorithm, engine::OptionValues options = {}, double lr = 0.1,
    engine::train::OptimizerKind optimizer = engine::train::OptimizerKind::kSgd) {
  auto config = algorithmCluster(algorithm, 4, 300, lr, std::move(options));
  config.peer.training.optimizer.kind = optimizer;
  config.peer.training.minStepTime = std::chrono::milliseconds(1);
  auto result = engine::runtime::runLocalCluster(config, registry(), smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.85);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 300);
    CHECK(p.bytesSent > 0);
  }
  return result;
}

}  // namespace gossamer::test
