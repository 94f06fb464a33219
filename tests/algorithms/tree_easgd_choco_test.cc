// tree-easgd with --compress: models travel as compressed differences from public estimates
// (algorithms/tree_easgd.h, "Compressed"). With learning rate 0 the peers still contract to one
// consensus inside the initial hull, each stream anchoring once; the convex optimum is reached
// with int8 and top-k; the bytes shrink as the codec says.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/codec.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

engine::runtime::ClusterResult run(engine::runtime::ClusterConfig config, const std::string& codec) {
  config.peer.training.compression = {kernels::parseCodec(codec), true};
  return engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
}

TEST_CASE("tree-easgd compressed: with learning rate 0 the models reach one consensus in the hull") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 7;  // a full binary tree of depth 2
  for (const char* codec : {"int8", "topk:0.2"}) {
    INFO(std::string(codec));
    auto config = test::algorithmCluster("tree-easgd", peers, 400, 0.0,
                                         {{"alpha", "0.5"}, {"tau_up", "2,1"}, {"tau_down", "1"}});
    config.peer.training.minStepTime = 1ms;
    config.peer.training.initialParams = test::distinctParams;
    const auto result = run(config, codec);
    const std::size_t n = result.finals[0].params.size();
    std::vector<float> low(n, INFINITY), high(n, -INFINITY);
    for (std::size_t r = 0; r < peers; ++r) {
      const std::vector<float> w = test::distinctParams(r, n);
      for (std::size_t k = 0; k < n; ++k) {
        low[k] = std::min(low[k], w[k]);
        high[k] = std::max(high[k], w[k]);
      }
    }
    // Estimates lag the models they track, but every pull is still a convex combination of a
    // model and an estimate, and estimates are sums of decoded differences: the hull holds up to
    // the codec's rounding.
    const std::vector<float> mean = test::meanOf(result.finals);
    for (const auto& s : result.finals) {
      CHECK(test::maxAbsDiff(s.params, mean) < 1e-3);
      for (std::size_t k = 0; k < n; ++k) {
        CHECK(s.params[k] >= low[k] - 1e-3f);
        CHECK(s.params[k] <= high[k] + 1e-3f);
      }
    }
    // One anchor per stream: the root sends down only, the leaves up only, the others both.
    CHECK(result.peers[0].metrics.at("tree-easgd.anchors") == 1);
    CHECK(result.peers[1].metrics.at("tree-easgd.anchors") == 2);
    CHECK(result.peers[6].metrics.at("tree-easgd.anchors") == 1);
    for (const auto& p : result.peers) CHECK(p.metrics.count("tree-easgd.estimate_misses") == 0);
  }
}

TEST_CASE("tree-easgd compressed: reaches the convex optimum with int8 and top-k") {
  test::Watchdog watchdog(180s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  for (const char* codec : {"int8", "topk:0.2"}) {
    INFO(std::string(codec));
    auto config = test::algorithmCluster("tree-easgd", 4, 800, 0.1,
                                         {{"alpha", "0.2"}, {"tau_up", "1"}, {"tau_down", "1"}});
    config.peer.training.optimizer.weightDecay = weightDecay;
    config.peer.training.minStepTime = 2ms;
    config.peer.training.batch = 64;
    const auto result = run(config, codec);
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
    config.peer.training.model = "mlp";
    config.peer.training.modelConfig.hidden = {2048};
    const auto result = run(config, codec);
    double sum = 0;
    for (const auto& p : result.peers) sum += static_cast<double>(p.bytesSent);
    return sum;
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
