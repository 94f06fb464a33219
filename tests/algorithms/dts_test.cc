// dts (algorithms/dts.h): the compensation's closed form against two optimizers fed different
// gradients, step-for-step equality with allreduce-sgd when t = 0 and p = 1, identical models
// once every window is compensated, the convex optimum, training, options, Adam refused and a
// peer killed mid-run.
#include "algorithms/dts.h"

#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "engine/train/optimizer.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/periodic_averaging_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::train::OptimizerKind;

std::vector<float> randomVector(std::mt19937_64& rng, std::size_t n, double scale = 1.0) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::span<float> velocityOf(engine::train::Optimizer& optimizer) {
  for (auto& [name, buffer] : optimizer.state())
    if (name == "velocity") return buffer;
  return {};
}

// The closed-form oracle of the derivation: two optimizers start from the same state; during a
// window of `window` steps one is fed g_k and the other g_k + delta_k, then `after` steps of
// identical gradients follow, with a rate that changes every step. The window's responses X (and
// X'), taken by dts::windowResponse from the window's start and end states, and the map M of the
// steps after it (dts::stepMap) must turn the first optimizer's state into the second's: (w, v) + M
// (X' - X) = (w', v'). `single`: a window of one step whose gradient itself is the sent vector (p =
// 1), with the injection folded into M.
void checkResponse(OptimizerKind kind, std::size_t window, std::size_t after, bool single) {
  CAPTURE(engine::train::optimizerName(kind));
  CAPTURE(window);
  CAPTURE(after);
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  const std::size_t n = 257;
  std::mt19937_64 rng(7);
  const engine::train::OptimizerOptions options{
      .kind = kind, .lr = 0.1f, .momentum = 0.9f, .weightDecay = 0.05f};
  engine::train::Optimizer a(*compute, options, n), b(*compute, options, n);
  std::vector<float> wa = randomVector(rng, n), wb = wa;
  const dts::Linear linear{.kind = kind, .mu = options.momentum, .wd = options.weightDecay};
  const bool twoVectors = !single && kind != OptimizerKind::kSgd;
  std::vector<float> xa(twoVectors ? 2 * n : n, 0.0f), xb = xa;
  const auto rate = [](std::size_t k) { return 0.02 + 0.01 * static_cast<double>(k % 5); };
  // Momentum first: a state that is not zero when the window starts.
  for (std::size_t k = 0; k < 3; ++k) {
    const std::vector<float> g = randomVector(rng, n);
    a.step(wa, g);
    b.step(wb, g);
  }
  // The window's start: (w, v) of each optimizer, [w_s, v_s] with momentum.
  const auto snapshot = [&](const std::vector<float>& w, engine::train::Optimizer& o) {
    std::vector<float> start(w);
    if (twoVectors) {
      const std::span<float> v = velocityOf(o);
      start.insert(start.end(), v.begin(), v.end());
    }
    return start;
  };
  const std::vector<float> startA = snapshot(wa, a), startB = snapshot(wb, b);
  dts::Matrix m, windowMap;
  std::size_t k = 3;
  for (std::size_t i = 0; i < window; ++i, ++k) {
    const float lr = static_cast<float>(rate(k));
    a.setLearningRate(lr);
    b.setLearningRate(lr);
    const std::vector<float> g = randomVector(rng, n), h = randomVector(rng, n);
    a.step(wa, g);
    b.step(wb, h);
    if (single) {
      xa = g;
      xb = h;
      const auto [cw, cv] = dts::injection(linear, lr);
      m = dts::Matrix{cw, 0, cv, 0};
    } else {
      windowMap = dts::stepMap(linear, lr) * windowMap;
    }
  }
  if (!single) {
    const std::span<float> va = twoVectors ? velocityOf(a) : std::span<float>();
    const std::span<float> vb = twoVectors ? velocityOf(b) : std::span<float>();
    dts::windowResponse(*compute, windowMap, wa, va, startA, xa);
    dts::windowResponse(*compute, windowMap, wb, vb, startB, xb);
  }
  for (std::size_t i = 0; i < after; ++i, ++k) {
    const float lr = static_cast<float>(rate(k));
    a.setLearningRate(lr);
    b.setLearningRate(lr);
    const std::vector<float> g = randomVector(rng, n);
    a.step(wa, g);
    b.step(wb, g);
    m = dts::stepMap(linear, lr) * m;
  }
  // Without the compensation the two differ by O(lr x delta): the check below can fail.
  const double apart = test::maxAbsDiff(wa, wb);
  CHECK(apart > 1e-2);
  dts::compensate(*compute, m, wa, velocityOf(a), xb, xa);
  const double error = test::maxAbsDiff(wa, wb);
  INFO("w apart " << apart << ", after compensation " << error);
  CHECK(error < 1e-5 + 1e-4 * apart);
  if (kind != OptimizerKind::kSgd) {
    const double errorV = test::maxAbsDiff(velocityOf(a), velocityOf(b));
    INFO("velocities after compensation " << errorV);
    CHECK(errorV < 1e-4);
  }
}

