// diloco (algorithms/diloco.h): local-sgd as its special case, the outer step against closed forms
// on distinct initial models with inner learning rate 0, the convex optimum, training, options,
// the checkpoint state, a peer killed mid-run and a late joiner that receives theta and m; and
// streaming-diloco: diloco as its special case, its fragment schedule and mixing against closed
// forms, the same convergence, training, options, kill and join checks.
#include "algorithms/diloco.h"
#include "algorithms/streaming_diloco.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include <doctest/doctest.h>

#include "engine/builtin.h"
#include "engine/runtime/peer.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/algorithms/periodic_averaging_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

double metric(const engine::runtime::PeerResult& result, const std::string& name) {
  const auto it = result.metrics.find(name);
  return it == result.metrics.end() ? -1 : it->second;
}

TEST_CASE("diloco: with outer lr 1 and outer momentum 0 it is local-sgd with tau = H") {
  test::Watchdog watchdog(120s);
  // 203 steps: 25 rounds of 8, and the last one in finish().
  auto run = [](const std::string& algorithm, engine::OptionValues options) {
    auto config = test::algorithmCluster(algorithm, 4, 203, 0.05, std::move(options));
    config.peer.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
    return engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  };
  const auto local = run("local-sgd", {{"tau", "8"}});
  const auto diloco = run("diloco", {{"h", "8"}, {"outer-lr", "1"}, {"outer-momentum", "0"}});
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(metric(diloco.peers[i], "diloco.rounds") == 26);
    CHECK(diloco.finals[i].params == diloco.finals[0].params);
    // theta - (theta - mean) is the mean up to float rounding, which training then carries on.
    CHECK(test::maxAbsDiff(diloco.finals[i].params, local.finals[i].params) < 1e-4);
  }
}

// The algorithms seen through a context whose run never ends (totalSteps beyond the last step):
// finish() merges streaming-diloco's rounds in flight but runs no last round and no consensus, so
// the models keep what the outer steps made of them.
class UnendingContext final : public test::ForwardingContext {
 public:
  using ForwardingContext::ForwardingContext;
  std::uint64_t totalSteps() const override { return inner_.totalSteps() + 1000; }
};
class UnendingShell final : public test::AlgorithmShell {
 public:
  using AlgorithmShell::AlgorithmShell;

 protected:
  std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
    return std::make_unique<UnendingContext>(ctx);
  }
};
template <typename A, typename O>
void addUnending(engine::Registry& r, const std::string& name) {
  engine::AlgorithmSpec spec = engine::algorithmSpec<A, O>(name + " in a shell without an end", "ring");
  spec.make = [](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(
        std::make_unique<UnendingShell>(std::make_unique<A>(engine::parseOptions<O>(values))));
  };
  r.algorithms.add(name, name + " in a test shell", std::move(spec));
}
const engine::Registry& unendingRegistry() {
  static const engine::Registry registry = [] {
    engine::Registry r = engine::makeBuiltinRegistry();
    addUnending<Diloco, DilocoOptions>(r, "diloco");
    addUnending<StreamingDiloco, StreamingDilocoOptions>(r, "streaming-diloco");
    return r;
  }();
  return registry;
}

// Inner learning rate 0 and distinct initial models x_i (test::distinctParams): every inner step
// leaves w_i where it is, so each round is the outer step alone and its result has a closed form
// per peer. Each peer's theta starts at its own x_i (its first setup), so the thetas differ and the
// rule's contraction of that difference is visible; the unending shell leaves out the consensus at
// the end, which would make them equal (`ending` keeps it).
engine::runtime::ClusterResult runOuterOnly(std::size_t peers, std::uint64_t rounds,
                                            engine::OptionValues options, bool ending = false) {
  const std::uint64_t h = std::stoull(options.at("h"));
  auto config = test::algorithmCluster("diloco", peers, rounds * h, 0.0, std::move(options));
  config.peer.training.optimizer.kind = engine::train::OptimizerKind::kAdam;
  config.peer.training.initialParams = test::distinctParams;
  return engine::runtime::runLocalCluster(config, ending ? test::registry() : unendingRegistry(),
                                          test::smallData());
}

