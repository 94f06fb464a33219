// gosgd's peers without weight: peers that join a running cluster (weight 0, a live peer's model)
// and peers restored from a checkpoint of weight 0 send nothing until they receive weight, never
// make a 0/0 merge, and leave the total weight and sum alpha_i w_i as they were.
#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/gosgd.h"
#include "engine/builtin.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using test::gossipCluster;
using test::massOf;
using test::metricOf;

// Peers that join `config`'s cluster once its first peer has made 150 steps, all at once (ids
// 98, 99, ...; gosgd options `options`), and what they ended with.
struct LateJoiners {
  struct Late {
    std::thread thread;
    engine::runtime::PeerResult result;
    std::optional<engine::runtime::Snapshot> final;
    std::exception_ptr error;
  };
  std::vector<std::shared_ptr<Late>> late;
  engine::runtime::ClusterResult result;
};

LateJoiners runWithLateJoiners(engine::runtime::ClusterConfig config, std::size_t joiners,
                               const engine::OptionValues& options) {
  config.peer.network.transportMaker = test::sharedInprocNetwork();
  config.peer.network.secret = std::vector<std::byte>(32, std::byte{7});
  LateJoiners out;
  for (std::size_t j = 0; j < joiners; ++j)
    out.late.push_back(std::make_shared<LateJoiners::Late>());
  engine::runtime::PeerConfig lateConfig = config.peer;
  lateConfig.training.minPeers = 2;  // not alone: it waits to see the cluster, then joins it
  lateConfig.training.finalLocalEval = false;
  lateConfig.training.algorithmOptions = options;
  config.onStart = [late = out.late, lateConfig](std::vector<engine::runtime::Peer*>& all) {
    engine::runtime::Peer* first = all.front();
    for (std::size_t j = 0; j < late.size(); ++j) {
      engine::runtime::PeerConfig c = lateConfig;
      c.network.seeds = {first->endpoint()};
      c.network.peerId = 98 + j;
      late[j]->thread = std::thread([one = late[j], c, first] {
        try {
          while (first->status().step < 150) std::this_thread::sleep_for(1ms);
          engine::runtime::Peer peer(c, test::registry(), test::smallData());
          one->result = peer.run();
          one->final = peer.snapshot(1s);
        } catch (...) {
          one->error = std::current_exception();
        }
      });
    }
  };
  out.result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  for (auto& one : out.late) one->thread.join();
  return out;
}

bool allFinite(std::span<const float> values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

// The late joiners' checks: each ran to the end with a finite model and settled; the weights of
// everyone sum to 1 and sum alpha_i w_i is the initial average of the `peers` first peers (lr 0:
// the newcomers' model copies came with weight 0).
void checkMassWithJoiners(const LateJoiners& run, std::size_t peers) {
  const engine::runtime::ClusterResult& result = run.result;
  std::vector<double> mass(result.finals[0].params.size(), 0.0);
  double alphaSum = 0;
  for (std::size_t j = 0; j < run.late.size(); ++j) {
    const LateJoiners::Late& one = *run.late[j];
    INFO("late joiner " << j);
    REQUIRE(one.error == nullptr);
    REQUIRE(one.final.has_value());
    CHECK(one.result.steps == 800);  // it took the cluster's step count and ran to its end
    CHECK(metricOf(one.result, "gosgd.escrow") == 0);
    CHECK(metricOf(one.result, "gosgd.merged") > 0);
    CHECK(allFinite(one.final->params));
    const double alpha = metricOf(one.result, "gosgd.alpha");
    alphaSum += alpha;
    for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += alpha * one.final->params[k];
  }
  for (std::size_t i = 0; i < peers; ++i) {
    INFO("peer " << i + 1);
    CHECK(allFinite(result.finals[i].params));
    const double alpha = metricOf(result.peers[i], "gosgd.alpha");
    alphaSum += alpha;
    for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += alpha * result.finals[i].params[k];
  }
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-9));
  const std::vector<float> oracle = test::averageOfDistinct(peers, mass.size());
  CHECK(test::maxAbsDiff(std::vector<float>(mass.begin(), mass.end()), oracle) < 1e-5);
}

TEST_CASE("gosgd: a peer that joins late starts with weight 0: the total stays 1") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 3;
  const LateJoiners run = runWithLateJoiners(gossipCluster(peers, 800), 1, {{"p", "0.5"}});
  checkMassWithJoiners(run, peers);
}