TEST_CASE("dts: the compensation turns one optimizer's state into the other's (closed form)") {
  for (const auto kind :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov}) {
    checkResponse(kind, 1, 0, true);   // p = 1, t = 0
    checkResponse(kind, 1, 5, true);   // p = 1, t = 5
    checkResponse(kind, 4, 0, false);  // p = 4, t = 0
    checkResponse(kind, 3, 2, false);  // p = 3, t = 2
    checkResponse(kind, 1, 3, false);  // a window of one step sent as X
  }
}

TEST_CASE("dts: the linear maps are PyTorch's steps") {
  // The momentum map composed with the injection of the next step equals the response of two
  // steps; spot values keep the signs honest.
  const dts::Linear momentum{.kind = OptimizerKind::kMomentum, .mu = 0.9, .wd = 0.1};
  const dts::Matrix a = dts::stepMap(momentum, 0.5);
  CHECK(a.ww == doctest::Approx(1 - 0.05));
  CHECK(a.wv == doctest::Approx(-0.45));
  CHECK(a.vw == doctest::Approx(0.1));
  CHECK(a.vv == doctest::Approx(0.9));
  const dts::Linear nesterov{.kind = OptimizerKind::kNesterov, .mu = 0.9, .wd = 0.0};
  CHECK(dts::injection(nesterov, 0.5)[0] == doctest::Approx(-0.95));
  CHECK(dts::injection(nesterov, 0.5)[1] == doctest::Approx(1));
  const dts::Linear sgd{.kind = OptimizerKind::kSgd, .mu = 0.9, .wd = 0.1};
  CHECK(dts::injection(sgd, 0.5)[0] == doctest::Approx(-0.5));
  CHECK(dts::injection(sgd, 0.5)[1] == 0);
  CHECK(dts::stepMap(sgd, 0.5).ww == doctest::Approx(0.95));
}

engine::runtime::ClusterConfig dtsCluster(std::uint64_t steps, OptimizerKind kind, float wd,
                                          std::uint64_t delay, std::uint64_t period) {
  auto config = test::algorithmCluster(
      "dts", 4, steps, 0.1,
      {{"delay", std::to_string(delay)}, {"period", std::to_string(period)}, {"pieces", "3"}});
  config.peer.training.optimizer.kind = kind;
  config.peer.training.optimizer.weightDecay = wd;
  return config;
}

TEST_CASE("dts: with t = 0 and p = 1 it takes allreduce-sgd's steps") {
  test::Watchdog watchdog(240s);
  const std::uint64_t steps = 40;
  for (const auto kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum}) {
    for (const float wd : {0.0f, 0.01f}) {
      CAPTURE(engine::train::optimizerName(kind));
      CAPTURE(wd);
      auto config = dtsCluster(steps, kind, wd, 0, 1);
      const auto dts =
          engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
      config.peer.training.algorithm = "allreduce-sgd";
      config.peer.training.algorithmOptions = {};
      const auto sync =
          engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
      const auto& oracle = sync.finals.front().params;
      for (std::size_t i = 0; i < dts.finals.size(); ++i) {
        CAPTURE(i);
        const double error = test::relativeError(dts.finals[i].params, oracle);
        INFO("relative distance to allreduce-sgd: " << error);
        CHECK(error < 1e-5);
        CHECK(dts.peers[i].metrics.at("dts.rounds") == steps);
        CHECK(dts.peers[i].metrics.count("dts.fallbacks") == 0);
      }
    }
  }
}

// Every window compensated (finish() sends the last, partial one): the peers end on the same
// model, up to float rounding, although each ran ahead on its own gradients.
void checkIdenticalAtTheEnd(OptimizerKind kind, std::uint64_t delay, std::uint64_t period,
                            std::uint64_t steps) {
  CAPTURE(engine::train::optimizerName(kind));
  CAPTURE(delay);
  CAPTURE(period);
  auto config = dtsCluster(steps, kind, 0.01f, delay, period);
  config.peer.training.schedule.kind = engine::train::LrSchedule::kCosine;
  config.peer.training.schedule.warmupSteps = 5;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const auto& first = result.finals.front().params;
  double norm = 0;
  for (float x : first) norm = std::max(norm, std::abs(static_cast<double>(x)));
  for (std::size_t i = 0; i < result.finals.size(); ++i) {
    CAPTURE(i);
    const double apart = test::maxAbsDiff(result.finals[i].params, first);
    INFO("max |w_i - w_0| " << apart << " (max |w_0| " << norm << ")");
    CHECK(apart < 1e-5 * norm);
    CHECK(result.peers[i].metrics.at("dts.rounds") == (steps + period - 1) / period);
    CHECK(result.peers[i].metrics.count("dts.fallbacks") == 0);
  }
}

