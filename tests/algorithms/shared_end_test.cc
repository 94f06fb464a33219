// The shared end of the asynchronous algorithms (algorithms/shared_end.h, `end = budget`): on
// four simulated peers of 100, 100, 200 and 400 ms a step, each peer trains until about the same
// moment, in proportion to its speed, and the cluster takes about an even run's steps in all.
#include "algorithms/shared_end.h"

#include <algorithm>
#include <string>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// 60 steps each by steps: a budget of 240 cluster steps. The cluster trains 10 + 10 + 5 + 2.5 =
// 27.5 steps a second, so the budget lasts about 8.7 s.
engine::sim::SimResult unevenRun(const std::string& algorithm, const std::string& end) {
  const engine::Registry& registry = test::registry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, algorithm, 60);
  c.training.peerStepTimes = {100ms, 100ms, 200ms, 400ms};
  c.training.algorithmOptions = {{"end", end}};
  engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  return result;
}

TEST_CASE("shared end: the asynchronous algorithms share an even run's steps by speed") {
  for (const std::string algorithm : {"gosgd", "ad-psgd", "easgd", "eamsgd", "tree-easgd"}) {
    CAPTURE(algorithm);
    const engine::sim::SimResult result = unevenRun(algorithm, "budget");
    REQUIRE(result.peers.size() == 4);
    std::uint64_t steps = 0;
    double first = 1e9, last = 0;
    for (const auto& peer : result.peers) {
      CAPTURE(peer.id);
      CHECK(peer.error.empty());
      steps += peer.steps;
      first = std::min(first, peer.trainSeconds);
      last = std::max(last, peer.trainSeconds);
    }
    // The budget, and at most the second of the cluster's steps (27.5) a speed report may be
    // old: the others' reported steps lag, so the estimate ends late, never early (measured:
    // 257-260).
    CHECK(steps >= 240);
    CHECK(steps <= 240 + 28);
    // Every peer trains until about the same moment: within a report period (measured: 0.2-0.4 s).
    CHECK(last - first <= 1.0);
    // In proportion to speed, 4 : 4 : 2 : 1 (measured: 93 : 93 : 48 : 23).
    CHECK(result.peers[0].steps >= 3.5 * static_cast<double>(result.peers[3].steps));
    CHECK(result.peers[2].steps >= 1.8 * static_cast<double>(result.peers[3].steps));
  }
  // By steps (the default), every peer the run's steps, whatever its speed.
  const engine::sim::SimResult stepped = unevenRun("gosgd", "steps");
  for (const auto& peer : stepped.peers) CHECK(peer.steps == 60);
  CHECK_THROWS_WITH(unevenRun("gosgd", "soon"),
                    doctest::Contains("gosgd.end must be steps (every peer the run's steps) or "
                                      "budget"));
}

TEST_CASE("shared end: gosgd on real peers of uneven speed shares the steps by speed") {
  test::Watchdog watchdog(120s);
  // 100 steps each by steps: 300 cluster steps at 50 + 50 + 16.7 steps a second, about 2.6 s;
  // the members report their speeds once a second.
  auto config = test::algorithmCluster("gosgd", 3, 100, 0.05, {{"end", "budget"}});
  config.peer.training.peerStepTimes = {20ms, 20ms, 60ms};
  const engine::runtime::ClusterResult result =
      engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.peers.size() == 3);
  std::uint64_t steps = 0;
  for (const auto& peer : result.peers) steps += peer.steps;
  CHECK(steps >= 300);
  CHECK(steps <= 300 + 2 * 117);  // two seconds of the cluster's steps, on a loaded machine
  CHECK(2 * result.peers[0].steps > 3 * result.peers[2].steps);  // 3x as fast: measured 2.5-2.9x
  CHECK(2 * result.peers[1].steps > 3 * result.peers[2].steps);
}

}  // namespace
}  // namespace gossamer::algorithms
