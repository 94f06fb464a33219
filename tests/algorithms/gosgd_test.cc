// gosgd (algorithms/gosgd.h): the conserved mass, consensus with learning rate 0, training, and
// the acknowledged transfers: the mass ledger under message loss, crashes, a graceful leave and a
// late join, and no half-merged model.
#include "algorithms/gosgd.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <doctest/doctest.h>

#include "engine/builtin.h"
#include "net/inproc/inproc_transport.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using test::Ledgers;
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

// `peers` peers gossiping with p = 0.5 and learning rate 0 from distinct initial models (the
// push-sum oracle: sum alpha_i w_i stays the initial average), steps slow enough for the acks.
engine::runtime::ClusterConfig gossipCluster(std::size_t peers, std::uint64_t steps) {
  auto config = test::algorithmCluster("gosgd", peers, steps, 0.0, {{"p", "0.5"}});
  config.peer.training.minStepTime = 1ms;
  config.peer.training.initialParams = test::distinctParams;
  return config;
}

double metric(const engine::runtime::PeerResult& r, const std::string& name) {
  const auto it = r.metrics.find(name);
  return it == r.metrics.end() ? 0.0 : it->second;
}

// sum_i alpha_i w_i over the peers in `which`, from their final models and alpha metrics.
std::vector<float> massOf(const engine::runtime::ClusterResult& result,
                          const std::vector<std::size_t>& which) {
  std::vector<double> mass(result.finals[0].params.size(), 0.0);
  for (std::size_t i : which) {
    const double alpha = metric(result.peers[i], "gosgd.alpha");
    for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += alpha * result.finals[i].params[k];
  }
  return std::vector<float>(mass.begin(), mass.end());
}

TEST_CASE(
    "gosgd: with learning rate 0 the weights sum to 1 and sum alpha_i w_i is the initial average") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config = test::algorithmCluster("gosgd", peers, 400, 0.0, {{"p", "0.5"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.finals.size() == peers);
  const std::size_t n = result.finals[0].params.size();
  double alphaSum = 0;
  std::vector<double> mass(n, 0.0);
  for (std::size_t i = 0; i < peers; ++i) {
    const double alpha = result.peers[i].metrics.at("gosgd.alpha");
    alphaSum += alpha;
    for (std::size_t k = 0; k < n; ++k) mass[k] += alpha * result.finals[i].params[k];
  }
  // Every message was merged by finish(): nothing is in flight, so the invariants are exact.
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-12));
  const std::vector<float> oracle = test::averageOfDistinct(peers, n);
  CHECK(test::maxAbsDiff(std::vector<float>(mass.begin(), mass.end()), oracle) < 1e-5);
}

TEST_CASE("gosgd: with learning rate 0 and slow enough steps every peer reaches the average") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config = test::algorithmCluster("gosgd", peers, 300, 0.0, {{"p", "1"}});
  config.peer.training.minStepTime = 1ms;  // gossip must keep up with the steps
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-3);
  CHECK(result.consensus.distance < 1e-4);
}

TEST_CASE("gosgd: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("gosgd", 4, 300, 0.1, {{"p", "0.2"}});
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.85);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 300);
    CHECK(p.bytesSent > 0);
    CHECK(p.metrics.at("gosgd.sent") > 0);
  }
}

TEST_CASE("gosgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  auto config = test::algorithmCluster("gosgd", 4, 1500, 0.05, {{"p", "0.5"}});
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.minStepTime = 1ms;  // gossip must keep up with the steps
  config.peer.training.batch = 64;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double error = test::relativeError(test::meanOf(result.finals), optimum);
  INFO("relative distance of the average model to the optimum: " << error);
  CHECK(error < 0.05);
  for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.1);
}

