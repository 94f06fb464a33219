// sparknet (algorithms/sparknet.h): the average after one round with learning rate 0, the convex
// optimum, training, options and a master killed mid-run.
#include "algorithms/sparknet.h"

#include <doctest/doctest.h>

#include "tests/algorithms/periodic_averaging_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

TEST_CASE(
    "sparknet: with learning rate 0 every worker holds the average of the models after one round") {
  test::Watchdog watchdog(60s);
  test::checkAverageAfterOneRound("sparknet", 4, {{"tau", "3"}});
  test::checkAverageAfterOneRound("sparknet", 5, {{"tau", "1"}, {"reset-optimizer", "true"}});
}

TEST_CASE("sparknet: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  test::checkConvexOptimum("sparknet", {{"tau", "4"}}, 800, 0.05, 0.02);
}

TEST_CASE("sparknet: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  test::checkLearns("sparknet", {{"tau", "6"}});
}

TEST_CASE("sparknet: options are validated") {
  const auto& spec = test::registry().algorithms.get("sparknet");
  CHECK(spec.defaultTopology == "star");
  CHECK_THROWS_WITH_AS(spec.make({{"tau", "0"}}),
                       doctest::Contains("sparknet.tau must be at least 1"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"reset-optimizer", "maybe"}}),
                       doctest::Contains("reset-optimizer"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pipeline", "2"}}),
                       doctest::Contains("unknown option 'pipeline'"), gossamer::Error);
}

TEST_CASE("sparknet: when the master is killed the workers go on with the next one") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkSurvivesKill("sparknet", {{"tau", "4"}}, 0);
  // Peer 2 (the smallest surviving id) is the star's center of the new view.
  CHECK(result.peers[1].metrics.at("sparknet.models") > 0);
}

}  // namespace
}  // namespace gossamer::algorithms
