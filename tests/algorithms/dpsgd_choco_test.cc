// dpsgd with --compress: CHOCO-SGD's rule over public estimates (algorithms/dpsgd.h,
// "Compressed"; algorithms/public_estimates.h). With learning rate 0 the network mean is kept and
// the ring reaches it, as uncompressed; each peer anchors exactly once when nothing is lost; the
// convex optimum is reached with every codec; a killed neighbour heals by anchors; a directed
// topology is refused; the bytes shrink as the codec says.
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/dpsgd.h"
#include "algorithms/builtin.h"
#include "kernels/codec.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

engine::runtime::ClusterResult run(engine::runtime::ClusterConfig config, const std::string& codec) {
  return test::runCompressed(std::move(config), codec);
}

double counted(const engine::runtime::ClusterResult& result, std::size_t peer,
               const std::string& metric) {
  return test::metricOf(result.peers[peer], metric);
}

TEST_CASE("dpsgd compressed: with learning rate 0 the network mean is kept and a ring reaches it") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 5;
  for (const char* codec : {"int8", "int4", "topk:0.1"}) {
    INFO(std::string(codec));
    auto config = test::algorithmCluster("dpsgd", peers, 300, 0.0);
    config.peer.training.initialParams = test::distinctParams;
    const auto result = run(config, codec);
    const std::vector<float> oracle =
        test::averageOfDistinct(peers, result.finals[0].params.size());
    // sum_i sum_j W_ij (x^_j - x^_i) = 0 for a symmetric W: the mean moves by rounding only.
    CHECK(test::maxAbsDiff(test::meanOf(result.finals), oracle) < 1e-4);
    for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-3);
    // One anchor at the start, then differences only, plus one for each model a neighbour
    // missed: none on an idle machine (a model finds no send buffer in time only under heavy
    // load).
    double misses = 0;
    for (std::size_t i = 0; i < peers; ++i)
      misses += counted(result, i, "dpsgd.estimate_misses") + counted(result, i, "dpsgd.missing");
    CHECK(misses <= 10);  // of 5 x 2 x 300 models
    for (std::size_t i = 0; i < peers; ++i) {
      CAPTURE(i);
      CHECK(counted(result, i, "dpsgd.anchors") >= 1);
      CHECK(counted(result, i, "dpsgd.anchors") <= 1 + misses);
    }
  }
}

TEST_CASE("dpsgd compressed: reaches the convex optimum's neighbourhood with every codec") {
  test::Watchdog watchdog(240s);
  const std::vector<float> optimum = test::convexOptimum(test::kConvexWeightDecay);
  for (const char* codec : {"fp16", "bf16", "int8", "int4", "topk:0.1", "randk:0.25"}) {
    INFO(std::string(codec));
    const auto result = run(test::convexCluster("dpsgd", 4, 400, 0.1), codec);
    CHECK(test::relativeError(test::meanOf(result.finals), optimum) < 0.05);
    CHECK(result.consensus.distance < 0.01);
  }
}

TEST_CASE("dpsgd compressed: int8 sends a quarter of float32's bytes, top-k 1% a fiftieth") {
  test::Watchdog watchdog(180s);
  auto bytes = [](const char* codec) {
    auto config = test::algorithmCluster("dpsgd", 4, 50, 0.1);
    test::useMlp(config);
    return test::bytesPerPeer(run(config, codec));
  };
  const double plain = bytes("none");
  // 50 steps, the first an anchor in float32: (1 + 49 x share) / 50 of float32's bytes.
  for (const auto& [codec, share] : {std::pair{"int8", 0.254}, std::pair{"topk:0.01", 0.02}}) {
    const double expected = (1 + 49 * share) / 50;
    const double ratio = bytes(codec) / plain;
    INFO(codec << ": " << ratio << " of float32's bytes, expected " << expected << " + headers");
    CHECK(ratio >= expected);
    CHECK(ratio < expected + 0.02);
  }
}

