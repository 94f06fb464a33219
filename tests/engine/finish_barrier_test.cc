// The end-of-run barriers with members that enter the view late: a joiner admitted at the last
// step, whose membership reached some members only after they had announced `finished`, used to
// wait out the whole finish timeout for their marks. Two real networks (in-process transport):
// the first announces alone, the second joins after, and its barrier must complete at once.
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "engine/runtime/control_codec.h"
#include "engine/runtime/control_node.h"
#include "tests/engine/control_nodes.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

NetworkConfig makeConfig(std::optional<net::Endpoint> seed) {
  return test::controlNodeConfig(seed, std::byte{7});
}

struct Node : ControlNode {
  Node(PeerId id, std::optional<net::Endpoint> seed)
      : ControlNode(id, makeConfig(seed), net::wire::ModelFingerprint{16, "f32", 0x5eed}, 64) {}
};

bool waitForMembers(const ControlNode& node, std::size_t count) {
  return node.waitForMembers(count, 20s);
}

TEST_CASE("finish barrier: a member that enters the view after the announcement gets the marks") {
  test::Watchdog watchdog(60s);
  Node first(1, std::nullopt);
  // Alone, the first peer ends its loop: its marks go to nobody (no member yet).
  first.control.announce(ClusterControl::Barrier::finished, {}, 1s);
  first.control.announce(ClusterControl::Barrier::released, {}, 1s);

  Node second(2, first.network.endpoint());
  REQUIRE(waitForMembers(second, 2));
  REQUIRE(waitForMembers(first, 2));
  // Before, the second waited the whole timeout for marks that had gone to nobody.
  const Clock::time_point start = Clock::now();
  CHECK(second.control.await(ClusterControl::Barrier::finished, 20s));
  CHECK(second.control.await(ClusterControl::Barrier::released, 20s));
  CHECK(Clock::now() - start < 10s);
  CHECK(second.control.hasFinished(1));
  CHECK(second.control.hasReleased(1));
  // Marks go once: the first announced nothing else, and its own barrier waits for the second.
  CHECK_FALSE(first.control.hasFinished(2));
}

TEST_CASE("finish barrier: marks lost on the way go again while a member still waits for them") {
  test::Watchdog watchdog(60s);
  Node first(1, std::nullopt);
  // The first announces both barriers to the second before the second is in its view: the marks
  // are lost (as with a link that breaks with them in flight), and the second is counted as sent.
  first.control.announce(ClusterControl::Barrier::finished, {2}, 1s);
  first.control.announce(ClusterControl::Barrier::released, {2}, 1s);
  Node second(2, first.network.endpoint());
  REQUIRE(waitForMembers(second, 2));
  REQUIRE(waitForMembers(first, 2));
  second.control.announce(ClusterControl::Barrier::finished, {1}, 1s);

  const Clock::time_point start = Clock::now();
  bool firstDone = false;
  std::thread waiting([&] {
    // The first has the second's finished marks; waiting for its released ones, it sends its
    // own marks again, and the second's barriers complete.
    firstDone = first.control.await(ClusterControl::Barrier::finished, 20s) &&
                first.control.await(ClusterControl::Barrier::released, 20s);
  });
  CHECK(second.control.await(ClusterControl::Barrier::finished, 20s));
  second.control.announce(ClusterControl::Barrier::released, {1}, 1s);
  CHECK(second.control.await(ClusterControl::Barrier::released, 20s));
  waiting.join();
  CHECK(firstDone);
  CHECK(Clock::now() - start < 15s);  // not the 20 s timeout
}

TEST_CASE("finish barrier: a member's first mark is answered with this peer's own") {
  test::Watchdog watchdog(60s);
  Node first(1, std::nullopt);
  // The first's marks to the second are lost on the way (the second is not in its view yet).
  first.control.announce(ClusterControl::Barrier::finished, {2}, 1s);
  Node second(2, first.network.endpoint());
  REQUIRE(waitForMembers(second, 2));
  REQUIRE(waitForMembers(first, 2));
  second.control.announce(ClusterControl::Barrier::finished, {1}, 1s);
  // The first has every mark: it waits for nothing, so it sends nothing again by itself.
  CHECK(first.control.await(ClusterControl::Barrier::finished, 20s));
  // The second's marks, arriving the first time, were answered with the first's.
  const Clock::time_point start = Clock::now();
  CHECK(second.control.await(ClusterControl::Barrier::finished, 5s));
  CHECK(Clock::now() - start < 4s);
}

TEST_CASE("finish barrier: a member that says it still waits is answered with this peer's marks") {
  test::Watchdog watchdog(60s);
  Node first(1, std::nullopt);
  // The first holds the second's marks already (delivered before it announced anything, so
  // not answered then), and its own marks to the second are lost on the way.
  for (std::uint8_t channel : {0, 1}) {
    Incoming mark;
    mark.from = 2;
    first.control.onMessage(std::move(mark), control::encode(control::Finished{channel, false}));
  }
  first.control.announce(ClusterControl::Barrier::finished, {2}, 1s);
  Node second(2, first.network.endpoint());
  REQUIRE(waitForMembers(second, 2));
  REQUIRE(waitForMembers(first, 2));
  CHECK(first.control.await(ClusterControl::Barrier::finished, 1s));  // nothing to wait for
  // The second announces and waits: its marks sent again say it is waiting, and the first,
  // which has every mark and sends nothing again by itself, answers them.
  second.control.announce(ClusterControl::Barrier::finished, {1}, 1s);
  const Clock::time_point start = Clock::now();
  CHECK(second.control.await(ClusterControl::Barrier::finished, 5s));
  CHECK(Clock::now() - start < 4s);
}

}  // namespace
}  // namespace gossamer::engine::runtime
