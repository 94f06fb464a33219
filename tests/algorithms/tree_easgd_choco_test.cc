// tree-easgd with --compress: models travel as compressed differences from public estimates
// (algorithms/tree_easgd.h, "Compressed"). With learning rate 0 the peers still contract to one
// consensus inside the initial hull, each stream anchoring once; the convex optimum is reached
// with int8 and top-k; the bytes shrink as the codec says.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/codec.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

TEST_CASE("tree-easgd compressed: with learning rate 0 the models reach one consensus in the hull") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 7;  // a full binary tree of depth 2
  for (const char* codec : {"int8", "topk:0.2"}) {
    INFO(std::string(codec));
    auto config = test::algorithmCluster("tree-easgd", peers, 400, 0.0,
                                         {{"alpha", "0.5"}, {"tau_up", "2,1"}, {"tau_down", "1"}});
    config.peer.training.minStepTime = 1ms;
    config.peer.training.initialParams = test::distinctParams;
    const auto result = test::runCompressed(config, codec);
    const std::size_t n = result.finals[0].params.size();
    const test::Hull hull = test::hullOfDistinct(peers, n);
    // Estimates lag the models they track, but every pull is still a convex combination of a
    // model and an estimate, and estimates are sums of decoded differences: the hull holds up to
    // the codec's rounding.
    const std::vector<float> mean = test::meanOf(result.finals);
    for (const auto& s : result.finals) {
      CHECK(test::maxAbsDiff(s.params, mean) < 1e-3);
      for (std::size_t k = 0; k < n; ++k) {
        CHECK(s.params[k] >= hull.low[k] - 1e-3f);
        CHECK(s.params[k] <= hull.high[k] + 1e-3f);
      }
    }
    // One anchor per stream (the root sends down only, the leaves up only, the others both),
    // plus at most one for each message a receiver missed: none on an idle machine, a few when
    // the host is so loaded that a message finds no send buffer in time.
    double misses = 0;
    for (const auto& p : result.peers) misses += test::metricOf(p, "tree-easgd.estimate_misses");
    CHECK(misses <= 20);  // of some 3,000 messages
    CHECK(test::metricOf(result.peers[0], "tree-easgd.anchors") >= 1);
    CHECK(test::metricOf(result.peers[0], "tree-easgd.anchors") <= 1 + misses);
    CHECK(test::metricOf(result.peers[1], "tree-easgd.anchors") >= 2);
    CHECK(test::metricOf(result.peers[1], "tree-easgd.anchors") <= 2 + misses);
    CHECK(test::metricOf(result.peers[6], "tree-easgd.anchors") >= 1);
    CHECK(test::metricOf(result.peers[6], "tree-easgd.anchors") <= 1 + misses);
  }
}

TEST_CASE("tree-easgd compressed: reaches the convex optimum with int8 and top-k") {
  test::Watchdog watchdog(180s);
  const std::vector<float> optimum = test::convexOptimum(test::kConvexWeightDecay);
  for (const char* codec : {"int8", "topk:0.2"}) {
    INFO(std::string(codec));
    auto config = test::convexCluster("tree-easgd", 4, 800, 0.1,
                                      {{"alpha", "0.2"}, {"tau_up", "1"}, {"tau_down", "1"}});
    config.peer.training.minStepTime = 2ms;
    const auto result = test::runCompressed(config, codec);
    const double error = test::relativeError(test::meanOf(result.finals), optimum);
    INFO("relative distance of the average model to the optimum: " << error);
    CHECK(error < 0.05);
    for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.12);
  }
}

TEST_CASE("tree-easgd compressed: int8 sends about a quarter of float32's bytes") {
  test::Watchdog watchdog(120s);
  auto bytes = [](const char* codec) {
    auto config = test::algorithmCluster("tree-easgd", 4, 60, 0.1,
                                         {{"tau_up", "1"}, {"tau_down", "1"}});
    test::useMlp(config);
    return test::bytesPerPeer(test::runCompressed(config, codec));
  };
  const double ratio = bytes("int8") / bytes("none");
  // 60 messages per stream, the first an anchor in float32: (1 + 59 x 0.254) / 60.
  const double expected = (1 + 59 * 0.254) / 60;
  INFO(ratio << " of float32's bytes, expected " << expected << " + headers");
  CHECK(ratio >= expected - 0.005);
  CHECK(ratio < expected + 0.02);
}

}  // namespace
}  // namespace gossamer::algorithms