TEST_CASE("dpsgd compressed: a killed neighbour costs its round, then anchors heal the estimates") {
  test::Watchdog watchdog(120s);
  const std::uint64_t steps = 600;
  auto config = test::algorithmCluster("dpsgd", 4, steps, 0.05);
  config.peer.training.minStepTime = 1ms;
  config.peer.training.commTimeout = 5s;
  test::killPeerAt(config, 3, 150);
  const auto result = run(config, "int8");
  CHECK(result.peers[3].steps < steps);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == steps);
    // The start, and the new view of three after the kill.
    CHECK(counted(result, i, "dpsgd.anchors") >= 2);
  }
  CHECK(test::survivorsConsensus(result, 3).accuracy > 0.85);
}

// A context whose gathers lose each received model that `coin` says (as if it never came),
// counting the losses in "test.lost".
class LosingGathers final : public test::ForwardingContext {
 public:
  LosingGathers(engine::PeerContext& inner, test::LossCoin& coin)
      : ForwardingContext(inner), coin_(coin) {}
  engine::GatherResult gather(std::span<const engine::PeerId> from, std::uint64_t tag,
                              engine::Clock::duration timeout) override {
    engine::GatherResult got = inner_.gather(from, tag, timeout);
    engine::GatherResult kept{.messages = {}, .missing = got.missing};
    for (engine::Incoming& m : got.messages) {
      if (coin_.lose()) {
        inner_.metrics().add("test.lost", 1);
        kept.missing.push_back(m.from);
      } else {
        kept.messages.push_back(std::move(m));
      }
    }
    return kept;
  }

 private:
  test::LossCoin& coin_;
};

TEST_CASE("dpsgd compressed: lost models are healed by anchors on request, and training goes on") {
  test::Watchdog watchdog(120s);
  const std::vector<float> optimum = test::convexOptimum(test::kConvexWeightDecay);
  auto coin = std::make_shared<test::LossCoin>(0.1, 11);
  const engine::Registry registry = test::withWrapped(
      makeRegistry(), "dpsgd", "lossy-dpsgd",
      [coin](engine::PeerContext& ctx) { return std::make_unique<LosingGathers>(ctx, *coin); });
  const auto result =
      test::runCompressed(test::convexCluster("lossy-dpsgd", 4, 400, 0.1), "int8", registry);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const double lost = counted(result, i, "test.lost");
    CHECK(lost > 20);  // 10% of 2 x 400 models
    // Each loss here leaves an estimate unknown until its anchor; each loss at a neighbour asks
    // this peer for one. Anchors are fewer than losses (one answers every asker) but come.
    CHECK(counted(result, i, "dpsgd.anchors") > 5);
    CHECK(counted(result, i, "dpsgd.anchors") < 1 + 2 * lost);
  }
  CHECK(test::relativeError(test::meanOf(result.finals), optimum) < 0.05);
  CHECK(result.consensus.distance < 0.01);
}

TEST_CASE("dpsgd compressed: a directed topology is refused at the start, naming the need") {
  auto config = test::algorithmCluster("dpsgd", 3, 5, 0.1);
  config.peer.training.topology = "ring-uni";
  CHECK_THROWS_WITH_AS(run(config, "int8"), doctest::Contains("undirected"), gossamer::Error);
}

TEST_CASE("dpsgd compressed: gamma is validated") {
  const engine::AlgorithmSpec& spec = test::registry().algorithms.get("dpsgd");
  CHECK_THROWS_WITH_AS(spec.make({{"gamma", "1.5"}}), doctest::Contains("dpsgd.gamma"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"gamma", "-0.1"}}), doctest::Contains("dpsgd.gamma"),
                       gossamer::Error);
  CHECK(spec.make({{"gamma", "0.5"}})->name() == "dpsgd");
}

}  // namespace
}  // namespace gossamer::algorithms
