// dpsgd's overlapped rule (dpsgd.overlap K, algorithms/dpsgd.h): the default consensus step
// against its closed form, two peers' delayed differences step by step, the network mean kept and
// reached with learning rate 0 on a ring, learning with a delay, and what it refuses.
#include <cmath>
#include <numbers>

#include <doctest/doctest.h>

#include "algorithms/dpsgd.h"
#include "kernels/codec.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

engine::runtime::ClusterResult run(const engine::runtime::ClusterConfig& config) {
  return engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
}

// `peers` on a ring from distinctParams, learning rate 0, dpsgd.overlap `k`.
engine::runtime::ClusterResult mixOnly(std::size_t peers, std::uint64_t steps, std::uint64_t k) {
  auto config =
      test::algorithmCluster("dpsgd", peers, steps, 0.0, {{"overlap", std::to_string(k)}});
  config.peer.training.topology = "ring";
  config.peer.training.initialParams = test::distinctParams;
  return run(config);
}

TEST_CASE("dpsgd.overlap: the default step is 0.9 of Levin and May's bound over Gershgorin's") {
  // gamma = min(1, 0.9 sin(pi / (2 (2K + 1))) / (1 - min W_ii)).
  CHECK(overlapGamma(1, 1.0 / 3) == doctest::Approx(0.9 * 0.5 * 1.5));
  CHECK(overlapGamma(1, 0.5) == doctest::Approx(0.9));
  CHECK(overlapGamma(8, 1.0 / 3) == doctest::Approx(0.9 * std::sin(std::numbers::pi / 34) * 1.5));
  CHECK(overlapGamma(0, 1.0 / 3) == 1.0);  // no delay: the plain rule's full step
  CHECK(overlapGamma(4, 1.0) == 1.0);      // W = I
}

TEST_CASE("dpsgd.overlap: two peers follow d_t+1 = d_t - gamma d_t-1 around their mean") {
  test::Watchdog watchdog(60s);
  // Two peers on a ring (one edge, W = 1/2 everywhere), K = 1, gamma = 0.9. With d = w_0 - w_1
  // and D its start: step 0 mixes nothing (no round -1), then d_2 = D - 0.9 D, d_3 = d_2 - 0.9 D
  // = -0.8 D, d_4 = d_3 - 0.9 d_2 = -0.89 D; the mean m never moves: w_0 = m + d_4 / 2.
  const auto result = mixOnly(2, 4, 1);
  REQUIRE(result.finals.size() == 2);
  const std::size_t count = result.finals[0].params.size();
  const std::vector<float> x0 = test::distinctParams(0, count), x1 = test::distinctParams(1, count);
  double worst = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double m = (static_cast<double>(x0[i]) + x1[i]) / 2,
                 d = static_cast<double>(x0[i]) - x1[i];
    worst = std::max(worst, std::abs(result.finals[0].params[i] - (m - 0.445 * d)));
    worst = std::max(worst, std::abs(result.finals[1].params[i] - (m + 0.445 * d)));
  }
  CHECK(worst < 1e-5);
  for (const auto& p : result.peers) CHECK(p.metrics.count("dpsgd.missing") == 0);
}

TEST_CASE("dpsgd.overlap: with learning rate 0 a ring keeps the network mean and reaches it") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 5;
  for (const std::uint64_t k : {2, 6}) {
    CAPTURE(k);
    const auto early = mixOnly(peers, 3 * k, k);
    const std::vector<float> oracle = test::averageOfDistinct(peers, early.finals[0].params.size());
    CHECK(test::maxAbsDiff(test::meanOf(early.finals), oracle) < 1e-5);
    CHECK(test::maxAbsDiff(early.finals[0].params, oracle) > 0.1);
    const auto late = mixOnly(peers, 600, k);
    CHECK(test::maxAbsDiff(test::meanOf(late.finals), oracle) < 1e-5);
    for (const auto& s : late.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-4);
  }
}

TEST_CASE("dpsgd.overlap: four peers on a ring learn the synthetic task with a delay of 4") {
  test::Watchdog watchdog(120s);
  const std::uint64_t steps = 300;
  const auto result = run(test::algorithmCluster("dpsgd", 4, steps, 0.1, {{"overlap", "4"}}));
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.85);
  for (const auto& p : result.peers) {
    CHECK(p.steps == steps);
    CHECK(p.metrics.count("dpsgd.missing") == 0);
  }
}

TEST_CASE("dpsgd.overlap: a directed topology, --compress and a delay past the bound are refused") {
  test::Watchdog watchdog(60s);
  const engine::AlgorithmSpec& spec = test::registry().algorithms.get("dpsgd");
  CHECK_THROWS_WITH_AS(spec.make({{"overlap", "1025"}}), doctest::Contains("dpsgd.overlap"),
                       gossamer::Error);
  CHECK(spec.make({{"overlap", "1024"}})->name() == "dpsgd");
  auto directed = test::algorithmCluster("dpsgd", 3, 5, 0.1, {{"overlap", "2"}});
  directed.peer.training.topology = "ring-uni";
  CHECK_THROWS_WITH_AS(run(directed), doctest::Contains("symmetric mixing matrix"),
                       gossamer::Error);
  auto compressed = test::algorithmCluster("dpsgd", 3, 5, 0.1, {{"overlap", "2"}});
  compressed.peer.training.compression = {kernels::parseCodec("fp16"), true};
  CHECK_THROWS_WITH_AS(run(compressed), doctest::Contains("--compress"), gossamer::Error);
}

}  // namespace
}  // namespace gossamer::algorithms
