// gosgd's acknowledged transfers under failures: the mass ledger under message loss and crashes
// (live mass + lost mass = 1, the survivors agree on the dead peer's weight), no half-merged
// model, and a graceful leave that hands over the whole weight.
#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/gosgd.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using test::gossipCluster;
using test::Ledgers;
using test::massOf;
using test::metricOf;
using test::ShellRegistry;

// Kills peer kills[k].first (as kill -9 would) once the fastest peer has made kills[k].second
// steps (in increasing order), from the cluster's monitoring thread (onEval, every ~50 ms: a
// dead peer's step count stops, so the slowest peer's would not do); replaces onStart, onEval,
// evalEvery and evalInterval.
void killPeersAt(engine::runtime::ClusterConfig& config,
                 std::vector<std::pair<std::size_t, std::uint64_t>> kills) {
  auto peers = std::make_shared<std::vector<engine::runtime::Peer*>>();
  auto next = std::make_shared<std::size_t>(0);
  config.onStart = [peers](std::vector<engine::runtime::Peer*>& all) { *peers = all; };
  config.evalEvery = 0;
  config.evalInterval = 20ms;
  config.evalSamples = 10;
  config.onEval = [peers, next, kills](const engine::runtime::EvalPoint& point) {
    while (*next < kills.size() && point.maxStep >= kills[*next].second)
      (*peers)[kills[(*next)++].first]->kill();
  };
}

TEST_CASE(
    "gosgd: under 10% message loss every transfer is acknowledged: the alphas sum to 1 and sum "
    "alpha_i w_i is the initial average") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config = gossipCluster(peers, 300);
  config.peer.training.algorithmOptions["retransmit"] = "0.01";  // 100 ms
  ShellRegistry lossy(0.1);
  const auto result = engine::runtime::runLocalCluster(config, lossy.registry, test::smallData());
  REQUIRE(result.finals.size() == peers);
  double alphaSum = 0, retransmits = 0;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < peers; ++i) {
    INFO("peer " << i + 1);
    CHECK(result.peers[i].steps == 300);
    CHECK(metricOf(result.peers[i], "gosgd.escrow") == 0);  // finish() settled every transfer
    CHECK(metricOf(result.peers[i], "gosgd.unsettled") == 0);
    alphaSum += metricOf(result.peers[i], "gosgd.alpha");
    retransmits += metricOf(result.peers[i], "gosgd.retransmits");
    all.push_back(i);
  }
  CHECK(retransmits > 0);  // messages were lost, and the transfers were sent again
  // The push-sum invariants hold exactly: lost frames were resent, duplicates merged once.
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-9));
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  CHECK(test::maxAbsDiff(massOf(result, all), oracle) < 1e-5);
}

TEST_CASE("gosgd: a killed peer's mass is accounted as lost: live mass + lost mass = 1") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4, dead = 2;
  ShellRegistry recording;
  auto config = gossipCluster(peers, 400);
  test::killPeerAt(config, dead, 100);
  const auto result =
      engine::runtime::runLocalCluster(config, recording.registry, test::smallData());
  const Ledgers ledgers = recording.ledgers();
  REQUIRE(ledgers.size() == peers);
  const PeerId d = dead + 1;  // local cluster ids are 1..N
  const Gosgd::Ledger& deadLedger = ledgers.at(d);
  double live = 0, lostWithDead = 0, inDoubt = 0;
  for (const auto& [id, l] : ledgers) {
    if (id == d) continue;
    INFO("peer " << id);
    CHECK(result.peers[id - 1].steps == 400);
    double escrow = 0;
    for (const auto& [to, w] : l.escrowTo) escrow += w;
    CHECK(escrow == 0);  // everything toward the live peers was acknowledged
    live += l.alpha + escrow;
    for (const auto& [to, w] : l.lostTo) {
      CHECK(to == d);  // only the escrow toward the dead peer is lost
      lostWithDead += w;
    }
    CHECK(metricOf(result.peers[id - 1], "gosgd.lost") ==
          doctest::Approx(l.lostTo.count(d) ? l.lostTo.at(d) : 0.0));
    // Transfers merged on one side whose ack the other side never got: counted by both (once
    // in the merger's alpha, once in the sender's escrow or lost weight); only an observer of
    // both sides can tell.
    const auto get = [](const std::map<PeerId, double>& m, PeerId k) {
      const auto it = m.find(k);
      return it == m.end() ? 0.0 : it->second;
    };
    inDoubt += get(deadLedger.mergedFrom, id) - get(l.ackedBy, d);
    inDoubt += get(l.mergedFrom, d) - get(deadLedger.ackedBy, id);
  }
  double deadEscrow = 0;
  for (const auto& [to, w] : deadLedger.escrowTo) deadEscrow += w;
  // The mass lost with the dead peer: its alpha and escrow at death, and the escrow toward it.
  const double lost = deadLedger.alpha + deadEscrow + lostWithDead - inDoubt;
  INFO("live " << live << ", lost " << lost << " (alpha at death " << deadLedger.alpha
               << ", its escrow " << deadEscrow << ", escrow toward it " << lostWithDead
               << ", in doubt " << inDoubt << ")");
  CHECK(inDoubt >= 0);
  CHECK(live > 0);
  CHECK(deadLedger.alpha > 0);
  CHECK(live + lost == doctest::Approx(1.0).epsilon(1e-9));
  // The survivors agree on the weight the dead peer held: the report of one of the last messages
  // it sent (the latest any of them received; the very last may have died with it).
  const double agreed = metricOf(result.peers[0], "gosgd.dead_weight");
  for (std::size_t i : {1, 3}) CHECK(metricOf(result.peers[i], "gosgd.dead_weight") == agreed);
  const std::vector<double> reports = recording.reportsSent(d);
  REQUIRE(reports.size() > 16);
  INFO("agreed " << agreed << ", its last report " << reports.back());
  CHECK(agreed > 0);
  CHECK(std::find(reports.end() - 16, reports.end(), agreed) != reports.end());
}

