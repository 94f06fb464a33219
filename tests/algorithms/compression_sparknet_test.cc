// sparknet with compression on (algorithms/sparknet.h, "Compressed"): the workers send their
// changes from the anchor and the master the mean change, so the convex optimum is still reached
// with int8 and top-k (error feedback on), every peer ends with the same bits, and the bytes on the
// wire shrink. A round that fails for a peer (a refused answer, a peer killed mid-run) costs it
// its anchor: the next round mixes its float32 model with the others' changes and everyone
// re-anchors.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/sparknet.h"
#include "kernels/codec.h"
#include "tests/algorithms/compression_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// 4 peers of sparknet (tau 4) on the strongly convex problem (weight decay 0.05, batch 64, SGD
// with lr 0.1) for `steps` steps, payloads through `codec` with error feedback. `prepare` may
// change the configuration further (a kill, another model); `registry` and `algorithm` may name
// a wrapped sparknet ("spoiled-sparknet", below).
engine::runtime::ClusterResult convexRun(
    const std::string& codec, std::uint64_t steps,
    const std::function<void(engine::runtime::ClusterConfig&)>& prepare = {},
    const engine::Registry& registry = test::registry(),
    const std::string& algorithm = "sparknet") {
  auto config = test::convexCluster(algorithm, 4, steps, 0.1, {{"tau", "4"}});
  if (prepare) prepare(config);
  return test::runCompressed(config, codec, registry);
}

const std::vector<float>& optimum() {
  static const std::vector<float> w = test::convexOptimum(test::kConvexWeightDecay);
  return w;
}

TEST_CASE("compression: sparknet averages compressed changes and ends with identical models") {
  test::Watchdog watchdog(60s);
  const auto plain = convexRun("none", 400);
  for (const auto& p : plain.peers) CHECK(p.metrics.count("sparknet.anchors") == 0);
  for (const std::string codec : {"int8", "topk:0.1"}) {
    const auto got = convexRun(codec, 400);
    const double error = test::relativeError(test::meanOf(got.finals), optimum());
    INFO("sparknet " << codec << ": " << error << " from the optimum (float32: "
                     << test::relativeError(test::meanOf(plain.finals), optimum()) << ")");
    CHECK(error < 0.05);
    CHECK(got.consensus.distance == 0);  // every peer applies the same decoded mean change
    for (const auto& p : got.peers) {
      CHECK(p.steps == 400);
      // Only the first round sends float32 models: every later one is a compressed change.
      CHECK(test::metricOf(p, "sparknet.anchors") == 1);
      CHECK(test::metricOf(p, "sparknet.rounds") == 100);
      CHECK(test::metricOf(p, "sparknet.missing") == 0);
    }
  }
}

// Bytes per peer of 100 sparknet steps (tau 4: 25 rounds) on an MLP of ~43k parameters, where
// headers are a small part of the traffic.
double mlpBytes(const std::string& codec) {
  const auto result = convexRun(codec, 100, test::useMlp);
  CHECK(result.consensus.distance == 0);
  return test::bytesPerPeer(result);
}

TEST_CASE("compression: sparknet with int8 sends well under half of float32's bytes") {
  test::Watchdog watchdog(60s);
  const double ratio = mlpBytes("int8") / mlpBytes("none");
  // One float32 round of 25, then int8's 1 byte + a 4-byte scale per 256 elements: about 0.28.
  INFO("int8: " << ratio << " of float32's bytes");
  CHECK(ratio < 0.4);
  CHECK(ratio > 0.25);
}