TEST_CASE("gosgd: options are validated") {
  CHECK_THROWS_WITH_AS(test::registry().algorithms.get("gosgd").make({{"p", "0"}}),
                       doctest::Contains("gosgd.p must be in (0, 1]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(test::registry().algorithms.get("gosgd").make({{"retransmit", "0"}}),
                       doctest::Contains("gosgd.retransmit must be in (0, 1]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(test::registry().algorithms.get("gosgd").make({{"q", "0.1"}}),
                       doctest::Contains("unknown option 'q'"), gossamer::Error);
  CHECK_THROWS_WITH_AS(
      test::registry().algorithms.get("gosgd").make({{"max_inflight_bytes", "-1"}}),
      doctest::Contains("gosgd.max_inflight_bytes must be >= 0"), gossamer::Error);
  CHECK(test::registry().algorithms.get("gosgd").make({{"max_inflight_bytes", "8000000"}}) !=
        nullptr);
}

// The bound on bytes in flight, driven by a fake clock: 2 x (windowed maximum delivery rate) x
// (windowed minimum ack round trip), at least one transfer (up to 4 small ones in 1 MiB), at most
// the cap; 4 transfers before any sample.
TEST_CASE("gosgd: the bound on bytes in flight is twice the estimated bandwidth-delay product") {
  const engine::Clock::time_point t0{};
  const auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  const std::size_t mb = 1'000'000;

  SUBCASE("before the first ack: 4 transfers; one transfer always fits") {
    InflightBound bound;
    CHECK(bound.limit(mb) == 4 * mb);
    CHECK(bound.allows(3 * mb, mb));
    CHECK_FALSE(bound.allows(4 * mb, mb));
    CHECK(bound.allows(0, 10 * InflightBound::kCapBytes));
  }
  SUBCASE("a fixed bound, and its floor of one transfer") {
    InflightBound fixed(1000);
    CHECK(fixed.limit(400) == 1000);
    CHECK(fixed.allows(400, 400));
    CHECK_FALSE(fixed.allows(800, 400));
    InflightBound tiny(10);
    CHECK(tiny.limit(400) == 400);
    CHECK(tiny.allows(0, 400));
    CHECK_FALSE(tiny.allows(400, 400));
    tiny.sent(1, 400, at(0));  // acks change nothing of a fixed bound
    tiny.acked(1, at(1), false);
    CHECK(tiny.limit(400) == 400);
  }
  SUBCASE("rate and round trip from the acks") {
    InflightBound bound;
    // One 1 MB transfer acknowledged after 100 ms: 10 MB/s, 100 ms: 2 x 1 MB.
    bound.sent(1, mb, at(0));
    bound.acked(1, at(100), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(10e6));
    CHECK(bound.limit(mb) == 2 * mb);
    // Two at once, both acknowledged after 100 ms: the second saw 2 MB delivered in its 100 ms
    // (20 MB/s): twice the rate, twice the bound.
    bound.sent(2, mb, at(1000));
    bound.sent(3, mb, at(1000));
    bound.acked(2, at(1100), false);
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(10e6));
    bound.acked(3, at(1100), false);
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(20e6));
    CHECK(bound.limit(mb) == 4 * mb);
    // A transfer whose ack took longer (queued, or waiting for the receiver's step boundary): the
    // minimum round trip and the maximum rate stay, so neither lowers nor inflates the bound.
    bound.sent(4, mb, at(2000));
    bound.acked(4, at(2400), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(20e6));
    CHECK(bound.limit(mb) == 4 * mb);
    // The ack of a resent transfer matches no single send: no sample (Karn's rule).
    const double rate = bound.rateBytesPerSecond();
    bound.sent(5, mb, at(3000));
    bound.acked(5, at(3001), true);
    CHECK(bound.rateBytesPerSecond() == rate);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    // An ack for a transfer that is unknown or forgotten is ignored.
    bound.sent(6, mb, at(3000));
    bound.forget(6);
    bound.acked(6, at(3001), false);
    bound.acked(99, at(3001), false);
    CHECK(bound.rateBytesPerSecond() == rate);
    // Past the 10 s window both are renewed by the next sample: the path got longer and slower.
    bound.sent(7, mb, at(20000));
    bound.acked(7, at(20250), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.25));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(4e6));
    CHECK(bound.limit(mb) == 2 * mb);
  }
  SUBCASE("at least one transfer, at most the cap") {
    InflightBound small;
    small.sent(1, 10, at(0));
    small.acked(1, at(1), false);  // 10 B in 1 ms: 2 x 10 kB/s x 1 ms = 20 B
    CHECK(small.limit(mb) == mb);  // floor: one transfer
    // Small transfers: as many as fit in 1 MiB, at most 4, whatever the estimate says.
    CHECK(small.limit(300'000) == 3 * 300'000);
    CHECK(small.limit(100'000) == 4 * 100'000);
    CHECK(small.limit(600'000) == 600'000);
    InflightBound fast;
    fast.sent(1, 100 * mb, at(0));
    fast.acked(1, at(1000), false);  // 100 MB/s x 1 s x 2 = 200 MB: under the cap
    CHECK(fast.limit(mb) == 200 * mb);
    fast.sent(2, 100 * mb, at(2000));
    fast.sent(3, 100 * mb, at(2000));
    fast.acked(2, at(3000), false);
    fast.acked(3, at(3000), false);  // 200 MB/s x 1 s x 2 = 400 MB: over the cap
    CHECK(fast.limit(mb) == InflightBound::kCapBytes);
    CHECK(fast.limit(2 * InflightBound::kCapBytes) == 2 * InflightBound::kCapBytes);
  }
}

// max_inflight_bytes below one model: the floor of one transfer in flight, and the draws that
// find one in flight are skipped. The mass invariants do not depend on how many are in flight.
TEST_CASE("gosgd: with room for one transfer in flight the others are skipped and the mass holds") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config =
      test::algorithmCluster("gosgd", peers, 300, 0.0, {{"p", "1"}, {"max_inflight_bytes", "1"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.finals.size() == peers);
  const std::size_t n = result.finals[0].params.size();
  double alphaSum = 0, throttled = 0;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < peers; ++i) {
    const auto& p = result.peers[i];
    CHECK(metric(p, "gosgd.inflight_limit_bytes") == 4.0 * static_cast<double>(n));
    CHECK(metric(p, "gosgd.inflight_peak_bytes") == 4.0 * static_cast<double>(n));
    CHECK(metric(p, "gosgd.sent") > 0);
    throttled += metric(p, "gosgd.throttled");
    alphaSum += metric(p, "gosgd.alpha");
    all.push_back(i);
  }
  CHECK(throttled > 0);  // p = 1: a draw every step, while an ack takes a step or more
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(test::maxAbsDiff(massOf(result, all), test::averageOfDistinct(peers, n)) < 1e-5);
}

// The estimate (the default): measured from the acks, and never below one transfer.
TEST_CASE("gosgd: the bound on bytes in flight is estimated from the acks") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("gosgd", 4, 300, 0.1, {{"p", "0.5"}});
  config.peer.training.minStepTime = 1ms;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double transfer = 4.0 * static_cast<double>(result.finals[0].params.size());
  for (const auto& p : result.peers) {
    CHECK(metric(p, "gosgd.ack_rtt_ms") > 0);
    CHECK(metric(p, "gosgd.ack_rate_mbps") > 0);
    CHECK(metric(p, "gosgd.inflight_limit_bytes") >= transfer);
    CHECK(metric(p, "gosgd.inflight_limit_bytes") <= InflightBound::kCapBytes);
    CHECK(metric(p, "gosgd.inflight_peak_bytes") >= transfer);
  }
  CHECK(result.consensus.accuracy > 0.9);
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
    CHECK(metric(result.peers[i], "gosgd.escrow") == 0);  // finish() settled every transfer
    CHECK(metric(result.peers[i], "gosgd.unsettled") == 0);
    alphaSum += metric(result.peers[i], "gosgd.alpha");
    retransmits += metric(result.peers[i], "gosgd.retransmits");
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
    CHECK(metric(result.peers[id - 1], "gosgd.lost") ==
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
  const double agreed = metric(result.peers[0], "gosgd.dead_weight");
  for (std::size_t i : {1, 3}) CHECK(metric(result.peers[i], "gosgd.dead_weight") == agreed);
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
    CHECK(metric(result.peers[i], "gosgd.merged") > 0);
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
  CHECK(metric(result.peers[leaver], "gosgd.alpha") == 0);
  CHECK(metric(result.peers[leaver], "gosgd.escrow") == 0);
  CHECK(metric(result.peers[leaver], "gosgd.unsettled") == 0);
  double alphaSum = 0;
  std::vector<std::size_t> survivors;
  for (std::size_t i = 0; i < peers; ++i) {
    if (i == leaver) continue;
    INFO("peer " << i + 1);
    CHECK(result.peers[i].steps == 400);
    CHECK(metric(result.peers[i], "gosgd.lost") == 0);
    CHECK(metric(result.peers[i], "gosgd.escrow") == 0);
    alphaSum += metric(result.peers[i], "gosgd.alpha");
    survivors.push_back(i);
  }
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-9));
  // The leaver's model went with its weight: the survivors still hold the initial average.
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  CHECK(test::maxAbsDiff(massOf(result, survivors), oracle) < 1e-5);
}

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
    CHECK(metric(one.result, "gosgd.escrow") == 0);
    CHECK(metric(one.result, "gosgd.merged") > 0);
    CHECK(allFinite(one.final->params));
    const double alpha = metric(one.result, "gosgd.alpha");
    alphaSum += alpha;
    for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += alpha * one.final->params[k];
  }
  for (std::size_t i = 0; i < peers; ++i) {
    INFO("peer " << i + 1);
    CHECK(allFinite(result.finals[i].params));
    const double alpha = metric(result.peers[i], "gosgd.alpha");
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
  for (const auto& one : run.late) CHECK(metric(one->result, "gosgd.sent") > 0);
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
      CHECK(metric(result.peers[i], "gosgd.alpha") == 0);
      CHECK(metric(result.peers[i], "gosgd.sent") == 0);
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
      CHECK(metric(result.peers[i], "gosgd.escrow") == 0);
      alphaSum += metric(result.peers[i], "gosgd.alpha");
      all.push_back(i);
    }
    // Only peer 1 started with weight (1/3) and model d_0: sum alpha_i w_i = d_0 / 3 throughout.
    CHECK(alphaSum == doctest::Approx(1.0 / 3).epsilon(1e-9));
    std::vector<float> oracle = test::distinctParams(0, result.finals[0].params.size());
    for (float& v : oracle) v /= 3;
    CHECK(test::maxAbsDiff(massOf(result, all), oracle) < 1e-5);
    // The peers of weight 0 got some and gossiped too.
    CHECK(metric(result.peers[1], "gosgd.sent") + metric(result.peers[2], "gosgd.sent") > 0);
  }
}