TEST_CASE("dts: once every window is compensated the peers' models are identical") {
  test::Watchdog watchdog(240s);
  checkIdenticalAtTheEnd(OptimizerKind::kMomentum, 3, 3, 40);  // 40: a partial last window
  checkIdenticalAtTheEnd(OptimizerKind::kNesterov, 3, 1, 30);
  checkIdenticalAtTheEnd(OptimizerKind::kSgd, 4, 2, 31);  // t > p: 3 rounds in flight
}

TEST_CASE("dts: peers alone drift apart by far more than the identity check's tolerance") {
  // The identity check above can fail: without compensation (algorithm none) the peers' own
  // updates set them apart by orders of magnitude more than dts's peers differ.
  test::Watchdog watchdog(120s);
  auto config = dtsCluster(30, OptimizerKind::kMomentum, 0.0f, 3, 3);
  const auto dts = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  config.peer.training.algorithm = "none";
  config.peer.training.algorithmOptions = {};
  const auto alone = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  double spread = 0;
  for (const auto& s : alone.finals)
    spread = std::max(spread, test::maxAbsDiff(s.params, alone.finals.front().params));
  CHECK(spread > 1e-2);  // peers alone drift apart by far more than the tolerance of the oracle
  CHECK(test::maxAbsDiff(dts.finals[1].params, dts.finals[0].params) < 1e-3 * spread);
}

TEST_CASE("dts: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(240s);
  test::checkConvexOptimum("dts", {{"delay", "4"}, {"period", "2"}}, 600, 0.1, 0.03);
}

TEST_CASE("dts: four peers learn the synthetic task and end on one model") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("dts", 4, 200, 0.1, {{"delay", "4"}, {"period", "4"}});
  config.peer.training.optimizer.kind = OptimizerKind::kMomentum;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.9);
  CHECK(result.consensus.distance < 1e-8);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 200);
    CHECK(p.bytesSent > 0);
    CHECK(p.metrics.at("dts.rounds") == 50);
  }
}

TEST_CASE("dts: options are validated") {
  const auto& spec = test::registry().algorithms.get("dts");
  CHECK_NOTHROW(spec.make({{"delay", "0"}, {"period", "1"}}));
  CHECK_THROWS_WITH_AS(spec.make({{"period", "0"}}),
                       doctest::Contains("dts.period must be at least 1"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pieces", "0"}}),
                       doctest::Contains("dts.pieces must be in [1, 16]"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pieces", "17"}}), doctest::Contains("dts.pieces"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"delay", "3"}, {"period", "2"}}),
                       doctest::Contains("dts.delay must be a multiple of dts.period"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"delay", "130"}, {"period", "2"}}),
                       doctest::Contains("dts.delay must be at most 64 x dts.period"),
                       gossamer::Error);
  CHECK_NOTHROW(spec.make({{"delay", "128"}, {"period", "2"}}));
  CHECK_THROWS_WITH_AS(spec.make({{"delay", "-1"}}), doctest::Contains("delay"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau", "2"}}), doctest::Contains("unknown option 'tau'"),
                       gossamer::Error);
}

TEST_CASE("dts: --optimizer adam is refused with a message naming the fix") {
  test::Watchdog watchdog(60s);
  auto config = test::algorithmCluster("dts", 2, 10);
  config.peer.training.optimizer.kind = OptimizerKind::kAdam;
  config.peer.training.finishTimeout = 500ms;
  CHECK_THROWS_WITH_AS(
      engine::runtime::runLocalCluster(config, test::registry(), test::smallData()),
      doctest::Contains("--optimizer sgd|momentum|nesterov"), gossamer::Error);
}

TEST_CASE("dts: a peer killed mid-run does not stop the others") {
  test::Watchdog watchdog(180s);
  auto config = test::algorithmCluster("dts", 4, 150, 0.1, {{"delay", "4"}, {"period", "2"}});
  config.peer.training.optimizer.kind = OptimizerKind::kMomentum;
  config.peer.training.commTimeout = 1s;
  config.peer.training.minStepTime = 5ms;  // the kill comes mid-run
  test::killPeerAt(config, 2, 30);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[2].steps < 150);
  for (std::size_t i : {0, 1, 3}) {
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(p.steps == 150);
    // The windows in flight around the kill kept their local updates; the rest were compensated
    // over the survivors.
    CHECK(p.metrics.at("dts.fallbacks") >= 1);
    CHECK(p.metrics.at("dts.rounds") >= 50);
  }
  const auto consensus = test::survivorsConsensus(result, 2);
  CHECK(consensus.accuracy > 0.85);
}

}  // namespace
}  // namespace gossamer::algorithms