// Peer `killed` of 4 dies after 100 of 400 steps (comm timeout 1 s); the survivors finish every
// step, re-anchor with a float32 round, and end near the optimum on one common model.
void checkSurvivesKill(const std::string& codec, std::size_t killed) {
  const auto result = convexRun(codec, 400, [killed](engine::runtime::ClusterConfig& config) {
    config.peer.training.commTimeout = std::chrono::seconds(1);
    config.peer.training.minStepTime = std::chrono::milliseconds(5);  // the kill comes mid-run
    test::killPeerAt(config, killed, 100);
  });
  CHECK(result.peers[killed].steps < 400);
  std::vector<engine::runtime::Snapshot> survivors;
  for (std::size_t i = 0; i < 4; ++i) {
    if (i == killed) continue;
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(p.steps == 400);
    CHECK(test::metricOf(p, "sparknet.rounds") >= 80);
    // The start, then at least once after the kill (a missed round or the new view's setup).
    CHECK(test::metricOf(p, "sparknet.anchors") >= 2);
    for (float v : result.finals[i].params) REQUIRE(std::isfinite(v));
    survivors.push_back(result.finals[i]);
  }
  for (const auto& s : survivors) CHECK(s.params == survivors.front().params);
  const double error = test::relativeError(test::meanOf(survivors), optimum());
  INFO(codec << ", peer " << killed << " killed: " << error << " from the optimum");
  CHECK(error < 0.05);
}

TEST_CASE("compression: sparknet survives a worker killed mid-run") {
  test::Watchdog watchdog(60s);
  checkSurvivesKill("int8", 2);
}

TEST_CASE("compression: sparknet survives its master killed mid-run") {
  test::Watchdog watchdog(60s);
  checkSurvivesKill("topk:0.1", 0);
}

// One message that peer `from` sends in round `step` (a step count) with kind `kind`, spoiled for
// recipient `to`: it gets a float32 copy one value too long, which it refuses at once (no
// deadline to wait out), while the other recipients get the message as it was.
struct Spoil {
  engine::PeerId from = 0;
  std::uint32_t kind = 0;
  std::uint64_t step = 0;
  engine::PeerId to = 0;
};

class SpoilingContext final : public test::ForwardingContext {
 public:
  SpoilingContext(engine::PeerContext& inner, std::vector<Spoil> spoils)
      : ForwardingContext(inner), spoils_(std::move(spoils)) {}
  void send(std::span<const engine::PeerId> to, const engine::Message& message) override {
    for (const Spoil& s : spoils_) {
      if (s.kind != message.kind || s.step != message.step) continue;
      std::vector<engine::PeerId> others;
      for (engine::PeerId peer : to)
        if (peer != s.to) others.push_back(peer);
      if (others.size() == to.size()) continue;
      ForwardingContext::send(others, message);
      engine::Message spoiled = message;
      std::vector<float> longer(message.payloads.at(0).begin(), message.payloads.at(0).end());
      longer.push_back(0.5f);
      spoiled.payloads = {longer};
      spoiled.owner = nullptr;
      spoiled.compressible.clear();  // float32: the residuals are the honest copy's business
      ForwardingContext::send(std::span<const engine::PeerId>(&s.to, 1), spoiled);
      return;
    }
    ForwardingContext::send(to, message);
  }
  using ForwardingContext::send;

 private:
  std::vector<Spoil> spoils_;
};

class Spoiler final : public test::AlgorithmShell {
 public:
  Spoiler(std::unique_ptr<engine::Algorithm> inner, std::vector<Spoil> spoils)
      : AlgorithmShell(std::move(inner)), spoils_(std::move(spoils)) {}

 protected:
  std::unique_ptr<engine::PeerContext> wrap(engine::PeerContext& ctx) override {
    std::vector<Spoil> mine;
    for (const Spoil& s : spoils_)
      if (s.from == ctx.self()) mine.push_back(s);
    if (mine.empty()) return AlgorithmShell::wrap(ctx);
    return std::make_unique<SpoilingContext>(ctx, std::move(mine));
  }

 private:
  std::vector<Spoil> spoils_;
};

// The built-ins plus "spoiled-sparknet": sparknet spoiling `spoils`.
engine::Registry spoilingRegistry(std::vector<Spoil> spoils) {
  engine::Registry registry = makeRegistry();
  engine::AlgorithmSpec spec = registry.algorithms.get("sparknet");
  spec.make = [make = spec.make, spoils](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<Spoiler>(make(values), spoils));
  };
  registry.algorithms.add("spoiled-sparknet", "sparknet, spoiling some messages", std::move(spec));
  return registry;
}

