// Reachability learned over real runtime networks: the member a joiner joins through dials its
// advertised address back; a joiner advertising an address nobody can dial is marked dial-out
// only, in its own view and then in the others', and is still reached (on the links it opened);
// one that can be dialed is not marked; --no-inbound is marked from the start. The others' links
// to a dial-out-only member are opened by it, at their request (connection reversal).
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

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

// Connection reversal end to end: a joiner nobody can dial catches a model up from two members.
// The chunks travel on the data channel, where it opened no link: each member asks it to open
// one (on its control link, or through a member linked to it), and the chunks ride those links.
TEST_CASE("reachability: a dial-out-only joiner is sent to on links it opens on request") {
  test::Watchdog watchdog(60s);
  constexpr std::size_t kFloats = 40'000;
  const net::wire::ModelFingerprint model{kFloats, "f32", 0x7eb};
  auto node = [&](PeerId id, NetworkConfig config) {
    return std::make_unique<ControlNode>(id, std::move(config), model, 64 << 10);
  };
  std::vector<float> truth(kFloats);
  for (std::size_t i = 0; i < kFloats; ++i) truth[i] = 0.5f + static_cast<float>(i % 313);
  const auto seed = node(1, configOf(std::nullopt));
  const net::Endpoint at = seed->network.endpoint();
  const auto other = node(2, configOf(at));
  const auto hidden = node(3, configOf(at, net::Endpoint{"inproc", 65002}));
  seed->serve(40, truth);
  other->serve(40, truth);
  REQUIRE(seed->waitForMembers(3, 20s));
  REQUIRE(seesDialOutOnly(*seed, 3, 10s));
  REQUIRE(seesDialOutOnly(*other, 3, 10s));
  hidden->control.setCatchUpOptions({.chunkBytes = 16 << 10, .window = 2, .maxSources = 2});
  const std::vector<PeerId> sources{1, 2};
  const Clock::time_point start = Clock::now();
  const std::optional<CaughtUpModel> got =
      hidden->control.catchUp(sources, ModelHolders::identical, kFloats, 20s);
  REQUIRE(got.has_value());
  // A member that has not yet heard the joiner is dial-out only dials it for its first replies,
  // and they are lost: after the 10 s silence (half the timeout) they are asked again at once,
  // not after the rest of the timeout as well (30 s in all).
  CHECK(Clock::now() - start < 20s);
  CHECK(std::ranges::equal(got->params(), truth));
  CHECK(got->from.size() == 2);
  CHECK(seed->network.linksReversed() >= 1);
  CHECK(other->network.linksReversed() >= 1);
}

}  // namespace
}  // namespace gossamer::engine::runtime