TEST_CASE(
    "gosgd: no half-merged model: with constant initial models, every final model is constant "
    "after kills and 10% message loss") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 5;
  auto config = gossipCluster(peers, 400);
  // Peer i's model is (i + 1) x ones: any convex combination of complete models is constant;
  // a model merged in part (some elements from a frame, the rest not) would not be.
  config.peer.training.initialParams = [](std::size_t rank, std::size_t count) {
    return std::vector<float>(count, static_cast<float>(rank + 1));
  };
  config.peer.training.algorithmOptions["retransmit"] = "0.01";  // 100 ms
  killPeersAt(config, {{1, 80}, {3, 200}});
  ShellRegistry lossy(0.1);
  const auto result = engine::runtime::runLocalCluster(config, lossy.registry, test::smallData());
  for (std::size_t i : {0, 2, 4}) {
    INFO("peer " << i + 1);
    const std::vector<float>& w = result.finals[i].params;
    const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
    CHECK(*hi - *lo <= 1e-5f * *hi);
    CHECK(*lo >= 1.0f);
    CHECK(*hi <= static_cast<float>(peers));
    CHECK(metricOf(result.peers[i], "gosgd.merged") > 0);
  }
}

TEST_CASE("gosgd: a peer that leaves hands over its whole weight: the others' alphas sum to 1") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4, leaver = 1;
  auto config = gossipCluster(peers, 400);
  auto all = std::make_shared<std::vector<engine::runtime::Peer*>>();
  config.onStart = [all](std::vector<engine::runtime::Peer*>& p) { *all = p; };
  config.evalEvery = 100;
  config.evalSamples = 10;
  config.onEval = [all](const engine::runtime::EvalPoint& point) {
    if (point.minStep >= 100 && point.minStep < 200) (*all)[leaver]->requestLeave();
  };
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[leaver].stopped);
  CHECK(result.peers[leaver].steps < 400);
  CHECK(metricOf(result.peers[leaver], "gosgd.alpha") == 0);
  CHECK(metricOf(result.peers[leaver], "gosgd.escrow") == 0);
  CHECK(metricOf(result.peers[leaver], "gosgd.unsettled") == 0);
  double alphaSum = 0;
  std::vector<std::size_t> survivors;
  for (std::size_t i = 0; i < peers; ++i) {
    if (i == leaver) continue;
    INFO("peer " << i + 1);
    CHECK(result.peers[i].steps == 400);
    CHECK(metricOf(result.peers[i], "gosgd.lost") == 0);
    CHECK(metricOf(result.peers[i], "gosgd.escrow") == 0);
    alphaSum += metricOf(result.peers[i], "gosgd.alpha");
    survivors.push_back(i);
  }
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-9));
  // The leaver's model went with its weight: the survivors still hold the initial average.
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  CHECK(test::maxAbsDiff(massOf(result, survivors), oracle) < 1e-5);
}
}  // namespace
}  // namespace gossamer::algorithms
