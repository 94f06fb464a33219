// The simulated world (engine/sim): fibers run one at a time, Clock reads virtual time inside
// the world, virtual time against its closed form (steps alone, and dpsgd over latency and
// bandwidth), dpsgd's mixing against W^k x0, and a message to self handed over at once.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/sim/fiber.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::engine::sim::testing {
namespace {

TEST_CASE("sim: fibers run one at a time, in the order they are resumed") {
  std::vector<int> order;
  Fiber* a = nullptr;
  Fiber fa(
      [&] {
        order.push_back(1);
        a->yield();
        order.push_back(3);
      },
      64 * 1024);
  a = &fa;
  Fiber fb([&] { order.push_back(2); }, 64 * 1024);
  fa.resume();
  fb.resume();
  CHECK(fb.done());
  CHECK_FALSE(fa.done());
  fa.resume();
  CHECK(fa.done());
  CHECK(order == std::vector<int>{1, 2, 3});
}

// Records what its context's clocks read at each step (one peer's: they all read the same).
class RecordsTime final : public Algorithm {
 public:
  explicit RecordsTime(
      std::vector<std::pair<Clock::time_point, std::chrono::system_clock::time_point>>* out)
      : out_(out) {}
  std::string name() const override { return "records-time"; }
  void setup(PeerContext&) override {}
  void afterStep(PeerContext& ctx) override {
    if (ctx.self() == 1) out_->emplace_back(ctx.now(), ctx.wallNow());
  }

 private:
  std::vector<std::pair<Clock::time_point, std::chrono::system_clock::time_point>>* out_;
};

TEST_CASE("sim: an algorithm's now and wallNow read virtual time, the host's clock is untouched") {
  std::vector<std::pair<Clock::time_point, std::chrono::system_clock::time_point>> seen;
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("records-time", "test only",
                          AlgorithmSpec{"test only", "ring", {}, [&](const OptionValues&) {
                                          return std::make_unique<RecordsTime>(&seen);
                                        }});
  const SimConfig c = baseConfig(2, "records-time", 5);  // 300 ms a step, nothing else waits
  const Clock::time_point hostBefore = Clock::now();
  simulate(c, registry, smallData(registry));
  REQUIRE(seen.size() == 5);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    CHECK(seen[i].first - seen[i - 1].first == std::chrono::milliseconds(300));
    CHECK(seen[i].second - seen[i - 1].second == std::chrono::milliseconds(300));
  }
  for (const auto& [now, wall] : seen)  // the wall clock is virtual time since the epoch
    CHECK(wall.time_since_epoch() == now.time_since_epoch());
  // Far from the host's clocks: nothing of the host reached the run, and nothing of the run
  // reached the host's (no thread-local clock).
  CHECK(seen[0].second < std::chrono::system_clock::now() - std::chrono::hours(24 * 365));
  CHECK(Clock::now() >= hostBefore);
}

TEST_CASE("sim: virtual time of a run without messages is steps x step time") {
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(3, "none", 10);
  c.network = net::shaped::NetworkProfile::lan();
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  CHECK(r.virtualSeconds == doctest::Approx(3.0).epsilon(1e-9));
  for (const SimPeerResult& p : r.peers) CHECK(p.steps == 10);
}

// dpsgd on a ring over links of latency L (no jitter): a step sends, computes for S, then waits
// for both neighbours' models, sent at the same instant; so every step takes max(S, L + the
// frame's serialization), and the finish barrier one more one-way delay (the finished mark).
TEST_CASE("sim: dpsgd's virtual time equals its closed form") {
  const Registry registry = algorithms::makeRegistry();
  for (const auto& [latencyMs, mbit] :
       std::vector<std::pair<int, double>>{{100, 0}, {400, 0}, {400, 1}}) {
    SimConfig c = baseConfig(4, "dpsgd", 12);
    c.training.topology = "ring";
    c.training.algorithmOptions["ring-order"] = "id";  // the rule alone: no ring surveys
    c.network = uniform(std::chrono::milliseconds(latencyMs), mbit * 1e6);
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    const std::size_t params = 64 * 10 + 10;
    // dpsgd's model message: the params, no scalars or integers.
    const double bytes = static_cast<double>(kFrameHeaderBytes + 4 * params);
    const double serialization = mbit > 0 ? bytes * 8 / (mbit * 1e6) : 0;
    // Two frames leave on different links at once: each link serializes its own.
    const double L = latencyMs / 1000.0;
    const double step = std::max(0.3, L + serialization);
    CAPTURE(latencyMs);
    CAPTURE(mbit);
    CHECK(r.virtualSeconds == doctest::Approx(12 * step + L).epsilon(1e-6));
    for (const SimPeerResult& p : r.peers) {
      CHECK(p.steps == 12);
      CHECK(p.bytesSent == static_cast<std::uint64_t>(12 * 2 * bytes));
    }
  }
}

// With lr 0, dpsgd's models after k steps are W^k x0 for the topology's mixing matrix W.
TEST_CASE("sim: dpsgd with lr 0 mixes exactly as W^k x0") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string topologyName : {"ring", "exponential"}) {
    const std::size_t n = 8, k = 6;
    SimConfig c = baseConfig(n, "dpsgd", k);
    c.training.topology = topologyName;
    c.training.optimizer.lr = 0;
    c.training.initialParams = test::distinctParams;
    c.network = net::shaped::NetworkProfile::geo();
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    REQUIRE(r.finals.size() == n);
    const std::size_t count = r.finals[0].params.size();
    std::vector<PeerId> ids;
    for (std::size_t i = 1; i <= n; ++i) ids.push_back(i);
    const topology::Graph graph =
        registry.topologies.get(topologyName)(topology::TopologyOptions{})->build(ids, 0);
    std::vector<std::vector<double>> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> init = test::distinctParams(i, count);
      x[i].assign(init.begin(), init.end());
    }
    for (std::size_t step = 0; step < k; ++step) {
      std::vector<std::vector<double>> next(n, std::vector<double>(count, 0));
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          const double w = i == j ? graph.selfWeight(ids[i]) : graph.weight(ids[i], ids[j]);
          if (w == 0) continue;
          for (std::size_t q = 0; q < count; ++q) next[i][q] += w * x[j][q];
        }
      }
      x = std::move(next);
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t q = 0; q < count; ++q)
        worst = std::max(worst, std::abs(static_cast<double>(r.finals[i].params[q]) - x[i][q]));
    CAPTURE(topologyName);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("sim: a message to self is handed over at once, as the runtime does (easgd's center)") {
  // easgd's center peer pulls w~ from itself every tau steps: without self-delivery each pull
  // would wait out its timeout.
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(4, "easgd", 40);
  c.network = uniform(1ms);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  CHECK(r.virtualSeconds < 40 * 0.3 + 1);
  for (const SimPeerResult& p : r.peers) {
    CAPTURE(p.id);
    CHECK(p.finished);
    CHECK(p.commWaitSeconds < 1);
  }
}

}  // namespace
}  // namespace gossamer::engine::sim::testing
