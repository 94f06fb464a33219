// gosgd (algorithms/gosgd.h): the conserved mass, consensus with learning rate 0, and training.
#include "algorithms/gosgd.h"

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

TEST_CASE(
    "gosgd: with learning rate 0 the weights sum to 1 and sum alpha_i w_i is the initial average") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config = test::algorithmCluster("gosgd", peers, 400, 0.0, {{"p", "0.5"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.finals.size() == peers);
  const std::size_t n = result.finals[0].params.size();
  double alphaSum = 0;
  std::vector<double> mass(n, 0.0);
  for (std::size_t i = 0; i < peers; ++i) {
    const double alpha = result.peers[i].metrics.at("gosgd.alpha");
    alphaSum += alpha;
    for (std::size_t k = 0; k < n; ++k) mass[k] += alpha * result.finals[i].params[k];
  }
  // Every message was merged by finish(): nothing is in flight, so the invariants are exact.
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-12));
  const std::vector<float> oracle = test::averageOfDistinct(peers, n);
  CHECK(test::maxAbsDiff(std::vector<float>(mass.begin(), mass.end()), oracle) < 1e-5);
}

TEST_CASE("gosgd: with learning rate 0 and slow enough steps every peer reaches the average") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config = test::algorithmCluster("gosgd", peers, 300, 0.0, {{"p", "1"}});
  config.peer.training.minStepTime = 1ms;  // gossip must keep up with the steps
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-3);
  CHECK(result.consensus.distance < 1e-4);
}

TEST_CASE("gosgd: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("gosgd", 4, 300, 0.1, {{"p", "0.2"}});
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.85);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 300);
    CHECK(p.bytesSent > 0);
    CHECK(p.metrics.at("gosgd.sent") > 0);
  }
}

TEST_CASE("gosgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  auto config = test::algorithmCluster("gosgd", 4, 1500, 0.05, {{"p", "0.5"}});
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.minStepTime = 1ms;  // gossip must keep up with the steps
  config.peer.training.batch = 64;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double error = test::relativeError(test::meanOf(result.finals), optimum);
  INFO("relative distance of the average model to the optimum: " << error);
  CHECK(error < 0.05);
  for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.1);
}

TEST_CASE("gosgd: options are validated") {
  CHECK_THROWS_WITH_AS(test::registry().algorithms.get("gosgd").make({{"p", "0"}}),
                       doctest::Contains("gosgd.p must be in (0, 1]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(test::registry().algorithms.get("gosgd").make({{"q", "0.1"}}),
                       doctest::Contains("unknown option 'q'"), gossamer::Error);
}

}  // namespace
}  // namespace gossamer::algorithms