TEST_CASE("diloco: with inner lr 0, one round of outer lr 1 and momentum 0 gives every peer the "
          "average") {
  test::Watchdog watchdog(60s);
  const std::size_t peers = 4;
  const auto result =
      runOuterOnly(peers, 1, {{"h", "3"}, {"outer-lr", "1"}, {"outer-momentum", "0"}});
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    // x_i - (x_i - mean): inputs up to 5 in magnitude, two roundings of a few ulps.
    CHECK(test::maxAbsDiff(result.finals[i].params, oracle) < 3e-6);
    CHECK(metric(result.peers[i], "diloco.rounds") == 1);
  }
}

TEST_CASE("diloco: with inner lr 0, outer lr 1/2 moves every peer half-way to the average") {
  test::Watchdog watchdog(60s);
  const std::size_t peers = 3;
  const auto result =
      runOuterOnly(peers, 1, {{"h", "2"}, {"outer-lr", "0.5"}, {"outer-momentum", "0"}});
  const std::size_t size = result.finals[0].params.size();
  const std::vector<float> mean = test::averageOfDistinct(peers, size);
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    const std::vector<float> x = test::distinctParams(i, size);
    std::vector<float> oracle(size);
    for (std::size_t k = 0; k < size; ++k) oracle[k] = 0.5f * (x[k] + mean[k]);
    CHECK(test::maxAbsDiff(result.finals[i].params, oracle) < 3e-6);
    CHECK(test::maxAbsDiff(result.finals[i].params, x) > 0.1);  // it moved
  }
  // The end of a real run: the mean of the thetas (x_i + a)/2 is a, on every peer, same bits.
  const auto ended =
      runOuterOnly(peers, 1, {{"h", "2"}, {"outer-lr", "0.5"}, {"outer-momentum", "0"}}, true);
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    CHECK(ended.finals[i].params == ended.finals[0].params);
    CHECK(test::maxAbsDiff(ended.finals[i].params, mean) < 3e-6);
    CHECK(metric(ended.peers[i], "diloco.consensus") == 1);
  }
}

// The outer steps of the rule in double, per peer, from x_i with inner lr 0: `rounds` rounds of
// Delta = theta - mean_j theta_j; m = mu m + Delta; theta -= lr (Delta + mu m) (Nesterov) or lr m.
std::vector<std::vector<double>> outerOracle(std::size_t peers, std::size_t size,
                                             std::size_t rounds, double lr, double mu,
                                             bool nesterov) {
  std::vector<std::vector<double>> theta(peers), m(peers, std::vector<double>(size, 0.0));
  for (std::size_t i = 0; i < peers; ++i) {
    const std::vector<float> x = test::distinctParams(i, size);
    theta[i].assign(x.begin(), x.end());
  }
  for (std::size_t r = 0; r < rounds; ++r) {
    std::vector<double> mean(size, 0.0);
    for (const auto& t : theta)
      for (std::size_t k = 0; k < size; ++k) mean[k] += t[k] / static_cast<double>(peers);
    for (std::size_t i = 0; i < peers; ++i) {
      for (std::size_t k = 0; k < size; ++k) {
        const double delta = theta[i][k] - mean[k];
        m[i][k] = mu * m[i][k] + delta;
        theta[i][k] -= nesterov ? lr * (delta + mu * m[i][k]) : lr * m[i][k];
      }
    }
  }
  return theta;
}

TEST_CASE("diloco: the outer Nesterov and heavy-ball steps match the rule computed by hand") {
  test::Watchdog watchdog(60s);
  const std::size_t peers = 3;
  for (const bool nesterov : {true, false}) {
    CAPTURE(nesterov);
    const auto result = runOuterOnly(peers, 3,
                                     {{"h", "2"},
                                      {"outer-lr", "0.7"},
                                      {"outer-momentum", "0.9"},
                                      {"nesterov", nesterov ? "true" : "false"}});
    const std::size_t size = result.finals[0].params.size();
    const auto oracle = outerOracle(peers, size, 3, 0.7, 0.9, nesterov);
    // Not the plain average: the momentum matters (the oracle without it is far).
    const auto withoutMomentum = outerOracle(peers, size, 3, 0.7, 0.0, nesterov);
    for (std::size_t i = 0; i < peers; ++i) {
      CAPTURE(i);
      const std::vector<float> expected(oracle[i].begin(), oracle[i].end());
      const std::vector<float> far(withoutMomentum[i].begin(), withoutMomentum[i].end());
      CHECK(test::maxAbsDiff(result.finals[i].params, expected) < 2e-5);
      CHECK(test::maxAbsDiff(result.finals[i].params, far) > 0.01);
      CHECK(metric(result.peers[i], "diloco.rounds") == 3);
      CHECK(metric(result.peers[i], "diloco.outer_momentum_norm") > 0);
    }
  }
}