// Peer ids are index + 1; the master is peer 1 (the star's center). Round r ends step 4 r.
constexpr engine::PeerId kMaster = 1, kWorker = 3;
constexpr std::size_t kWorkerIndex = kWorker - 1;

// The convex run with int8 and `spoils`, checked against the float32 run with `float32Spoils`
// (the same rounds lost for the same peers): the compressed run ends within 1e-3 (relative) of
// the float32 one, on identical models. Without spoils the two end 7e-5 apart; a change turned
// into the model a + d_j instead of a - d_j in the mixed round leaves them 9e-3 apart.
engine::runtime::ClusterResult checkSpoiledRun(const std::vector<Spoil>& spoils,
                                               const std::vector<Spoil>& float32Spoils) {
  const auto got = convexRun("int8", 400, {}, spoilingRegistry(spoils), "spoiled-sparknet");
  const auto plain =
      convexRun("none", 400, {}, spoilingRegistry(float32Spoils), "spoiled-sparknet");
  const double apart = test::relativeError(test::meanOf(got.finals), test::meanOf(plain.finals));
  INFO("int8 ends " << apart << " from float32, "
                    << test::relativeError(test::meanOf(got.finals), optimum())
                    << " from the optimum");
  CHECK(apart < 1e-3);
  CHECK(got.consensus.distance == 0);
  for (const auto& p : got.peers) CHECK(p.steps == 400);
  return got;
}

TEST_CASE("compression: sparknet re-anchors everyone after a worker refused a mean change") {
  test::Watchdog watchdog(60s);
  // Round 98: the worker keeps w_i and loses its anchor. Round 99: it sends its float32 model,
  // which the master averages with the models a - d_j of the others' changes, and everyone
  // re-anchors. Round 100 is compressed again.
  const std::vector<Spoil> spoils = {{kMaster, Sparknet::kAverage, 392, kWorker}};
  const auto result = checkSpoiledRun(spoils, spoils);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(test::metricOf(p, "sparknet.anchors") == 2);
    CHECK(test::metricOf(p, "sparknet.missing") == 0);
    CHECK(test::metricOf(p, "sparknet.refused") == (i == kWorkerIndex ? 1 : 0));
    CHECK(test::metricOf(p, "sparknet.rounds") == (i == kWorkerIndex ? 99 : 100));
  }
}

TEST_CASE("compression: sparknet keeps w_i on a worker without an anchor that gets a mean change") {
  test::Watchdog watchdog(60s);
  // Round 97 as round 98 above. Round 98: the master refuses the worker's model, so the others'
  // changes make a mean change, which the worker cannot apply without an anchor: it keeps w_i
  // (float32 does the same when it refuses that round's average too). Round 99: its model
  // re-anchors everyone.
  const auto result = checkSpoiledRun(
      {{kMaster, Sparknet::kAverage, 388, kWorker}, {kWorker, Sparknet::kModel, 392, kMaster}},
      {{kMaster, Sparknet::kAverage, 388, kWorker},
       {kWorker, Sparknet::kModel, 392, kMaster},
       {kMaster, Sparknet::kAverage, 392, kWorker}});
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(test::metricOf(p, "sparknet.anchors") == 2);
    CHECK(test::metricOf(p, "sparknet.missing") == 0);
    CHECK(test::metricOf(p, "sparknet.refused") == (i == kWorkerIndex || i == 0 ? 1 : 0));
    CHECK(test::metricOf(p, "sparknet.unanchored") == (i == kWorkerIndex ? 1 : 0));
    CHECK(test::metricOf(p, "sparknet.rounds") == (i == kWorkerIndex ? 98 : 100));
  }
}

}  // namespace
}  // namespace gossamer::algorithms
