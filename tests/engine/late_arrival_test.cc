// A peer that comes when the cluster's run is ending (engine/README.md, "Elasticity": too late):
// it trains nothing, says so (PeerResult::clusterDone) and leaves at once, and the members that
// are finishing do not wait for it. Two externally driven peers make the moment exact: peer 1
// has trained all its steps and waits at the finish, peer 2 holds at its last step while a third
// peer comes.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include <doctest/doctest.h>

#include "engine/runtime/cluster.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kSteps = 20;

TEST_CASE("late arrival: a peer that comes when a member trained all its steps leaves at once") {
  test::Watchdog watchdog(60s);
  PeerConfig base;
  base.network.transport = "inproc";
  base.training.algorithm = "gosgd";
  base.training.maxSteps = kSteps;
  base.training.minPeers = 2;
  base.training.finishTimeout = 30s;  // what the finishing members would wait for the newcomer
  LocalPeerConfigs configs(base, test::registry());
  ParamLayout layout;
  layout.add("w", {64});
  auto makePeer = [&](std::size_t index, std::optional<net::Endpoint> seed) {
    auto peer = std::make_unique<Peer>(configs.make(index, seed), test::registry(),
                                       ExternalModel{layout, {}});
    configs.listening(peer->endpoint(), index);
    return peer;
  };
  auto first = makePeer(0, std::nullopt);
  auto second = makePeer(1, first->endpoint());

  std::atomic<bool> newcomerDone{false};
  PeerResult results[2];
  std::thread finisher([&] {  // peer 1: all its steps, then the finish
    REQUIRE(first->start());
    while (first->step({.loss = 1.0, .samples = 1})) {
    }
    results[0] = first->finish();
  });
  std::thread holder([&] {  // peer 2: holds before its last step until the newcomer is gone
    REQUIRE(second->start());
    while (second->status().step + 1 < kSteps) REQUIRE(second->step({.loss = 1.0, .samples = 1}));
    while (!newcomerDone) std::this_thread::sleep_for(5ms);
    while (second->step({.loss = 1.0, .samples = 1})) {
    }
    results[1] = second->finish();
  });

  while (!first->status().loopEnded) std::this_thread::sleep_for(5ms);
  auto newcomer = makePeer(2, first->endpoint());
  // Before, it joined late at peer 2's step (peer 1 was not training) and trained alone.
  CHECK_FALSE(newcomer->start());
  const PeerResult late = newcomer->finish();
  newcomerDone = true;
  finisher.join();
  holder.join();

  CHECK(late.clusterDone);
  CHECK_FALSE(late.joinFailure.has_value());
  CHECK(late.steps == 0);
  for (const PeerResult& r : results) {
    CHECK(r.steps == kSteps);
    CHECK(r.finishSeconds < 10.0);  // nobody waited out the 30 s for the newcomer
  }
}

}  // namespace
}  // namespace gossamer::engine::runtime
