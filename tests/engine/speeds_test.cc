// Uneven peers: each peer of a cluster with peer-step-times steps at its own pace, measures its
// own speed and shares it, and every algorithm reads its neighbours' (PeerContext::speedOf), in
// the runtime (control::Speed messages) and in the simulator.
#include "engine/runtime/speeds.h"

#include <algorithm>
#include <chrono>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/algorithm.h"
#include "engine/runtime/cluster.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine {
namespace {

using namespace std::chrono_literals;

TEST_CASE("speeds: a window's speed is its compute per step and its samples per second") {
  const runtime::LoopReading before{
      .step = 10, .samples = 320, .computeSeconds = 3.0, .loopSeconds = 5.0};
  const runtime::LoopReading after{
      .step = 20, .samples = 640, .computeSeconds = 6.0, .loopSeconds = 9.0};
  const std::optional<PeerSpeed> speed = runtime::speedBetween(before, after);
  REQUIRE(speed);
  CHECK(speed->stepSeconds == doctest::Approx(0.3));      // 3 s of compute over 10 steps
  CHECK(speed->samplesPerSecond == doctest::Approx(80));  // 320 samples in 4 s
  CHECK(speed->step == 20);
  // No step in the window: nothing to report (the last report stands).
  CHECK_FALSE(runtime::speedBetween(after, after));
  runtime::SpeedBoard board;
  CHECK_FALSE(board.of(3));
  board.record(3, *speed);
  REQUIRE(board.of(3));
  CHECK(board.of(3)->step == 20);
}

// Local steps only; at its last step, records what it reads of the speeds: its own compute per
// step, and the slowest compute per step among the members that reported.
class Speedometer final : public Algorithm {
 public:
  std::string name() const override { return "speedometer"; }
  void setup(PeerContext&) override {}
  double step(PeerContext& ctx) override {
    const double loss = ctx.computeGradients();
    ctx.applyOptimizer();
    if (ctx.step() + 1 == ctx.totalSteps()) {
      double slowest = 0, reports = 0;
      for (PeerId member : ctx.members()) {
        if (const std::optional<PeerSpeed> speed = ctx.speedOf(member)) {
          slowest = std::max(slowest, speed->stepSeconds);
          reports += 1;
          if (member == ctx.self()) ctx.metrics().set("speed.own", speed->stepSeconds);
        }
      }
      ctx.metrics().set("speed.slowest", slowest);
      ctx.metrics().set("speed.reports", reports);
    }
    return loss;
  }
};

Registry speedometerRegistry() {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("speedometer", "test",
                          AlgorithmSpec{"test", "ring", {}, [](const OptionValues&) {
                                          return std::unique_ptr<Algorithm>(new Speedometer());
                                        }});
  return registry;
}

TEST_CASE("speeds: peers of peer-step-times step at their own pace and read each other's speed") {
  test::Watchdog watchdog(120s);
  const Registry registry = speedometerRegistry();
  auto config = test::algorithmCluster("speedometer", 3, 200);
  config.peer.training.peerStepTimes = {10ms, 10ms, 30ms};
  const runtime::ClusterResult result =
      runtime::runLocalCluster(config, registry, test::smallData());
  REQUIRE(result.peers.size() == 3);
  // The third peer steps at a third of the others' pace (200 x 30 ms against 200 x 10 ms).
  CHECK(result.peers[2].wallSeconds >= 6.0);
  CHECK(result.peers[0].wallSeconds < 0.75 * result.peers[2].wallSeconds);  // 1/3 unloaded
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("peer " << i + 1);
    const auto& metrics = result.peers[i].metrics;
    REQUIRE(metrics.count("speed.own") == 1);
    const double own = metrics.at("speed.own");
    CHECK(own >= (i == 2 ? 0.030 : 0.010));
    CHECK(own < (i == 2 ? 0.030 : 0.010) + 0.02);
    // Everyone heard the slow peer (its first report comes a second into training, before the
    // fast peers' 2 s are over).
    CHECK(metrics.at("speed.slowest") >= 0.030);
    CHECK(metrics.at("speed.reports") == 3);
  }
}

TEST_CASE("speeds: the simulator gives each peer its step time and the others read it") {
  const Registry registry = speedometerRegistry();
  sim::SimConfig c = sim::testing::baseConfig(2, "speedometer", 40);
  c.training.peerStepTimes = {100ms, 400ms};
  const sim::SimResult result = sim::simulate(c, registry, sim::testing::smallData(registry));
  REQUIRE(result.violations.empty());
  REQUIRE(result.peers.size() == 2);
  CHECK(result.peers[0].trainSeconds == doctest::Approx(4.0).epsilon(0.05));
  CHECK(result.peers[1].trainSeconds == doctest::Approx(16.0).epsilon(0.05));
  CHECK(result.peers[0].metrics.at("speed.own") == doctest::Approx(0.1).epsilon(0.01));
  CHECK(result.peers[1].metrics.at("speed.own") == doctest::Approx(0.4).epsilon(0.01));
  // The fast peer's last step (at 4 s) reads the slow one's report of its first seconds.
  CHECK(result.peers[0].metrics.at("speed.slowest") == doctest::Approx(0.4).epsilon(0.01));
}

}  // namespace
}  // namespace gossamer::engine
