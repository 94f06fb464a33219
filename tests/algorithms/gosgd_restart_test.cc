// gosgd across a restart: a peer killed mid-run and restarted from its checkpoint while the others
// go on re-enters with weight 0 (Gosgd::resumedLate), so the gossip weight of the cluster is never
// created: the weights sum to 1 minus the weight it died with. The new life's transfers are its
// own (not taken for the old life's duplicates), and everyone agrees on the weight the old life
// held.
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

#include "engine/runtime/cluster.h"
#include "engine/runtime/peer.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::runtime::Peer;
using engine::runtime::PeerResult;

// One peer of the cluster, training on its own thread.
struct Running {
  std::unique_ptr<Peer> peer;
  PeerResult result;
  std::thread thread;
  void start(engine::runtime::PeerConfig config,
             const engine::Registry& registry = test::registry()) {
    peer = std::make_unique<Peer>(std::move(config), registry, test::smallData());
    thread = std::thread([this] { result = peer->run(); });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
};

bool waitForStep(const Peer& peer, std::uint64_t step, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (peer.status().step < step) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST_CASE("gosgd: a peer restarted from its checkpoint while the others train creates no weight") {
  test::Watchdog watchdog(120s);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gossamer-gosgd-restart-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // No gossip (p = 1e-9, never drawn in 600 steps): every weight stays 1/3 unless the restart changes it, so the ledger is
  // exact. (With gossip, what a killed peer takes with it is not yet accounted exactly: the
  // survivors' final weights fell far below 1 - its weight in trials, lost escrow aside.)
  auto config = test::algorithmCluster("gosgd", 3, 600, 0.05, {{"p", "1e-9"}});
  config.peer.training.minPeers = 3;  // (runLocalCluster sets it)
  config.peer.training.minStepTime = 2ms;
  config.peer.training.checkpointDir = dir.string();
  config.peer.training.checkpointEvery = 20;
  engine::runtime::LocalPeerConfigs configs(config.peer, test::registry());

  std::vector<Running> peers(3);
  peers[0].start(configs.make(0, std::nullopt));
  configs.listening(peers[0].peer->endpoint(), 0);
  for (std::size_t i = 1; i < 3; ++i) {
    peers[i].start(configs.make(i, peers[0].peer->endpoint()));
    configs.listening(peers[i].peer->endpoint(), i);
  }
  // Peer 3 dies after a checkpoint and some gossip since (it gave weight away after it), and
  // comes back from that checkpoint while the others are still training.
  REQUIRE(waitForStep(*peers[2].peer, 150, 60s));
  peers[2].peer->kill();
  peers[2].join();
  // Its weight when it died (published at every step boundary): gone with it.
  const double diedWith = test::metricOf(peers[2].result, "gosgd.alpha");
  REQUIRE(waitForStep(*peers[0].peer, 250, 60s));
  engine::runtime::PeerConfig restart = configs.make(2, peers[0].peer->endpoint());
  restart.training.resume = true;
  peers[2] = Running{};
  peers[2].start(std::move(restart));
  configs.listening(peers[2].peer->endpoint(), 2);
  for (Running& p : peers) p.join();

  double weights = 0;
  for (const Running& p : peers) {
    CHECK(p.result.steps == 600);
    weights += test::metricOf(p.result, "gosgd.alpha") + test::metricOf(p.result, "gosgd.escrow");
  }
  // The survivors keep their 2/3; the restarted peer brings nothing back.
  CHECK(diedWith == doctest::Approx(1.0 / 3));
  CHECK(test::metricOf(peers[2].result, "gosgd.restored_weight_dropped") ==
        doctest::Approx(1.0 / 3));
  CHECK(test::metricOf(peers[2].result, "gosgd.alpha") == 0);
  CHECK(weights == doctest::Approx(2.0 / 3).epsilon(1e-12));
  std::filesystem::remove_all(dir);
}


TEST_CASE(
    "gosgd: with gossip on, a restarted peer's transfers are merged as its own, acks match merges "
    "and everyone agrees on the weight its previous life held") {
  test::Watchdog watchdog(120s);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gossamer-gosgd-restart-gossip-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  test::ShellRegistry recording;
  auto config = test::algorithmCluster("gosgd", 3, 1200, 0.05, {{"p", "0.5"}, {"retransmit", "0.01"}});
  config.peer.training.minPeers = 3;
  config.peer.training.minStepTime = 2ms;
  config.peer.training.checkpointDir = dir.string();
  config.peer.training.checkpointEvery = 20;
  engine::runtime::LocalPeerConfigs configs(config.peer, recording.registry);

  std::vector<Running> peers(3);
  peers[0].start(configs.make(0, std::nullopt), recording.registry);
  configs.listening(peers[0].peer->endpoint(), 0);
  for (std::size_t i = 1; i < 3; ++i) {
    peers[i].start(configs.make(i, peers[0].peer->endpoint()), recording.registry);
    configs.listening(peers[i].peer->endpoint(), i);
  }
  REQUIRE(waitForStep(*peers[2].peer, 150, 60s));
  const engine::PeerId restarted = peers[2].peer->id();
  peers[2].peer->kill();
  peers[2].join();
  REQUIRE(waitForStep(*peers[0].peer, 250, 60s));
  engine::runtime::PeerConfig restart = configs.make(2, peers[0].peer->endpoint());
  restart.training.resume = true;
  peers[2] = Running{};
  peers[2].start(std::move(restart), recording.registry);
  configs.listening(peers[2].peer->endpoint(), 2);
  for (Running& p : peers) p.join();
  std::vector<PeerResult> results;
  for (const Running& p : peers) results.push_back(p.result);
  peers.clear();  // every life's ledger is recorded when its algorithm goes

  // Lives in the order they ended: the killed one first, its successor among the last three.
  const auto lives = recording.lives();
  REQUIRE(lives.size() == 4);
  REQUIRE(lives.front().first == restarted);
  std::map<engine::PeerId, Gosgd::Ledger> last;
  for (std::size_t k = 1; k < lives.size(); ++k) last[lives[k].first] = lives[k].second;
  REQUIRE(last.size() == 3);
  const Gosgd::Ledger& reborn = last.at(restarted);
  double live = 0, fromReborn = 0;
  for (const auto& [id, l] : last) {
    for (const auto& [to, w] : l.escrowTo) CHECK(w == 0);  // everything settled
    live += l.alpha;
    if (id == restarted) continue;
    INFO("survivor " << id);
    const auto get = [](const std::map<engine::PeerId, double>& m, engine::PeerId k) {
      const auto it = m.find(k);
      return it == m.end() ? 0.0 : it->second;
    };
    // Every transfer of the new life a survivor acknowledged, it merged (and the other way),
    // counted from the new life on: none was taken for a duplicate of the old life's ids.
    CHECK(get(l.mergedFrom, restarted) == doctest::Approx(get(reborn.ackedBy, id)).epsilon(1e-12));
    CHECK(get(reborn.mergedFrom, id) == doctest::Approx(get(l.ackedBy, restarted)).epsilon(1e-12));
    fromReborn += get(l.mergedFrom, restarted);
  }
  CHECK(fromReborn > 0);  // the new life gossiped (else the checks above prove nothing)
  // Everyone, the new life included, agrees on the weight the old life held when it ended, and
  // no weight was created: the live weights and the dead life's make at most 1.
  const double agreed = test::metricOf(results[0], "gosgd.dead_weight");
  for (const PeerResult& r : results) CHECK(test::metricOf(r, "gosgd.dead_weight") == agreed);
  CHECK(agreed > 0);
  CHECK(test::metricOf(results[2], "gosgd.alpha") > 0);  // it gained weight again
  INFO("live " << live << ", dead " << agreed);
  CHECK(live + agreed <= 1 + 1e-9);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gossamer::algorithms
