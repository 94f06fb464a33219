// Helpers of the simulated world's tests (tests/engine/sim/world_*_test.cc): the small dataset
// every run trains on, a base configuration of a run, a uniform network profile and the chaos
// configuration whose faults are drawn from a seed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/registry.h"
#include "engine/sim/faults.h"
#include "engine/sim/world.h"
#include "net/shaped/profile.h"

namespace gossamer::engine::sim::testing {

using namespace std::chrono_literals;

inline std::shared_ptr<const DatasetPair> smallData(const Registry& registry) {
  static std::shared_ptr<const DatasetPair> data = std::make_shared<const DatasetPair>(
      registry.datasets.get("synthetic")({.trainSamples = 2000, .testSamples = 500, .seed = 1}));
  return data;
}

inline SimConfig baseConfig(std::size_t peers, const std::string& algorithm, std::uint64_t steps) {
  SimConfig c;
  c.peers = peers;
  c.training.model = "softmax";
  c.training.algorithm = algorithm;
  c.training.optimizer.lr = 0.05f;
  c.training.batch = 16;
  c.training.maxSteps = steps;
  c.training.minStepTime = 300ms;
  c.training.commTimeout = 10s;
  c.finalPeerSamples = 100;
  c.evalSamples = 200;
  return c;
}

inline net::shaped::NetworkProfile uniform(std::chrono::microseconds latency,
                                           double bitsPerSecond = 0) {
  return net::shaped::NetworkProfile::uniform(
      "test", {.latency = latency, .bandwidthBitsPerSecond = bitsPerSecond});
}

inline SimConfig chaosConfig(std::uint64_t seed, const std::string& algorithm) {
  SimConfig c = baseConfig(16, algorithm, 40);
  c.training.seed = seed;
  c.network = net::shaped::NetworkProfile::geo();
  c.evalSeconds = 2;
  c.faults = drawFaults(seed, 4, 12);
  return c;
}

}  // namespace gossamer::engine::sim::testing
