// Comm wait against its closed form, through the real runtime and in the simulator: two peers on
// a link of one-way latency L, steps padded to S, and an algorithm that exchanges one message
// with the other peer each step, either waiting for it before computing (blocking: a gather) or
// after (asynchronous: the message travels during the compute, then Inbox::wait). Both peers
// start together, so each blocking step waits L and takes L + S; each asynchronous step waits
// L - S and takes L (L > S). (A skew between the peers' starts moves one peer's waits up and the
// other's down by the same amount: summed over the two peers the closed form holds.) The finish
// after the last step is the finish barrier, all of it waiting: F, on both sides of the fraction.
// Over n steps, summed over the peers:
//   blocking      sum (n L + F_i) / sum (n (L + S) + F_i)
//   asynchronous  sum (n (L - S) + F_i) / sum (n L + F_i)
// F is one latency in the simulator; a real peer's barrier may first open a link (a few round
// trips), so there F_i is the peer's measured finish. And a fraction is never above 1.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/runtime/cluster.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer {
namespace {

using namespace std::chrono_literals;
using engine::Algorithm;
using engine::AlgorithmSpec;
using engine::OptionValues;
using engine::PeerContext;
using engine::PeerId;

constexpr std::uint32_t kPing = 1;

// One message to every other member per step, waited for before the compute (blocking) or after
// it (overlapped). setup() exchanges once, off the clock, so the links are open before it starts.
class Ping final : public Algorithm {
 public:
  explicit Ping(bool overlapped) : overlapped_(overlapped) {}
  std::string name() const override { return "ping"; }

  void setup(PeerContext& ctx) override {
    others_.clear();
    for (PeerId id : ctx.members())
      if (id != ctx.self()) others_.push_back(id);
    const std::uint64_t tag = engine::Tags::forRound(kPing + 1, 0);
    ctx.send(others_, {.kind = kPing + 1, .tag = tag});
    ctx.gather(others_, tag, ctx.commTimeout());
  }

  double step(PeerContext& ctx) override {
    const std::uint64_t t = ctx.step();
    const std::uint64_t tag = engine::Tags::forRound(kPing, t);
    ctx.send(others_, {.kind = kPing, .step = t, .tag = tag});
    double loss = 0;
    if (!overlapped_) {
      ctx.gather(others_, tag, ctx.commTimeout());
      loss = ctx.computeGradients();
    } else {
      loss = ctx.computeGradients();
      const auto deadline = ctx.now() + ctx.commTimeout();
      while (received_[t] < others_.size() && ctx.inbox().wait(kPing, deadline)) {
        for (const engine::Incoming& m : ctx.inbox().drain(kPing)) ++received_[m.step];
      }
      received_.erase(t);
    }
    ctx.applyOptimizer();
    return loss;
  }

 private:
  const bool overlapped_;
  std::vector<PeerId> others_;
  std::map<std::uint64_t, std::size_t> received_;  // messages of each step so far
};

engine::Registry pingRegistry() {
  engine::Registry registry = algorithms::makeRegistry();
  for (const bool overlapped : {false, true}) {
    registry.algorithms.add(
        overlapped ? "ping-overlapped" : "ping-blocking", "test only",
        AlgorithmSpec{"test only", "ring", {}, [overlapped](const OptionValues&) {
                        return std::make_unique<Ping>(overlapped);
                      }});
  }
  return registry;
}

constexpr std::uint64_t kSteps = 20;
constexpr auto kLatency = 100ms;
constexpr auto kStepTime = 50ms;

double seconds(std::chrono::microseconds d) { return std::chrono::duration<double>(d).count(); }

// The closed form above, for peers whose finishes took `finishes` seconds.
double closedForm(bool overlapped, const std::vector<double>& finishes) {
  const double n = kSteps, l = seconds(kLatency), s = seconds(kStepTime);
  const double wait = overlapped ? l - s : l, step = overlapped ? l : l + s;
  double waited = 0, took = 0;
  for (double f : finishes) {
    waited += n * wait + f;
    took += n * step + f;
  }
  return waited / took;
}

net::shaped::NetworkProfile linkOf(std::chrono::microseconds latency) {
  return net::shaped::NetworkProfile::uniform("test", {.latency = latency});
}

TEST_CASE("comm wait: blocking and asynchronous exchanges against their closed form, real peers") {
  test::Watchdog watchdog(120s);
  const engine::Registry registry = pingRegistry();
  for (const bool overlapped : {false, true}) {
    CAPTURE(overlapped);
    auto config =
        test::algorithmCluster(overlapped ? "ping-overlapped" : "ping-blocking", 2, kSteps);
    config.peer.network.profile = linkOf(kLatency);
    config.peer.training.minStepTime = kStepTime;
    const auto result = engine::runtime::runLocalCluster(config, registry, test::smallData());
    double waited = 0, took = 0;
    std::vector<double> finishes;
    for (const auto& peer : result.peers) {
      CAPTURE(peer.peer);
      CHECK(peer.steps == kSteps);
      CHECK(peer.commWaitFraction <= 1.0);
      CHECK(peer.finishSeconds >= seconds(kLatency));
      waited += peer.commWaitSeconds;
      took += peer.wallSeconds + peer.finishSeconds;
      finishes.push_back(peer.finishSeconds);
    }
    // Timers and sleeps run late on a loaded machine, by a few milliseconds each: they lengthen
    // waits and steps alike, which moves the fraction by far less than 10%.
    CHECK(waited / took == doctest::Approx(closedForm(overlapped, finishes)).epsilon(0.10));
  }
}

TEST_CASE("comm wait: the same exchanges in the simulator, exactly") {
  const engine::Registry registry = pingRegistry();
  for (const bool overlapped : {false, true}) {
    CAPTURE(overlapped);
    engine::sim::SimConfig c;
    c.peers = 2;
    c.training = test::algorithmCluster("ping", 2, kSteps).peer.training;
    c.training.algorithm = overlapped ? "ping-overlapped" : "ping-blocking";
    c.training.minStepTime = kStepTime;
    c.network = linkOf(kLatency);
    c.finalPeerSamples = 0;
    const engine::sim::SimResult r = engine::sim::simulate(c, registry, test::smallData());
    REQUIRE(r.violations.empty());
    for (const auto& peer : r.peers) {
      CAPTURE(peer.id);
      CHECK(peer.steps == kSteps);
      CHECK(peer.finishSeconds == doctest::Approx(seconds(kLatency)).epsilon(1e-9));
      CHECK(peer.commWaitFraction ==
            doctest::Approx(closedForm(overlapped, {seconds(kLatency)})).epsilon(1e-9));
    }
  }
}

// An algorithm whose only exchange is in finish() (diloco with a round longer than the run: the
// outer all-reduce at the end) waits almost all of its time there: the fraction counts those
// waits over a time that includes them, so it stays below 1.
TEST_CASE("comm wait: the waits of finish() count, over a time that includes them") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("diloco", 2, 6, 0.05, {{"h", "50"}});
  config.peer.network.profile = linkOf(50ms);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  for (const auto& peer : result.peers) {
    CAPTURE(peer.peer);
    CHECK(peer.commWaitSeconds >= 0.1);  // the outer all-reduce: at least two one-way latencies
    CHECK(peer.finishSeconds >= peer.commWaitSeconds - peer.wallSeconds);
    CHECK(peer.commWaitFraction > 0.5);
    CHECK(peer.commWaitFraction <= 1.0);
  }
}

}  // namespace
}  // namespace gossamer
