// local-sgd (algorithms/local_sgd.h): the average after one round with learning rate 0, the
// convex optimum, training, options and a peer killed mid-run.
#include "algorithms/local_sgd.h"

#include <doctest/doctest.h>

#include "tests/algorithms/periodic_averaging_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

TEST_CASE(
    "local-sgd: with learning rate 0 every peer holds the average of the models after one round") {
  test::Watchdog watchdog(60s);
  test::checkAverageAfterOneRound("local-sgd", 4, {{"tau", "3"}, {"pipeline", "2"}});
  test::checkAverageAfterOneRound("local-sgd", 5,
                                  {{"tau", "1"}, {"pipeline", "16"}, {"reset-optimizer", "true"}});
}

TEST_CASE("local-sgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  test::checkConvexOptimum("local-sgd", {{"tau", "4"}}, 800, 0.05, 0.02);
}

TEST_CASE("local-sgd: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  test::checkLearns("local-sgd", {{"tau", "6"}});
}

TEST_CASE("local-sgd: options are validated") {
  const auto& spec = test::registry().algorithms.get("local-sgd");
  CHECK(spec.defaultTopology == "ring");
  CHECK_THROWS_WITH_AS(spec.make({{"tau", "0"}}),
                       doctest::Contains("local-sgd.tau must be at least 1"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pipeline", "0"}}),
                       doctest::Contains("local-sgd.pipeline must be in [1, 16]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"p", "2"}}), doctest::Contains("unknown option 'p'"),
                       gossamer::Error);
}

TEST_CASE("local-sgd: a peer killed mid-run does not stop the others") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkSurvivesKill("local-sgd", {{"tau", "4"}}, 1);
  // At most one round per boundary, merged or fallen back (40 in all). Whether the round the dead
  // peer was due in fails depends on the clock: on a loaded machine the members may drop it from
  // the view first, and a survivor that fell behind realigns past a boundary; so neither a
  // fallback nor all 40 can be asserted.
  for (std::size_t i : {0, 2, 3}) {
    CAPTURE(i);
    const auto& metrics = result.peers[i].metrics;
    const auto fallbacks = metrics.find("local-sgd.fallbacks");
    const double failed = fallbacks == metrics.end() ? 0 : fallbacks->second;
    CHECK(metrics.at("local-sgd.rounds") + failed <= 40);
  }
}

}  // namespace
}  // namespace gossamer::algorithms
