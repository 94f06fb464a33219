// easgd and eamsgd (algorithms/easgd.h): the conserved sum of the symmetric elastic force,
// consensus with learning rate 0, the convex optimum, training, eamsgd's local steps (the local
// optimizer's momentum steps; sgd and adam refused), options, killed workers and centers, a
// center that leaves, a peer that joins, and checkpointed state.
#include "algorithms/easgd.h"

#include <atomic>
#include <thread>

#include <doctest/doctest.h>

#include "engine/train/optimizer.h"
#include "net/inproc/inproc_transport.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/easgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// Learning rate 0, and every worker keeps its own model at the end (final_center=false): every
// exchange moves delta = alpha (w_i - w~) from w_i to w~, so sum_i w_i + w~
// is conserved exactly (up to float rounding), and the fixed point where every w_i equals w~ is
// (sum_i w_i(0) + w~(0)) / (n + 1). w~(0) is the center's initial model: rank 0, the star's
// center (the smallest id).
// eamsgd runs with --optimizer nesterov (learning rate 0 all the same). With prefetch the pulled
// w~ is older (it misses the deltas pushed since the pull left), which changes nothing of the
// above: the center still adds exactly the delta the worker subtracted.
template <typename A>
void checkConservedSum(const std::string& name, std::uint64_t tau = 1, std::uint64_t prefetch = 0) {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  const std::uint64_t steps = 300;
  const ElasticSums sums = runWithLearningRateZero<A>(
      name, peers, steps, {{"tau", std::to_string(tau)}, {"prefetch", std::to_string(prefetch)}});
  const auto& result = sums.result;
  CHECK(sumDrift(sums) < 1e-4);
  CHECK(test::maxAbsDiff(sums.center, sums.fixedPoint) < 1e-4);
  for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, sums.fixedPoint) < 1e-4);
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at(name + ".exchanges") == steps / tau);
    CHECK(p.metrics.count(name + ".missed") == 0);
    CHECK(p.metrics.at(name + ".alpha") == doctest::Approx(0.9 / peers));
    if (prefetch > 0) {
      // Only the first exchange (step 0) pulls blocking; a pull for an exchange past the last
      // step never leaves.
      CHECK(p.metrics.at(name + ".prefetches") == steps / tau - 1);
    } else {
      CHECK(p.metrics.count(name + ".prefetches") == 0);
    }
  }
  // The center applied every delta: one per exchange of every worker, its own included.
  double exchanges = 0;
  for (const auto& p : result.peers) exchanges += p.metrics.at(name + ".exchanges");
  CHECK(result.peers[0].metrics.at(name + ".center_updates") == exchanges);
}

TEST_CASE("easgd: with learning rate 0 sum_i w_i + w~ is conserved and all meet at its mean") {
  checkConservedSum<Easgd>("easgd");
}

TEST_CASE("eamsgd: with learning rate 0 sum_i w_i + w~ is conserved and all meet at its mean") {
  checkConservedSum<Eamsgd>("eamsgd");
}

TEST_CASE("easgd: with prefetched pulls sum_i w_i + w~ is conserved and all meet at its mean") {
  SUBCASE("tau 2, prefetch 1") { checkConservedSum<Easgd>("easgd", 2, 1); }
  SUBCASE("tau 4, prefetch 3") { checkConservedSum<Easgd>("easgd", 4, 3); }
}

TEST_CASE("eamsgd: with prefetched pulls sum_i w_i + w~ is conserved and all meet at its mean") {
  checkConservedSum<Eamsgd>("eamsgd", 2, 1);
}

// The workers end with the center variable (final_center): one model, up to the last deltas that
// were still on their way to the center when a worker pulled it.
TEST_CASE("easgd: four peers learn the synthetic task and end with the center variable") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkLearnsAsync("easgd", {{"tau", "4"}});
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at("easgd.exchanges") == 300 / 4);  // tau = 4: steps 0, 4, ..., 296
    CHECK(p.metrics.at("easgd.final_center") == 1);
  }
  CHECK(result.peers[0].metrics.at("easgd.center_updates") == 4 * 300 / 4);
  for (const auto& s : result.finals)
    CHECK(test::maxAbsDiff(s.params, result.finals[0].params) < 0.05);
}

// The pull leaves prefetch steps ahead and its reply is collected at the exchange.
TEST_CASE("easgd: four peers learn the synthetic task with prefetched pulls") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkLearnsAsync("easgd", {{"tau", "4"}, {"prefetch", "2"}});
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at("easgd.exchanges") == 300 / 4);
    CHECK(p.metrics.at("easgd.prefetches") == 300 / 4 - 1);
    CHECK(p.metrics.at("easgd.final_center") == 1);
  }
  CHECK(result.peers[0].metrics.at("easgd.center_updates") == 4 * 300 / 4);
}

