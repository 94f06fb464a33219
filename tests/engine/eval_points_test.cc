// Evaluation points (engine/runtime/eval_points.h): the board completes points in order, once
// every peer passed them or owes nothing; a point's figures are its samples' (the slowest peer's
// time, mean bytes, mean fractions); real peers sample at exactly their steps N, 2N, ...; two runs
// whose models go through the same states differ only by their times; in the simulator a point's
// time is its closed form.
#include "engine/runtime/eval_points.h"

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "engine/runtime/cluster.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using engine::runtime::EvalPointBoard;
using engine::runtime::PointSample;

PointSample sample(std::uint64_t point, PeerId peer, double seconds, float value) {
  return PointSample{.point = point,
                     .model = {peer, 10 * point, std::vector<float>(4, value)},
                     .figures = {seconds, seconds / 4, seconds / 2},
                     .samples = 100,
                     .bytesSent = 1000 * peer};
}

TEST_CASE("eval points: the schedule names the steps of the points") {
  const engine::runtime::EvalSchedule every{.everySteps = 25};
  CHECK(!every.pointAfter(0));
  CHECK(!every.pointAfter(24));
  CHECK(every.pointAfter(25) == 1u);
  CHECK(every.pointAfter(50) == 2u);
  CHECK(!every.pointAfter(51));
  CHECK(!engine::runtime::EvalSchedule{}.pointAfter(25));
  CHECK(every.describe() == "every 25 steps");
}

TEST_CASE("eval points: a point is complete once every peer passed it or owes it nothing") {
  EvalPointBoard board;
  const std::vector<PeerId> peers = {1, 2, 3};
  std::map<PeerId, bool> gone;  // peers that owe nothing any more
  const auto owes = [&](PeerId peer, std::uint64_t) { return !gone[peer]; };
  board.add(sample(2, 1, 2.0, 1));
  board.add(sample(1, 1, 1.0, 1));
  board.add(sample(1, 2, 1.5, 3));
  CHECK(board.takeComplete(peers, owes).empty());  // peer 3 owes point 1
  board.add(sample(2, 2, 2.5, 3));
  CHECK(board.takeComplete(peers, owes).empty());
  gone[3] = true;  // it died: the points wait for it no more
  const auto complete = board.takeComplete(peers, owes);
  REQUIRE(complete.size() == 2);
  CHECK(complete[0].front().point == 1);
  CHECK(complete[1].front().point == 2);
  CHECK(board.pending() == 0);

  // A peer that passes a point again (restarted from an earlier checkpoint) replaces its sample.
  board.add(sample(3, 1, 3.0, 1));
  board.add(sample(3, 1, 3.5, 7));
  board.add(sample(3, 2, 3.0, 1));
  const auto again = board.takeComplete(peers, owes);
  REQUIRE(again.size() == 1);
  REQUIRE(again[0].size() == 2);
  CHECK(again[0][0].model.params[0] + again[0][1].model.params[0] == 8.0f);
}

TEST_CASE("eval points: a point's figures are its samples', its model their average") {
  const engine::runtime::AveragedPoint averaged =
      engine::runtime::averagePoint({sample(1, 1, 2.0, 1), sample(1, 2, 4.0, 3)});
  const engine::runtime::EvalPoint& p = averaged.point;
  CHECK(p.wallSeconds == 4.0);  // the slowest peer's
  CHECK(p.minStep == 10);
  CHECK(p.maxStep == 10);
  CHECK(p.samples == 200);
  CHECK(p.bytesSentPerPeer == 1500);
  CHECK(p.commWaitFraction == doctest::Approx(0.25));
  CHECK(p.utilization == doctest::Approx(0.5));
  CHECK(p.consensus.peers == 2);
  CHECK(p.consensus.distance == doctest::Approx(4.0));  // mean of ||w_i - 2||^2 = 4 x 1
  CHECK(averaged.model == std::vector<float>(4, 2.0f));
}

