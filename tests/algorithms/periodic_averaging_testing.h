// Checks shared by the periodic model-averaging algorithms (algorithms/periodic_averaging.h:
// sparknet, local-sgd), whose tests call them with the algorithm's name and options.
#pragma once

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::test {

// With learning rate 0 and distinct initial models, one round (tau local steps, the run's whole
// length) leaves every peer at the average of the initial models: bit-identical across peers
// and within float rounding of the exact average (the quantity checked: the models themselves).
inline void checkAverageAfterOneRound(const std::string& algorithm, std::size_t peers,
                                      engine::OptionValues options) {
  const std::uint64_t tau = std::stoull(options.at("tau"));
  auto config = algorithmCluster(algorithm, peers, tau, 0.0, std::move(options));
  config.peer.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
  config.peer.training.initialParams = distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, registry(), smallData());
  const std::vector<float> oracle = averageOfDistinct(peers, result.finals[0].params.size());
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    CHECK(result.finals[i].params == result.finals[0].params);
    // Inputs up to 5 in magnitude: a float sum of 4 of them is within a few ulps of 5.
    CHECK(maxAbsDiff(result.finals[i].params, oracle) < 2e-6);
    CHECK(result.peers[i].metrics.at(algorithm + ".rounds") == 1);
  }
}

// The relative distance of the peers' average model to the optimum of the strongly convex
// problem (convexOptimum) after `steps` steps of SGD with `lr`, batch 64, 4 peers; every peer's
// own distance is checked against 2 x `tolerance`, the average's against `tolerance`.
inline void checkConvexOptimum(const std::string& algorithm, engine::OptionValues options,
                               std::uint64_t steps, double lr, double tolerance) {
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = convexOptimum(weightDecay);
  auto config = algorithmCluster(algorithm, 4, steps, lr, std::move(options));
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.batch = 64;
  const auto result = engine::runtime::runLocalCluster(config, registry(), smallData());
  const double error = relativeError(meanOf(result.finals), optimum);
  INFO("relative distance of the average model to the optimum: " << error);
  CHECK(error < tolerance);
  for (const auto& s : result.finals) CHECK(relativeError(s.params, optimum) < 2 * tolerance);
}

// Four peers learn the synthetic task in 200 steps; the run ends on an average (finish() rounds
// when 200 is not a multiple of tau), so the peers are identical.
inline void checkLearns(const std::string& algorithm, engine::OptionValues options) {
  auto config = algorithmCluster(algorithm, 4, 200, 0.1, std::move(options));
  const auto result = engine::runtime::runLocalCluster(config, registry(), smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.9);
  CHECK(result.consensus.distance == 0);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 200);
    CHECK(p.bytesSent > 0);
    CHECK(p.metrics.count(algorithm + ".missing") == 0);
  }
}

// Peer `killed` of 4 dies after 30 of 160 steps (comm timeout 1 s): the others finish every step,
// averaging rounds resume over the survivors, and they end on one common average. Returns the
// result for the algorithm's own checks.
inline engine::runtime::ClusterResult checkSurvivesKill(const std::string& algorithm,
                                                        engine::OptionValues options,
                                                        std::size_t killed) {
  auto config = algorithmCluster(algorithm, 4, 160, 0.1, std::move(options));
  config.peer.training.commTimeout = std::chrono::seconds(1);
  config.peer.training.minStepTime = std::chrono::milliseconds(5);  // the kill comes mid-run
  killPeerAt(config, killed, 30);
  auto result = engine::runtime::runLocalCluster(config, registry(), smallData());
  CHECK(result.peers[killed].steps < 160);
  const std::size_t first = killed == 0 ? 1 : 0;
  for (std::size_t i = 0; i < 4; ++i) {
    if (i == killed) continue;
    CAPTURE(i);
    CHECK(result.peers[i].steps == 160);
    CHECK(result.peers[i].metrics.at(algorithm + ".rounds") >= 20);
    CHECK(result.finals[i].params == result.finals[first].params);
  }
  return result;
}

}  // namespace gossamer::test
