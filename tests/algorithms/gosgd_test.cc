// gosgd (algorithms/gosgd.h): the push-sum rule. The conserved mass and consensus with learning
// rate 0, training, the options, the wire form of a transfer (sent from its escrow buffer, ids as
// integers) and the weight a checkpoint keeps. The other gosgd_*_test.cc files test the bound on
// bytes in flight, failures (loss, kills, a leave) and peers that join or come back with weight 0.
#include "algorithms/gosgd.h"

#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "engine/builtin.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using test::gossipCluster;
using test::metricOf;

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
      CHECK(m.scalars.size() == Gosgd::headerScalars(m.integers) + 1);
      CHECK(m.integers.size() == Gosgd::headerIntegers(m.integers) + 2);
    } else if (m.kind == Gosgd::kAck) {
      ++acks;
      CHECK(m.scalars.size() == Gosgd::headerScalars(m.integers));
      CHECK(m.integers.size() > Gosgd::headerIntegers(m.integers));
    }
  }
  CHECK(transfers > 0);
  CHECK(acks > 0);
  CHECK(metricOf(result.peers[0], "gosgd.escrow") == 0);
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