// Records what gosgd hands to send(): transfers carry their escrow buffer as the owner (sent in
// place, no staging copy on the CPU), the weight as the one scalar and the id and the floor as
// integers.
class RecordingContext final : public test::ForwardingContext {
 public:
  RecordingContext(engine::PeerContext& inner, std::shared_ptr<std::vector<engine::Message>> sent)
      : ForwardingContext(inner), sent_(std::move(sent)) {}
  void send(std::span<const PeerId> to, const engine::Message& message) override {
    sent_->push_back(message);
    sent_->back().payloads.clear();  // the spans are not ours to keep
    sent_->back().owner = message.owner ? std::make_shared<int>(1) : nullptr;
    if (message.owner && !message.payloads.empty())
      CHECK(static_cast<const void*>(message.payloads.front().data()) ==
            static_cast<const kernels::Buffer<float>*>(message.owner.get())->data());
    ForwardingContext::send(to, message);
  }
  using ForwardingContext::send;

 private:
  std::shared_ptr<std::vector<engine::Message>> sent_;
};

TEST_CASE("gosgd: transfers are sent from the escrow buffer with ids as integers") {
  test::Watchdog watchdog(60s);
  auto sent = std::make_shared<std::vector<engine::Message>>();
  class Recording final : public test::AlgorithmShell {
   public:
    Recording(std::unique_ptr<Gosgd> inner, std::shared_ptr<std::vector<engine::Message>> sent)
        : AlgorithmShell(std::move(inner)), sent_(std::move(sent)) {}

   protected:
    std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
      return std::make_unique<RecordingContext>(ctx, ctx.self() == 1 ? sent_ : scratch_);
    }

   private:
    std::shared_ptr<std::vector<engine::Message>> sent_;
    std::shared_ptr<std::vector<engine::Message>> scratch_ =
        std::make_shared<std::vector<engine::Message>>();
  };
  engine::Registry registry = engine::makeBuiltinRegistry();
  engine::AlgorithmSpec spec = engine::algorithmSpec<Gosgd, GosgdOptions>("recording", "mesh");
  spec.make = [sent](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<Recording>(
        std::make_unique<Gosgd>(engine::parseOptions<GosgdOptions>(values)), sent));
  };
  registry.algorithms.add("gosgd", "recording", std::move(spec));
  auto config = gossipCluster(2, 50);
  const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
  std::size_t transfers = 0, acks = 0;
  for (const engine::Message& m : *sent) {
    if (m.kind == Gosgd::kTransfer) {
      ++transfers;
      CHECK(m.owner != nullptr);
      // The header, then {weight} and {id, floor}.
      CHECK(m.scalars.size() == Gosgd::kHeaderScalars + 1);
      CHECK(m.integers.size() == Gosgd::kHeaderIntegers + 2);
    } else if (m.kind == Gosgd::kAck) {
      ++acks;
      CHECK(m.scalars.size() == Gosgd::kHeaderScalars);
      CHECK(m.integers.size() > Gosgd::kHeaderIntegers);
    }
  }
  CHECK(transfers > 0);
  CHECK(acks > 0);
  CHECK(metric(result.peers[0], "gosgd.escrow") == 0);
}

