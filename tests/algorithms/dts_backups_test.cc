// dts with backup workers (algorithms/dts.h, "Backup workers"): four simulated peers, one 4x
// slower than the others. Without a backup every window waits for the slow peer; with one, the
// fast peers go at their own pace, the slow one catches up through steps without gradients, and
// once every window is compensated every peer holds the same model.
#include <algorithm>
#include <cmath>
#include <string>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kSteps = 60;

engine::sim::SimResult slowFourth(const std::string& backups, const std::string& period) {
  const engine::Registry& registry = test::registry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, "dts", kSteps);
  c.training.peerStepTimes = {100ms, 100ms, 100ms, 400ms};
  c.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
  c.training.algorithmOptions = {{"backups", backups}, {"delay", "4"}, {"period", period}};
  engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  return result;
}

// Every window compensated on every peer: one model, up to float rounding.
void checkOneModel(const engine::sim::SimResult& result, std::uint64_t period) {
  REQUIRE(result.peers.size() == 4);
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    CHECK(peer.error.empty());
    CHECK(peer.steps == kSteps);
    CHECK(peer.metrics.at("dts.rounds") == kSteps / period);
    CHECK(peer.metrics.count("dts.fallbacks") == 0);
  }
  REQUIRE(result.finals.size() == 4);
  const auto& first = result.finals.front().params;
  double norm = 0;
  for (float x : first) norm = std::max(norm, std::abs(static_cast<double>(x)));
  for (const auto& final : result.finals)
    CHECK(test::maxAbsDiff(final.params, first) < 1e-5 * norm);
}

TEST_CASE("dts backups: one backup worker frees the fast peers from a 4x slower one") {
  for (const std::uint64_t period : {1, 2}) {
    CAPTURE(period);
    const std::string p = std::to_string(period);
    const engine::sim::SimResult waiting = slowFourth("0", p);
    checkOneModel(waiting, period);
    const engine::sim::SimResult backed = slowFourth("1", p);
    checkOneModel(backed, period);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(backed.peers[i].trainSeconds <= 0.5 * waiting.peers[i].trainSeconds);
      CHECK(backed.peers[i].metrics.count("dts.caught_up") == 0);
    }
    // The slow peer takes most windows without computing.
    CHECK(backed.peers[3].metrics.at("dts.caught_up") >= kSteps / period / 2);
  }
}

TEST_CASE("dts backups: bad values and --compress are refused") {
  const auto& spec = test::registry().algorithms.get("dts");
  CHECK_THROWS_WITH(spec.make({{"backups", "1025"}}),
                    doctest::Contains("dts.backups must be in [0, 1024]"));
  CHECK_THROWS(spec.make({{"backups", "-1"}}));
}

}  // namespace
}  // namespace gossamer::algorithms
