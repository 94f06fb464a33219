// Peer identities in a running cluster: the member a joiner joins through binds its id to its
// key; a later peer claiming that id with another key is refused (while the first is up, and
// after it died: the binding outlives it), and the first, back with its own key, is let in. A
// Peer keeps its key beside its checkpoints, so a restart of its process keeps its identity.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include "engine/runtime/checkpoints.h"
#include "engine/runtime/control_node.h"
#include "net/errors.h"
#include "tests/engine/control_nodes.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

struct Node : ControlNode {
  Node(PeerId id, std::optional<net::Endpoint> seed,
       std::shared_ptr<const net::wire::Identity> identity)
      : ControlNode(id, configOf(seed, std::move(identity)),
                    net::wire::ModelFingerprint{16, "f32", 0x1d}, 64) {}

  static NetworkConfig configOf(std::optional<net::Endpoint> seed,
                                std::shared_ptr<const net::wire::Identity> identity) {
    NetworkConfig c = test::controlNodeConfig(seed, std::byte{31});
    c.identity = std::move(identity);
    return c;
  }
};

bool refusedForIdentity(ControlNode& node) {
  for (const auto& failure : node.network.seedFailures())
    if (failure.error == net::Errc::identityMismatch) return true;
  return false;
}

TEST_CASE("identity join: an id is bound to its first key, and outlives its peer") {
  test::Watchdog watchdog(90s);
  Node seed(1, std::nullopt, net::wire::Identity::generate());
  const net::Endpoint at = seed.network.endpoint();
  const auto realKey = net::wire::Identity::generate();
  auto real = std::make_unique<Node>(2, at, realKey);
  REQUIRE(seed.waitForMembers(2, 20s));

  {  // Another member knows the secret but not peer 2's key: it cannot join as peer 2.
    Node poser(2, at, net::wire::Identity::generate());
    CHECK_FALSE(poser.waitForMembers(2, 2s));
    CHECK(refusedForIdentity(poser));
  }
  real.reset();  // peer 2 crashes; its binding stays
  {
    Node poser(2, at, net::wire::Identity::generate());
    CHECK_FALSE(poser.waitForMembers(2, 2s));
    CHECK(refusedForIdentity(poser));
  }
  // Peer 2 comes back with its own key (kept beside its checkpoints): it is let in.
  Node back(2, at, realKey);
  CHECK(back.waitForMembers(2, 20s));
  CHECK_FALSE(refusedForIdentity(back));
}

TEST_CASE("identity join: a peer's key lives beside its checkpoints") {
  TrainingConfig t;
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("gossamer-identity-join-{}", ::getpid());
  t.checkpointDir = dir.string();
  CHECK(PeerCheckpoints(t, 0x2a).identityPath() == (dir / "peer-000000000000002a.key").string());
  t.checkpointFile = (dir / "mine.ckpt").string();
  CHECK(PeerCheckpoints(t, 0x2a).identityPath() == (dir / "mine.ckpt.key").string());
  CHECK(PeerCheckpoints(TrainingConfig{}, 0x2a).identityPath().empty());
}

}  // namespace
}  // namespace gossamer::engine::runtime