// A checkpoint keeps the peer's weight (alpha plus escrow): loadState then saveState gives it
// back; a weight outside [0, 1] is refused rather than loaded.
TEST_CASE("gosgd: saveState and loadState keep the peer's weight") {
  Gosgd gosgd(GosgdOptions{});
  engine::AlgorithmState saved;
  saved.values["alpha"] = 0.375;
  gosgd.loadState(saved);
  CHECK(gosgd.alpha() == 0.375);
  engine::AlgorithmState again;
  gosgd.saveState(again);
  CHECK(again.values.at("alpha") == 0.375);
  engine::AlgorithmState bad;
  bad.values["alpha"] = 1.5;
  CHECK_THROWS_WITH_AS(gosgd.loadState(bad), doctest::Contains("not in [0, 1]"), gossamer::Error);
  bad.values["alpha"] = NAN;
  CHECK_THROWS_WITH_AS(gosgd.loadState(bad), doctest::Contains("not in [0, 1]"), gossamer::Error);
  CHECK(gosgd.alpha() == 0.375);
  engine::AlgorithmState zero;
  zero.values["alpha"] = 0;
  gosgd.loadState(zero);
  CHECK(gosgd.alpha() == 0);
  engine::AlgorithmState zeroAgain;
  gosgd.saveState(zeroAgain);
  CHECK(zeroAgain.values.at("alpha") == 0);
}

}  // namespace
}  // namespace gossamer::algorithms