TEST_CASE("eamsgd: four peers learn the synthetic task") {
  test::Watchdog watchdog(120s);
  const auto result =
      test::checkLearnsAsync("eamsgd", {}, 0.02, engine::train::OptimizerKind::kNesterov);
  for (const auto& p : result.peers) CHECK(p.metrics.at("eamsgd.exchanges") == 300 / 8 + 1);
}

// A strongly convex problem, iid shards: with the symmetric force and equal tau, the fixed point
// has sum_i grad f_i(w_i) = 0, so the workers' average settles at the optimum of the whole
// training set; each worker sits between it and its own shard's optimum, and w~ follows them.
template <typename A>
void checkConvexOptimum(
    const std::string& name, double lr,
    engine::train::OptimizerKind optimizer = engine::train::OptimizerKind::kSgd,
    std::uint64_t prefetch = 0) {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  ProbedRegistry<A> probed(name);
  auto config = test::algorithmCluster("probe", 4, 1500, lr,
                                       {{"tau", "2"}, {"prefetch", std::to_string(prefetch)}});
  config.peer.training.optimizer.kind = optimizer;
  config.peer.training.optimizer.momentum = 0.9f;
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.minStepTime = 1ms;  // exchanges must keep up with the steps
  config.peer.training.batch = 64;
  // The rate decays to 0 (cosine): what is left at the end is the fixed point, not the noise of
  // the last steps' gradients and of how the workers' exchanges happened to interleave.
  config.peer.training.schedule.kind = engine::train::LrSchedule::kCosine;
  const auto result = engine::runtime::runLocalCluster(config, probed.registry, test::smallData());
  const double error = test::relativeError(test::meanOf(result.finals), optimum);
  const double centerError = test::relativeError(probed.center(), optimum);
  INFO("relative distance to the optimum: average model " << error << ", center " << centerError);
  CHECK(error < 0.03);  // about 0.005 measured, 0.011 at worst on a loaded machine
  CHECK(centerError < 0.1);  // an exponential average of single workers' models
  for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.1);
}

TEST_CASE("easgd: on a strongly convex problem the workers and the center reach the optimum") {
  checkConvexOptimum<Easgd>("easgd", 0.1);
}

// The staler w~ of a prefetched pull moves the fixed point nowhere: at the fixed point w~ does
// not change, so an older copy of it is the same.
TEST_CASE("easgd: with prefetched pulls the workers and the center reach the convex optimum") {
  checkConvexOptimum<Easgd>("easgd", 0.1, engine::train::OptimizerKind::kSgd, 1);
}

TEST_CASE("eamsgd: on a strongly convex problem the workers and the center reach the optimum") {
  // Nesterov momentum 0.9: an effective rate of 0.1.
  checkConvexOptimum<Eamsgd>("eamsgd", 0.01, engine::train::OptimizerKind::kNesterov);
}

// One peer, no exchange after step 0 (where w = w~ makes delta exactly 0): eamsgd's steps must be
// the local optimizer's steps, Nesterov or heavy-ball momentum as --optimizer says, with its
// --momentum.
TEST_CASE("eamsgd: the local steps are the local optimizer's momentum steps") {
  test::Watchdog watchdog(60s);
  engine::train::OptimizerKind kind{};
  SUBCASE("--optimizer nesterov (the paper's)") { kind = engine::train::OptimizerKind::kNesterov; }
  SUBCASE("--optimizer momentum") { kind = engine::train::OptimizerKind::kMomentum; }
  auto eamsgd = test::algorithmCluster("eamsgd", 1, 100, 0.02,
                                       {{"tau", "1000000"}, {"final_center", "false"}});
  eamsgd.peer.training.optimizer.kind = kind;
  eamsgd.peer.training.optimizer.momentum = 0.8f;
  // gosgd on one peer has nobody to gossip with: it is the plain local optimizer.
  auto local = test::algorithmCluster("gosgd", 1, 100, 0.02);
  local.peer.training.optimizer = eamsgd.peer.training.optimizer;
  const auto a = engine::runtime::runLocalCluster(eamsgd, test::registry(), test::smallData());
  const auto b = engine::runtime::runLocalCluster(local, test::registry(), test::smallData());
  CHECK(test::maxAbsDiff(a.finals[0].params, b.finals[0].params) < 1e-6);
  CHECK(a.peers[0].metrics.at("eamsgd.exchanges") == 1);
  // The momentum entered: another coefficient ends elsewhere.
  local.peer.training.optimizer.momentum = 0.9f;
  const auto c = engine::runtime::runLocalCluster(local, test::registry(), test::smallData());
  CHECK(test::maxAbsDiff(a.finals[0].params, c.finals[0].params) > 1e-4);
}

