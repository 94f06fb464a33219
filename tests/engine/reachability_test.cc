// Reachability learned over real runtime networks: the member a joiner joins through dials its
// advertised address back; a joiner advertising an address nobody can dial is marked dial-out
// only, in its own view and then in the others', and is still reached (on the links it opened);
// one that can be dialed is not marked; --no-inbound is marked from the start.
#include <chrono>
#include <optional>
#include <thread>

#include <doctest/doctest.h>

#include "engine/runtime/control_node.h"
#include "tests/engine/control_nodes.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

NetworkConfig configOf(std::optional<net::Endpoint> seed, net::Endpoint advertise = {},
                       bool noInbound = false) {
  NetworkConfig c = test::controlNodeConfig(seed, std::byte{41});
  c.advertise = advertise;
  c.noInbound = noInbound;
  return c;
}

struct Node : ControlNode {
  Node(PeerId id, NetworkConfig config)
      : ControlNode(id, std::move(config), net::wire::ModelFingerprint{16, "f32", 0x7ea}, 64) {}
};

// Whether `node`'s view says `id` is dial-out only, within `timeout`.
bool seesDialOutOnly(ControlNode& node, PeerId id, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    for (const net::membership::Member& m : node.network.currentRecords().members)
      if (m.id == id && m.dialOutOnly) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST_CASE("reachability: a joiner the seed cannot dial back is marked dial-out only") {
  test::Watchdog watchdog(60s);
  Node seed(1, configOf(std::nullopt));
  const net::Endpoint at = seed.network.endpoint();
  Node reachable(2, configOf(at));
  // Advertises an in-process address nothing listens at: it can dial out, not be dialed.
  const net::Endpoint nowhere{"inproc", 65001};
  Node hidden(3, configOf(at, nowhere));
  Node declared(4, configOf(at, {}, true));
  REQUIRE(seed.waitForMembers(4, 20s));
  CHECK(seesDialOutOnly(hidden, 3, 10s));  // its own record, from the seed's dial-back
  CHECK(seesDialOutOnly(seed, 3, 10s));    // and the others' view of it
  CHECK(seesDialOutOnly(reachable, 3, 10s));
  CHECK(seesDialOutOnly(seed, 4, 1s));  // --no-inbound: from its join on
  CHECK_FALSE(seesDialOutOnly(seed, 2, 500ms));
  CHECK_FALSE(seesDialOutOnly(reachable, 2, 1ms));
  // The hidden peer stays a member: it is probed on the links it opened.
  std::this_thread::sleep_for(2s);
  CHECK(seed.waitForMembers(4, 1s));
}

}  // namespace
}  // namespace gossamer::engine::runtime