TEST_CASE(
    "gosgd: two peers that join late together never make a non-finite model (no 0/0 merge of "
    "two weights 0)") {
  test::Watchdog watchdog(120s);
  // The newcomers gossip at every step (p = 1), the others rarely (p = 0.05): each newcomer
  // spends its first tens of steps at weight 0 while the other one would send to it (weight 0
  // too).
  const std::size_t peers = 3;
  auto config = gossipCluster(peers, 800);
  config.peer.training.algorithmOptions["p"] = "0.05";
  const LateJoiners run = runWithLateJoiners(config, 2, {{"p", "1"}});
  checkMassWithJoiners(run, peers);
  for (const auto& one : run.late) CHECK(metricOf(one->result, "gosgd.sent") > 0);
}

// Gosgd restored (loadState, before the first setup, as --resume does) with weight 0 on the
// peers in `restored`.
class RestoredShell final : public test::AlgorithmShell {
 public:
  RestoredShell(std::unique_ptr<Gosgd> inner, std::vector<PeerId> restored)
      : AlgorithmShell(std::move(inner)), restored_(std::move(restored)) {}
  void setup(engine::PeerContext& ctx) override {
    if (!loaded_ && std::find(restored_.begin(), restored_.end(), ctx.self()) != restored_.end()) {
      engine::AlgorithmState state;
      state.values["alpha"] = 0;
      inner().loadState(state);
    }
    loaded_ = true;
    AlgorithmShell::setup(ctx);
  }

 private:
  std::vector<PeerId> restored_;
  bool loaded_ = false;
};

engine::Registry restoredRegistry(std::vector<PeerId> restored) {
  engine::Registry r = engine::makeBuiltinRegistry();
  engine::AlgorithmSpec spec =
      engine::algorithmSpec<Gosgd, GosgdOptions>("gosgd restored with weight 0", "mesh");
  spec.make = [restored](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<RestoredShell>(
        std::make_unique<Gosgd>(engine::parseOptions<GosgdOptions>(values)), restored));
  };
  r.algorithms.add("gosgd", "gosgd restored with weight 0", std::move(spec));
  return r;
}

TEST_CASE("gosgd: peers restored from a checkpoint of weight 0 send nothing and stay finite") {
  test::Watchdog watchdog(120s);
  SUBCASE("every peer at weight 0: nobody has mass to give, every model stays its own") {
    auto config = test::algorithmCluster("gosgd", 2, 100, 0.0, {{"p", "1"}});
    config.peer.training.initialParams = test::distinctParams;
    const engine::Registry registry = restoredRegistry({1, 2});
    const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
    for (std::size_t i = 0; i < 2; ++i) {
      INFO("peer " << i + 1);
      CHECK(metricOf(result.peers[i], "gosgd.alpha") == 0);
      CHECK(metricOf(result.peers[i], "gosgd.sent") == 0);
      const std::vector<float> initial = test::distinctParams(i, result.finals[i].params.size());
      CHECK(result.finals[i].params == initial);
    }
  }
  SUBCASE("two of three at weight 0: the mass of the third is conserved, every model finite") {
    const std::size_t peers = 3;
    auto config = gossipCluster(peers, 400);
    config.peer.training.algorithmOptions["p"] = "1";
    const engine::Registry registry = restoredRegistry({2, 3});
    const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
    double alphaSum = 0;
    std::vector<std::size_t> all;
    for (std::size_t i = 0; i < peers; ++i) {
      INFO("peer " << i + 1);
      CHECK(allFinite(result.finals[i].params));
      CHECK(metricOf(result.peers[i], "gosgd.escrow") == 0);
      alphaSum += metricOf(result.peers[i], "gosgd.alpha");
      all.push_back(i);
    }
    // Only peer 1 started with weight (1/3) and model d_0: sum alpha_i w_i = d_0 / 3 throughout.
    CHECK(alphaSum == doctest::Approx(1.0 / 3).epsilon(1e-9));
    std::vector<float> oracle = test::distinctParams(0, result.finals[0].params.size());
    for (float& v : oracle) v /= 3;
    CHECK(test::maxAbsDiff(massOf(result, all), oracle) < 1e-5);
    // The peers of weight 0 got some and gossiped too.
    CHECK(metricOf(result.peers[1], "gosgd.sent") + metricOf(result.peers[2], "gosgd.sent") > 0);
  }
}
}  // namespace
}  // namespace gossamer::algorithms