TEST_CASE("eamsgd: --optimizer sgd or adam is refused with a message naming the fix") {
  test::Watchdog watchdog(60s);
  for (const auto kind :
       {engine::train::OptimizerKind::kSgd, engine::train::OptimizerKind::kAdam}) {
    CAPTURE(engine::train::optimizerName(kind));
    auto config = test::algorithmCluster("eamsgd", 2, 10);
    config.peer.training.optimizer.kind = kind;
    config.peer.training.finishTimeout = 500ms;
    CHECK_THROWS_WITH_AS(engine::runtime::runLocalCluster(config, test::registry(),
                                                          test::smallData()),
                         doctest::Contains("--optimizer nesterov"), gossamer::Error);
  }
}

TEST_CASE("easgd: options are validated") {
  const auto& easgd = test::registry().algorithms.get("easgd");
  CHECK_THROWS_WITH_AS(easgd.make({{"tau", "0"}}),
                       doctest::Contains("easgd.tau must be at least 1"), gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"alpha", "1"}}), doctest::Contains("easgd.alpha must be in"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"alpha", "-0.1"}}), doctest::Contains("easgd.alpha"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"timeout_ms", "-1"}}), doctest::Contains("easgd.timeout_ms"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"momentum", "0.9"}}), doctest::Contains("unknown option"),
                       gossamer::Error);
  // The pull leaves at most tau - 1 steps ahead: one pull in flight at a time.
  CHECK_THROWS_WITH_AS(easgd.make({{"tau", "4"}, {"prefetch", "4"}}),
                       doctest::Contains("easgd.prefetch must be below easgd.tau (4), not 4"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"prefetch", "1"}, {"tau", "1"}}),
                       doctest::Contains("easgd.prefetch"), gossamer::Error);
  CHECK_THROWS_WITH_AS(easgd.make({{"prefetch", "-1"}}), doctest::Contains("prefetch"),
                       gossamer::Error);
  CHECK(easgd.make({{"tau", "4"}, {"prefetch", "3"}}) != nullptr);
  CHECK(easgd.defaultTopology == "star");
  const auto& eamsgd = test::registry().algorithms.get("eamsgd");
  CHECK_THROWS_WITH_AS(eamsgd.make({{"tau", "0"}}), doctest::Contains("eamsgd.tau"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(eamsgd.make({{"tau", "2"}, {"prefetch", "2"}}),
                       doctest::Contains("eamsgd.prefetch must be below eamsgd.tau"),
                       gossamer::Error);
  // The momentum is the local optimizer's (--momentum): eamsgd has no option of its own for it.
  CHECK_THROWS_WITH_AS(eamsgd.make({{"momentum", "0.9"}}), doctest::Contains("unknown option"),
                       gossamer::Error);
  CHECK(eamsgd.make({{"alpha", "0.1"}, {"tau", "8"}}) != nullptr);
}

// The center (peer 1, the smallest id) is killed after 100 steps. Until the failure detector
// removes it, the workers' pulls time out and are counted as missed; then the next smallest id
// (peer 2) rebuilds the center from its own model, and the survivors finish every step and still
// learn the task.
// With prefetch, the pulls in flight to the dead center are never answered: each is waited for up
// to the deadline at its exchange (late, then missed).
TEST_CASE("easgd: when the center is killed a new center is chosen and the workers still learn") {
  test::Watchdog watchdog(120s);
  std::string prefetch;
  SUBCASE("blocking pulls") { prefetch = "0"; }
  SUBCASE("prefetched pulls") { prefetch = "1"; }
  auto config = test::algorithmCluster(
      "easgd", 4, 500, 0.05, {{"tau", "2"}, {"timeout_ms", "100"}, {"prefetch", prefetch}});
  config.peer.training.minStepTime = 2ms;  // the kill comes mid-run
  test::killPeerAt(config, 0, 100);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[0].steps < 500);
  for (std::size_t i = 1; i < 4; ++i) {
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(p.steps == 500);
    CHECK(p.metrics.at("easgd.missed") > 0);
    CHECK(p.metrics.at("easgd.exchanges") > 100);
    if (prefetch != "0") CHECK(p.metrics.at("easgd.late") > 0);
  }
  CHECK(result.peers[1].metrics.at("easgd.center_restarts") == 1);
  CHECK(result.peers[1].metrics.at("easgd.center_updates") > 0);
  for (std::size_t i : {2, 3}) CHECK(result.peers[i].metrics.count("easgd.center_updates") == 0);
  CHECK(test::survivorsConsensus(result, 0).accuracy > 0.9);
}

