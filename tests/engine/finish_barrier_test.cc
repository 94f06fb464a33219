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

#include "engine/runtime/control.h"
#include "engine/runtime/messenger.h"
#include "engine/runtime/network.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

// One peer's network and control protocol, wired as runtime::Peer wires them.
struct ControlNode {
  ControlNode(PeerId id, std::optional<net::Endpoint> seed)
      : config(makeConfig(seed)),
        staging(*compute, 64, {}),
        codec(
            *compute, *compute, {}, id,
            [this](std::size_t bytes) { return staging.receiveSlot(bytes); }, 1 << 20),
        network(config, id),
        messenger(network, staging, codec),
        snapshots(id),
        control(network, messenger, snapshots, status) {
    messenger.setRoutes(Routes{.inbox = &inbox,
                               .serve = [](Incoming) {},
                               .runtime =
                                   [this](Incoming m, std::vector<std::byte> bytes) {
                                     control.onMessage(std::move(m), std::move(bytes));
                                   }});
    network.start(
        PeerNetwork::Handlers{
            .target = [this](const net::Remote&, const net::wire::EnvelopeHeader&, std::size_t,
                             std::size_t size) { return messenger.receiveTarget(size); },
            .envelope =
                [this](const net::Remote& from, net::wire::EnvelopeHeader header,
                       std::vector<net::Payload> payloads) {
                  messenger.onEnvelope(from, std::move(header), std::move(payloads));
                },
            .membershipChanged = [this](const net::membership::Event&) { control.onViewChanged(); },
            .registerMemory = [](net::Transport&) {},
            .deviceMemory = {}},
        net::wire::ModelFingerprint{16, "f32", 0x5eed}, 1);
  }
  ~ControlNode() { network.shutdown(); }

  // The same hub and secret for every node of the test.
  static NetworkConfig makeConfig(std::optional<net::Endpoint> seed) {
    static const TransportMaker hub = test::sharedInprocNetwork();
    NetworkConfig c;
    c.transport = "inproc";
    c.transportMaker = hub;
    c.secret = std::vector<std::byte>(32, std::byte{7});
    c.membership = net::membership::Options::local();
    if (seed) c.seeds = {*seed};
    prepareTransport(c, test::registry());
    return c;
  }

  NetworkConfig config;
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute({.blasThreads = 1});
  Staging staging;
  PayloadCodec codec;
  MessageQueue inbox;
  PeerNetwork network;
  Messenger messenger;
  SnapshotBoard snapshots;
  LoopStatus status;
  ClusterControl control;
};

bool waitForMembers(const ControlNode& node, std::size_t count) {
  const auto deadline = Clock::now() + 20s;
  while (node.network.members().size() < count) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_CASE("finish barrier: a member that enters the view after the announcement gets the marks") {
  test::Watchdog watchdog(60s);
  ControlNode first(1, std::nullopt);
  // Alone, the first peer ends its loop: its marks go to nobody (no member yet).
  first.control.announce(ClusterControl::Barrier::finished, {}, 1s);
  first.control.announce(ClusterControl::Barrier::released, {}, 1s);

  ControlNode second(2, first.network.endpoint());
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

}  // namespace
}  // namespace gossamer::engine::runtime
