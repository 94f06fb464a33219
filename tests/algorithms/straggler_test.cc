// Elastic membership and fault tolerance: a straggler does not stall the asynchronous algorithms.
// Peer 1 (the star's center and the tree's root, so that the role that others talk to is the slow
// one) takes 15x longer per step than the others; they still run their steps at their own pace
// (their training loops end long before the straggler's).
#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;

void checkStragglerDoesNotStall(const std::string& algorithm) {
  test::Watchdog watchdog(120s);
  CAPTURE(algorithm);
  constexpr std::uint64_t kSteps = 100;
  auto config = test::algorithmCluster(algorithm, 4, kSteps, 0.1, {});
  config.peer.training.minStepTime = 2ms;  // 0.2 s for a peer at full speed
  config.onStart = [](std::vector<engine::runtime::Peer*>& peers) {
    peers[0]->setMinStepTime(30ms);  // 3 s for the straggler
  };
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[0].wallSeconds >= 3.0);
  for (std::size_t i = 1; i < result.peers.size(); ++i) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == kSteps);
    CHECK(result.peers[i].wallSeconds < 1.5);  // not held to the straggler's 3 s
  }
}

TEST_CASE("straggler: gosgd peers keep their own pace next to a 15x slower peer") {
  checkStragglerDoesNotStall("gosgd");
}

TEST_CASE("straggler: easgd workers keep their pace when the center is 15x slower") {
  checkStragglerDoesNotStall("easgd");
}

TEST_CASE("straggler: tree-easgd peers keep their pace when the root is 15x slower") {
  checkStragglerDoesNotStall("tree-easgd");
}

}  // namespace
}  // namespace gossamer