TEST_CASE("diloco: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  test::checkConvexOptimum("diloco", {{"h", "4"}}, 800, 0.05, 0.02);
}

TEST_CASE("diloco: four peers learn the synthetic task and end on one model") {
  test::Watchdog watchdog(120s);
  test::checkLearns("diloco", {{"h", "6"}});
}

TEST_CASE("diloco: options are validated") {
  const auto& spec = test::registry().algorithms.get("diloco");
  CHECK(spec.defaultTopology == "ring");
  CHECK_THROWS_WITH_AS(spec.make({{"h", "0"}}), doctest::Contains("diloco.h must be at least 1"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"outer-lr", "0"}}),
                       doctest::Contains("diloco.outer-lr must be in (0, 2]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"outer-lr", "2.5"}}),
                       doctest::Contains("diloco.outer-lr must be in (0, 2]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"outer-momentum", "1"}}),
                       doctest::Contains("diloco.outer-momentum must be in [0, 1)"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"outer-momentum", "-0.1"}}),
                       doctest::Contains("diloco.outer-momentum must be in [0, 1)"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pipeline", "17"}}),
                       doctest::Contains("diloco.pipeline must be in [1, 16]"), gossamer::Error);
  CHECK_NOTHROW(spec.make({{"h", "500"}, {"nesterov", "false"}, {"outer-lr", "2"}}));
}

TEST_CASE("diloco: a checkpoint keeps theta, the outer momentum and the round count") {
  engine::AlgorithmState saved;
  saved.tensors["outer_theta"] = {1, 2, 3};
  saved.tensors["outer_momentum"] = {0.5f, -0.5f, 0.25f};
  saved.values["outer_rounds"] = 7;
  Diloco diloco(DilocoOptions{});
  engine::AlgorithmState empty;
  diloco.saveState(empty);  // nothing before setup or a load
  CHECK(empty.tensors.empty());
  diloco.loadState(saved);
  engine::AlgorithmState again;
  diloco.saveState(again);
  CHECK(again.tensors == saved.tensors);
  CHECK(again.values == saved.values);
}

TEST_CASE("diloco: a peer killed mid-run does not stop the others") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkSurvivesKill("diloco", {{"h", "4"}}, 1);
  for (std::size_t i : {0, 2, 3}) CHECK(metric(result.peers[i], "diloco.fallbacks") >= 1);
}

// Three peers train 400 steps (momentum 0.9 inner and outer); a fourth joins once the first has
// made 150 steps. It must receive theta and m: with theta alone (m = 0) its outer steps would differ
// from the others' at every later round, and so would its final model and momentum.
void checkJoinerReceivesOuterState(const std::string& algorithm, engine::OptionValues options) {
  auto config = test::algorithmCluster(algorithm, 3, 400, 0.05, options);
  config.peer.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
  config.peer.training.minStepTime = 2ms;  // the join lands mid-run
  config.peer.network.transportMaker = test::sharedInprocNetwork();
  config.peer.network.secret = std::vector<std::byte>(32, std::byte{7});
  struct Late {
    std::thread thread;
    engine::runtime::PeerResult result;
    std::optional<engine::runtime::Snapshot> final;
    std::exception_ptr error;
  };
  auto late = std::make_shared<Late>();
  engine::runtime::PeerConfig lateConfig = config.peer;
  lateConfig.training.minPeers = 2;  // not alone: it waits to see the cluster, then joins it
  lateConfig.training.finalLocalEval = false;
  config.onStart = [late, lateConfig](std::vector<engine::runtime::Peer*>& all) {
    engine::runtime::Peer* first = all.front();
    engine::runtime::PeerConfig c = lateConfig;
    c.network.seeds = {first->endpoint()};
    c.network.peerId = 99;
    late->thread = std::thread([late, c, first] {
      try {
        while (first->status().step < 150) std::this_thread::sleep_for(1ms);
        engine::runtime::Peer peer(c, test::registry(), test::smallData());
        late->result = peer.run();
        late->final = peer.snapshot(1s);
      } catch (...) {
        late->error = std::current_exception();
      }
    });
  };
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  late->thread.join();
  REQUIRE(late->error == nullptr);
  REQUIRE(late->final.has_value());
  CHECK(late->result.steps == 400);
  CHECK(metric(late->result, algorithm + ".joined") == 1);
  CHECK(metric(late->result, algorithm + ".join_fallbacks") == -1);
  // It came in verified chunks from the members (the runtime's catch-up), not by the request to one
  // member that serve() answers (the simulator's way).
  CHECK(metric(late->result, algorithm + ".joined_from_members") >= 1);
  double served = 0;
  for (const auto& p : result.peers) served += std::max(0.0, metric(p, algorithm + ".served_joiners"));
  CHECK(served == 0);
  CHECK(metric(late->result, algorithm + ".rounds") > 0);
  // Every peer, the joiner included, ends on the last outer step's theta.
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(result.finals[i].params == result.finals[0].params);
    CHECK(test::maxAbsDiff(late->final->params, result.finals[i].params) < 1e-6);
  }
}