std::vector<engine::runtime::EvalPoint> pointsOf(const engine::runtime::ClusterResult& result) {
  // The curve's last entry is the final evaluation.
  return {result.curve.begin(), result.curve.end() - 1};
}

// allreduce-sgd's peers take the same steps whatever the network: evaluated at the same steps,
// the consensus is the same model on lan and across a link of 20 ms, and only the times differ.
TEST_CASE("eval points: real peers sample at exactly every N-th step, only the times differ") {
  test::Watchdog watchdog(120s);
  std::vector<std::vector<engine::runtime::EvalPoint>> runs;
  for (const auto latency : {0ms, 20ms}) {
    auto config = test::algorithmCluster("allreduce-sgd", 3, 24);
    config.evalEvery = 6;
    config.evalSamples = 500;
    config.peer.training.minStepTime = 5ms;
    if (latency.count() > 0)
      config.peer.network.profile =
          net::shaped::NetworkProfile::uniform("test", {.latency = latency});
    const auto result =
        engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
    runs.push_back(pointsOf(result));
    REQUIRE(runs.back().size() == 4);
    for (std::size_t k = 0; k < 4; ++k) {
      const engine::runtime::EvalPoint& p = runs.back()[k];
      CAPTURE(k);
      CHECK(p.minStep == 6 * (k + 1));
      CHECK(p.maxStep == 6 * (k + 1));
      CHECK(p.wallSeconds >= 0.005 * 6 * static_cast<double>(k + 1));  // padded steps
      CHECK(p.wallSeconds <= result.wallSeconds);
      CHECK(p.commWaitFraction <= 1.0);
    }
  }
  for (std::size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(runs[0][k].consensus.accuracy == runs[1][k].consensus.accuracy);
    CHECK(runs[0][k].consensus.loss == runs[1][k].consensus.loss);
    // Each step waits for the ring's 2 (n - 1) one-way latencies.
    CHECK(runs[1][k].wallSeconds > runs[0][k].wallSeconds + 0.020 * 4 * 6 * (k + 1) * 0.9);
  }
}

TEST_CASE("eval points: a cluster evaluating after the run gives the same curve") {
  test::Watchdog watchdog(120s);
  std::vector<std::vector<engine::runtime::EvalPoint>> runs;
  for (const bool after : {false, true}) {
    auto config = test::algorithmCluster("allreduce-sgd", 2, 12);
    config.evalEvery = 4;
    config.evalSamples = 500;
    config.evaluateAfterRun = after;
    runs.push_back(
        pointsOf(engine::runtime::runLocalCluster(config, test::registry(), test::smallData())));
  }
  REQUIRE(runs[0].size() == 3);
  REQUIRE(runs[1].size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(runs[0][k].maxStep == runs[1][k].maxStep);
    CHECK(runs[0][k].consensus.accuracy == runs[1][k].consensus.accuracy);
  }
}

// Peers that exchange nothing step every S exactly in virtual time: point k is at k N S.
TEST_CASE("eval points: in the simulator a point's time is the steps' virtual time") {
  engine::sim::SimConfig c;
  c.peers = 3;
  c.training = test::algorithmCluster("none", 3, 20).peer.training;
  c.training.minStepTime = 100ms;
  c.evalEverySteps = 5;
  c.finalPeerSamples = 0;
  const engine::sim::SimResult r = engine::sim::simulate(c, test::registry(), test::smallData());
  REQUIRE(r.violations.empty());
  REQUIRE(r.curve.size() == 5);  // 4 points and the final evaluation
  for (std::size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(r.curve[k].minStep == 5 * (k + 1));
    CHECK(r.curve[k].maxStep == 5 * (k + 1));
    CHECK(r.curve[k].wallSeconds == doctest::Approx(0.5 * static_cast<double>(k + 1)));
  }
}

}  // namespace
}  // namespace gossamer
