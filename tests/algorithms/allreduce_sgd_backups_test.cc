// allreduce-sgd with backup workers (algorithms/allreduce_sgd.h, "Backup workers"): four simulated
// peers, one 4x slower than the others. Without a backup every step waits for the slow peer; with
// one, the three fast peers go at their own pace, the slow one takes the rounds it was too late
// for as they are, and every peer ends with the same model after the same steps.
#include <algorithm>
#include <string>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kSteps = 60;

engine::sim::SimResult slowFourth(const std::string& backups) {
  const engine::Registry& registry = test::registry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, "allreduce-sgd", kSteps);
  c.training.peerStepTimes = {100ms, 100ms, 100ms, 400ms};
  c.training.algorithmOptions = {{"backups", backups}};
  engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  return result;
}

void checkOneModel(const engine::sim::SimResult& result) {
  REQUIRE(result.peers.size() == 4);
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    CHECK(peer.error.empty());
    CHECK(peer.steps == kSteps);
    CHECK(peer.metrics.at("allreduce-sgd.rounds") == kSteps);
    CHECK(peer.metrics.count("allreduce-sgd.fallbacks") == 0);
  }
  REQUIRE(result.finals.size() == 4);
  for (const auto& final : result.finals) CHECK(final.params == result.finals[0].params);
}

TEST_CASE("allreduce-sgd backups: one backup worker frees the fast peers from a 4x slower one") {
  // Without: every step waits for the slow peer's 400 ms.
  const engine::sim::SimResult waiting = slowFourth("0");
  checkOneModel(waiting);
  for (const auto& peer : waiting.peers) CHECK(peer.trainSeconds >= 0.4 * kSteps);

  // With one: the fast peers' 100 ms and the round's latencies set the pace; the slow peer
  // computes a gradient when level with them, then takes the rounds they went on with.
  const engine::sim::SimResult backed = slowFourth("1");
  checkOneModel(backed);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(backed.peers[i].trainSeconds <= 0.5 * waiting.peers[i].trainSeconds);
    CHECK(backed.peers[i].metrics.count("allreduce-sgd.caught_up") == 0);
  }
  // It is too late for most rounds: about 4 of every 5 are taken as they are.
  CHECK(backed.peers[3].metrics.at("allreduce-sgd.caught_up") >= kSteps / 2);
}

TEST_CASE("allreduce-sgd backups: bad values and --compress are refused") {
  const auto& spec = test::registry().algorithms.get("allreduce-sgd");
  CHECK_THROWS_WITH(spec.make({{"backups", "1025"}}),
                    doctest::Contains("allreduce-sgd.backups must be in [0, 1024]"));
  CHECK_THROWS(spec.make({{"backups", "-1"}}));
}

}  // namespace
}  // namespace gossamer::algorithms