// A worker (peer 3) killed mid-run: nobody waits for it (exchanges only involve a worker and the
// center), so the others finish without a single missed pull.
TEST_CASE("easgd: a killed worker does not stall the others") {
  test::Watchdog watchdog(120s);
  auto config =
      test::algorithmCluster("easgd", 4, 300, 0.1, {{"tau", "4"}, {"timeout_ms", "1000"}});
  config.peer.training.minStepTime = 2ms;  // the kill comes mid-run
  test::killPeerAt(config, 2, 60);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[2].steps < 300);
  for (std::size_t i : {0, 1, 3}) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == 300);
    CHECK(result.peers[i].metrics.count("easgd.missed") == 0);
    CHECK(result.peers[i].metrics.at("easgd.exchanges") == 300 / 4);
  }
  CHECK(result.peers[0].metrics.count("easgd.center_restarts") == 0);
}

// The center leaves on purpose after 100 steps: leave() hands w~ to the next candidate (peer 2),
// which serves it from then on without rebuilding it.
TEST_CASE("easgd: a center that leaves hands the center variable over to the next one") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("easgd", 4, 400, 0.1, {{"timeout_ms", "1000"}});
  config.peer.training.minStepTime = 2ms;
  std::thread leaver;
  config.onStart = [&](std::vector<engine::runtime::Peer*>& started) {
    leaver = std::thread([center = started[0]] {
      while (center->status().step < 100) std::this_thread::sleep_for(1ms);
      center->requestLeave();
    });
  };
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  leaver.join();
  CHECK(result.peers[0].stopped);
  CHECK(result.peers[0].metrics.at("easgd.handovers") == 1);
  CHECK(result.peers[1].metrics.at("easgd.handovers_received") == 1);
  CHECK(result.peers[1].metrics.count("easgd.center_restarts") == 0);
  CHECK(result.peers[1].metrics.at("easgd.center_updates") > 0);
  for (std::size_t i = 1; i < 4; ++i) CHECK(result.peers[i].steps == 400);
  CHECK(test::survivorsConsensus(result, 0).accuracy > 0.9);
}

// A fifth peer joins a running 4-peer cluster: join() pulls w~ from the center as its model and
// takes the center peer's step, then it trains and exchanges like the others.
TEST_CASE("easgd: a peer joining mid-run starts from the center variable") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("easgd", 4, 400, 0.1, {{"timeout_ms", "1000"}});
  config.peer.training.minStepTime = 2ms;
  config.peer.network.transportMaker = test::sharedInprocNetwork();
  for (int i = 0; i < 32; ++i) config.peer.network.secret.push_back(static_cast<std::byte>(i + 7));
  std::thread joiner;
  engine::runtime::PeerResult joined;
  std::exception_ptr error;
  config.onStart = [&](std::vector<engine::runtime::Peer*>& started) {
    joiner = std::thread([&, seed = started[0]->endpoint(), center = started[0]] {
      try {
        while (center->status().step < 100) std::this_thread::sleep_for(1ms);
        engine::runtime::PeerConfig c = config.peer;
        c.network.peerId = 5;
        c.network.seeds = {seed};
        c.training.minPeers = 4;
        c.training.finalLocalEval = false;
        engine::runtime::Peer peer(c, test::registry(), test::smallData());
        joined = peer.run();
      } catch (...) {
        error = std::current_exception();
      }
    });
  };
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  joiner.join();
  REQUIRE_FALSE(error);
  CHECK(joined.metrics.at("easgd.joined_from_center") == 1);
  CHECK(joined.metrics.at("easgd.exchanges") > 0);
  CHECK(joined.steps == 400);
  CHECK(result.consensus.accuracy > 0.9);
}

// The center variable survives a checkpoint: loadState then saveState gives back the same tensor,
// and a peer that does not hold the center saves none. eamsgd's velocity is the local
// optimizer's, checkpointed by the runtime with it: a "velocity" tensor of an older checkpoint is
// not the algorithm's any more.
TEST_CASE("eamsgd: saveState and loadState keep the center variable") {
  const engine::AlgorithmState saved{
      .tensors = {{"center", {1.0f, -2.0f, 3.5f}}, {"velocity", {0.25f, 0.5f, -1.0f}}}};
  Eamsgd eamsgd(EamsgdOptions{});
  eamsgd.loadState(saved);
  REQUIRE(eamsgd.elastic().center().has_value());
  CHECK(*eamsgd.elastic().center() == saved.tensors.at("center"));
  engine::AlgorithmState again;
  eamsgd.saveState(again);
  CHECK(again.tensors.size() == 1);
  CHECK(again.tensors.at("center") == saved.tensors.at("center"));
  Easgd worker(EasgdOptions{});
  engine::AlgorithmState none;
  worker.saveState(none);
  CHECK(none.tensors.empty());
}

}  // namespace
}  // namespace gossamer::algorithms