TEST_CASE("diloco: a late joiner receives theta and the outer momentum and ends on the others' "
          "model") {
  test::Watchdog watchdog(120s);
  checkJoinerReceivesOuterState("diloco", {{"h", "25"}});
}

// ---- streaming-diloco -----------------------------------------------------------------------

TEST_CASE("streaming-diloco: with one fragment, tau 0 and alpha 0 it is diloco") {
  test::Watchdog watchdog(120s);
  auto run = [](const std::string& algorithm, engine::OptionValues options) {
    auto config = test::algorithmCluster(algorithm, 4, 203, 0.05, std::move(options));
    config.peer.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
    return engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  };
  const auto diloco = run("diloco", {{"h", "8"}});
  const auto streaming =
      run("streaming-diloco", {{"h", "8"}, {"fragments", "1"}, {"tau", "0"}, {"alpha", "0"}});
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(metric(streaming.peers[i], "streaming-diloco.rounds") == 26);
    CHECK(streaming.finals[i].params == streaming.finals[0].params);
    // The two all-reduces add in different orders; training carries the rounding on.
    CHECK(test::maxAbsDiff(streaming.finals[i].params, diloco.finals[i].params) < 1e-4);
  }
}

TEST_CASE("streaming-diloco: fragments are synchronised on their own schedule and mixed with "
          "alpha") {
  test::Watchdog watchdog(60s);
  // Inner lr 0, distinct models x_i (mean a), H = 9, F = 3 (offsets 0, 3, 6), tau = 2, alpha 1/2,
  // outer lr 1/2, no momentum, 13 steps. Fragment 1 starts after steps 3 and 12, fragment 2 after
  // 6, fragment 0 after 9; each merges 2 steps later (the last one in finish()). One round from
  // theta = w = x gives theta = (x + a)/2, w = 3/4 x + 1/4 a; a second gives theta = (x + 3a)/4,
  // w = (x + a)/2.
  const std::size_t peers = 3;
  auto config = test::algorithmCluster(
      "streaming-diloco", peers, 13, 0.0,
      {{"h", "9"}, {"fragments", "3"}, {"tau", "2"}, {"alpha", "0.5"}, {"outer-lr", "0.5"},
       {"outer-momentum", "0"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result =
      engine::runtime::runLocalCluster(config, unendingRegistry(), test::smallData());
  const std::size_t size = result.finals[0].params.size();
  const std::vector<float> a = test::averageOfDistinct(peers, size);
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    const std::vector<float> x = test::distinctParams(i, size);
    std::vector<float> oracle(size);
    for (std::size_t f = 0; f < 3; ++f) {
      const Slice slice = ringSlice(size, 3, f);
      const float own = f == 1 ? 0.5f : 0.75f;
      for (std::size_t k = slice.offset; k < slice.offset + slice.count; ++k)
        oracle[k] = own * x[k] + (1 - own) * a[k];
    }
    CHECK(test::maxAbsDiff(result.finals[i].params, oracle) < 3e-6);
    CHECK(metric(result.peers[i], "streaming-diloco.rounds") == 4);
  }
}

TEST_CASE("streaming-diloco: with inner lr 0 the run ends with every peer at the average") {
  test::Watchdog watchdog(60s);
  const std::size_t peers = 4;
  auto config = test::algorithmCluster(
      "streaming-diloco", peers, 10, 0.0,
      {{"h", "6"}, {"fragments", "3"}, {"tau", "1"}, {"outer-lr", "1"}, {"outer-momentum", "0"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  for (std::size_t i = 0; i < peers; ++i) {
    CAPTURE(i);
    CHECK(test::maxAbsDiff(result.finals[i].params, oracle) < 3e-6);
    // Rounds after steps 2 (f1), 4 (f2), 6 (f0), 8 (f1), then the last one of every fragment.
    CHECK(metric(result.peers[i], "streaming-diloco.rounds") == 7);
  }
}

TEST_CASE("streaming-diloco: on a strongly convex problem the peers converge to the known "
          "optimum") {
  test::Watchdog watchdog(120s);
  test::checkConvexOptimum("streaming-diloco", {{"h", "8"}, {"fragments", "2"}, {"tau", "1"}},
                           800, 0.05, 0.02);
}

TEST_CASE("streaming-diloco: four peers learn the synthetic task and end on one model") {
  test::Watchdog watchdog(120s);
  test::checkLearns("streaming-diloco", {{"h", "6"}, {"fragments", "3"}, {"tau", "1"}});
}

TEST_CASE("streaming-diloco: options are validated") {
  const auto& spec = test::registry().algorithms.get("streaming-diloco");
  CHECK(spec.defaultTopology == "ring");
  auto fails = [&](engine::OptionValues values, const char* message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(spec.make(values), doctest::Contains(message), gossamer::Error);
  };
  fails({{"h", "0"}}, "streaming-diloco.h must be at least 1");
  fails({{"h", "4"}, {"fragments", "5"}}, "streaming-diloco.fragments must be in [1, h = 4]");
  fails({{"fragments", "0"}}, "streaming-diloco.fragments must be in [1, h = 50]");
  fails({{"h", "4"}, {"fragments", "2"}, {"tau", "2"}},
        "streaming-diloco.tau must be below h / fragments = 2");
  fails({{"alpha", "1.5"}}, "streaming-diloco.alpha must be in [0, 1]");
  fails({{"alpha", "-0.5"}}, "streaming-diloco.alpha must be in [0, 1]");
  fails({{"outer-lr", "0"}}, "streaming-diloco.outer-lr must be in (0, 2]");
  fails({{"outer-momentum", "1"}}, "streaming-diloco.outer-momentum must be in [0, 1)");
  fails({{"pieces", "0"}}, "streaming-diloco.pieces must be in [1, 16]");
  CHECK_NOTHROW(spec.make({{"h", "4"}, {"fragments", "4"}, {"tau", "0"}, {"alpha", "1"}}));
  CHECK_NOTHROW(spec.make({{"h", "10"}, {"fragments", "3"}, {"tau", "2"}}));
}

TEST_CASE("streaming-diloco: a checkpoint keeps theta, the outer momentum and the round count") {
  engine::AlgorithmState saved;
  saved.tensors["outer_theta"] = {1, 2, 3, 4};
  saved.tensors["outer_momentum"] = {0.5f, -0.5f, 0.25f, 0};
  saved.values["outer_rounds"] = 3;
  StreamingDiloco streaming(StreamingDilocoOptions{});
  streaming.loadState(saved);
  engine::AlgorithmState again;
  streaming.saveState(again);
  CHECK(again.tensors == saved.tensors);
  CHECK(again.values == saved.values);
}

TEST_CASE("streaming-diloco: a peer killed mid-run does not stop the others") {
  test::Watchdog watchdog(120s);
  const auto result = test::checkSurvivesKill(
      "streaming-diloco", {{"h", "4"}, {"fragments", "2"}, {"tau", "1"}}, 1);
  for (std::size_t i : {0, 2, 3})
    CHECK(metric(result.peers[i], "streaming-diloco.fallbacks") >= 1);
}

TEST_CASE("streaming-diloco: a late joiner receives theta and the outer momentum and ends on the "
          "others' model") {
  test::Watchdog watchdog(120s);
  checkJoinerReceivesOuterState("streaming-diloco", {{"h", "24"}, {"fragments", "3"}, {"tau", "2"}});
}

}  // namespace
}  // namespace gossamer::algorithms
