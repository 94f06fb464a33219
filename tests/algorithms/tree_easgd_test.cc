// tree-easgd (algorithms/tree_easgd.h): consensus with learning rate 0, the convex optimum,
// training, options, and a tree that loses an inner node.
#include "algorithms/tree_easgd.h"

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// Learning rate 0. No quantity is conserved: a peer is pulled toward a copy of its neighbour, and
// the neighbour is pulled back later, by a copy of a different age and at its own interval, so the
// sum of the models drifts. But every update is a convex combination of models, so the models
// stay, coordinate by coordinate, between the smallest and the largest initial value, and they
// contract to one consensus value there.
TEST_CASE("tree-easgd: with learning rate 0 the models reach a consensus inside the initial hull") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 7;  // a full binary tree of depth 2
  auto config = test::algorithmCluster("tree-easgd", peers, 300, 0.0,
                                       {{"alpha", "0.5"}, {"tau_up", "2,1"}, {"tau_down", "1"}});
  config.peer.training.minStepTime = 1ms;  // exchanges must keep up with the steps
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.finals.size() == peers);
  const std::size_t n = result.finals[0].params.size();
  const test::Hull hull = test::hullOfDistinct(peers, n);
  const std::vector<float> mean = test::meanOf(result.finals);
  for (const auto& s : result.finals) {
    CHECK(test::maxAbsDiff(s.params, mean) < 1e-4);
    for (std::size_t k = 0; k < n; ++k) {
      INFO("coordinate " << k << " of peer " << s.peer);
      CHECK(s.params[k] >= hull.low[k] - 1e-5f);
      CHECK(s.params[k] <= hull.high[k] + 1e-5f);
    }
  }
  CHECK(result.consensus.distance < 1e-6);
  // Depths 0, 1, 1, 2, 2, 2, 2 (ids ascending = positions in the tree).
  CHECK(result.peers[0].metrics.at("tree-easgd.depth") == 0);
  CHECK(result.peers[0].metrics.count("tree-easgd.sent_up") == 0);
  CHECK(result.peers[0].metrics.at("tree-easgd.sent_down") == 2 * 300);
  CHECK(result.peers[1].metrics.at("tree-easgd.sent_up") == 300 / 2);
  CHECK(result.peers[6].metrics.at("tree-easgd.depth") == 2);
  CHECK(result.peers[6].metrics.at("tree-easgd.sent_up") == 300);
  CHECK(result.peers[6].metrics.count("tree-easgd.sent_down") == 0);
}

TEST_CASE("tree-easgd: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkLearnsAsync("tree-easgd");
  for (const auto& p : result.peers) CHECK(p.metrics.at("tree-easgd.merged") > 0);
}

// The fixed point of tree-easgd is the minimiser of a weighted sum of the peers' losses (header
// comment); equal intervals both ways and a small alpha make the weights equal, so the average
// model settles at the optimum of the whole training set (0.01 away after 800 steps in our runs).
// Each peer sits between that optimum and its own shard's, and the peer that finishes last takes
// its final steps alone, hence the wider bound for single peers (0.01 to 0.03 in our runs).
TEST_CASE("tree-easgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  auto config = test::algorithmCluster("tree-easgd", 4, 800, 0.1,
                                       {{"alpha", "0.2"}, {"tau_up", "1"}, {"tau_down", "1"}});
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.minStepTime = 2ms;  // exchanges keep up, peers step at similar speeds
  config.peer.training.batch = 64;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double error = test::relativeError(test::meanOf(result.finals), optimum);
  INFO("relative distance of the average model to the optimum: " << error);
  CHECK(error < 0.03);
  for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.1);
}

TEST_CASE("tree-easgd: options are validated") {
  const auto& spec = test::registry().algorithms.get("tree-easgd");
  CHECK_THROWS_WITH_AS(spec.make({{"alpha", "0"}}),
                       doctest::Contains("tree-easgd.alpha must be in (0, 1]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"alpha", "1.5"}}), doctest::Contains("tree-easgd.alpha"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau_up", "0"}}),
                       doctest::Contains("tree-easgd.tau_up intervals must be at least 1"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau_down", "4,0"}}), doctest::Contains("tree-easgd.tau_down"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau_up", "2,8"}}),
                       doctest::Contains("tree-easgd.tau_up may not increase with depth"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau", "2"}}), doctest::Contains("unknown option 'tau'"),
                       gossamer::Error);
  CHECK(spec.defaultTopology == "tree");
  CHECK(spec.make({{"tau_up", "16,4,4,1"}, {"tau_down", "1,2,3"}}) != nullptr);
}

// tree-easgd never waits for anyone: when an inner node (position 1, parent of position 3) is
// killed, the others go on; once the failure detector removes it, the tree is rebuilt over the
// survivors, and they still learn the task.
TEST_CASE("tree-easgd: the others finish and learn when an inner node is killed") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("tree-easgd", 4, 500, 0.05);
  config.peer.training.minStepTime = 2ms;  // the kill comes mid-run
  test::killPeerAt(config, 1, 100);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[1].steps < 500);
  for (std::size_t i : {0, 2, 3}) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == 500);
    CHECK(result.peers[i].metrics.at("tree-easgd.merged") > 0);
  }
  // After the rebuild the old grandchild (position 3, now 2) hangs from the root.
  CHECK(result.peers[3].metrics.at("tree-easgd.depth") == 1);
  const engine::runtime::ConsensusResult consensus = test::survivorsConsensus(result, 1);
  CHECK(consensus.accuracy > 0.9);
  CHECK(consensus.minPeerAccuracy > 0.85);
}

}  // namespace
}  // namespace gossamer::algorithms
