// The simulated world (engine/sim): fibers, virtual time against its closed form, dpsgd's mixing
// against W^k x0, replay from a seed byte for byte, faults, and a broken invariant replayed.
#include "engine/sim/world.h"

#include <cmath>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/sim/fiber.h"
#include "tests/algorithms/algorithm_testing.h"

namespace gossamer::engine::sim {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<const DatasetPair> smallData(const Registry& registry) {
  static std::shared_ptr<const DatasetPair> data = std::make_shared<const DatasetPair>(
      registry.datasets.get("synthetic")({.trainSamples = 2000, .testSamples = 500, .seed = 1}));
  return data;
}

SimConfig baseConfig(std::size_t peers, const std::string& algorithm, std::uint64_t steps) {
  SimConfig c;
  c.peers = peers;
  c.training.model = "softmax";
  c.training.algorithm = algorithm;
  c.training.optimizer.lr = 0.05f;
  c.training.batch = 16;
  c.training.maxSteps = steps;
  c.training.minStepTime = 300ms;
  c.training.commTimeout = 10s;
  c.finalPeerSamples = 100;
  c.evalSamples = 200;
  return c;
}

net::shaped::NetworkProfile uniform(std::chrono::microseconds latency, double bitsPerSecond = 0) {
  return net::shaped::NetworkProfile::uniform(
      "test", {.latency = latency, .bandwidthBitsPerSecond = bitsPerSecond});
}

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

TEST_CASE("sim: Clock::now reads virtual time inside the world and steady time outside") {
  const Clock::time_point virtualNow{std::chrono::hours(1)};
  {
    VirtualClockScope scope(&virtualNow);
    CHECK(Clock::now() == virtualNow);
  }
  CHECK(Clock::now() != virtualNow);
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

SimConfig chaosConfig(std::uint64_t seed, const std::string& algorithm) {
  SimConfig c = baseConfig(16, algorithm, 40);
  c.training.seed = seed;
  c.network = net::shaped::NetworkProfile::geo();
  c.evalSeconds = 2;
  c.faults = drawFaults(seed, 4, 12);
  return c;
}

TEST_CASE("sim: the same seed gives the same report byte for byte, another seed another") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd"}) {
    CAPTURE(algorithm);
    const std::string a =
        format(simulate(chaosConfig(7, algorithm), registry, smallData(registry)));
    const std::string b =
        format(simulate(chaosConfig(7, algorithm), registry, smallData(registry)));
    const std::string other =
        format(simulate(chaosConfig(8, algorithm), registry, smallData(registry)));
    CHECK(a == b);
    CHECK(a != other);
    CHECK(a.find("fault ") != std::string::npos);
  }
}

TEST_CASE("sim: a killed peer leaves the views; the others take every step and finish") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd", "allreduce-sgd"}) {
    CAPTURE(algorithm);
    SimConfig c = baseConfig(8, algorithm, 60);
    c.network = net::shaped::NetworkProfile::geo();
    c.faults = {Fault{.at = 3, .kind = FaultKind::kill, .pick = 2},
                Fault{.at = 6, .kind = FaultKind::join}};
    const SimResult r = simulate(c, registry, smallData(registry));
    for (const Violation& v : r.violations) INFO(v.what);
    CHECK(r.violations.empty());
    REQUIRE(r.peers.size() == 9);
    CHECK_FALSE(r.peers[2].alive);  // pick 2 of peers 1..8
    CHECK(r.peers[2].steps < 60);
    std::size_t finished = 0;
    for (const SimPeerResult& p : r.peers) finished += p.alive && p.finished && p.steps == 60;
    CHECK(finished == 8);  // 7 survivors and the joiner
    CHECK(r.consensus.peers == 8);
  }
}

TEST_CASE("sim: the survivors' invariants: agreement on the dead among those that settled") {
  const std::map<std::string, double> a{{"gosgd.alpha", 0.5}, {"gosgd.dead_weight", 0.25}};
  const std::map<std::string, double> b{{"gosgd.alpha", 0.25}, {"gosgd.dead_weight", 0.25}};
  const std::map<std::string, double> other{{"gosgd.alpha", 0.1}, {"gosgd.dead_weight", 0.1}};
  std::map<std::string, double> unsettled = other;
  unsettled["gosgd.unsettled"] = 1;
  const std::map<std::string, double> created{{"gosgd.alpha", 0.5}, {"gosgd.dead_weight", 0.25}};
  auto check = [](std::vector<Survivor> survivors) {
    return survivorViolations(survivors, {}, 10, true);
  };
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}}).empty());
  // A settled survivor with another record breaks the agreement; an unsettled one does not
  // (the others dropped it near the end: its weight is in their record of the dead).
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &other}})
            .size() == 1);
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &unsettled}})
            .empty());
  // Weight created: 0.5 + 0.5 + 0.25 > 1.
  const std::vector<std::string> more =
      check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &created}});
  REQUIRE(more.size() == 1);
  CHECK(more[0].find("> 1") != std::string::npos);
  CHECK(check({{"peer 1", "a bug", 3, &a}}) == std::vector<std::string>{"peer 1 failed: a bug"});
  CHECK(check({{"peer 1", "", 3, &a}}) ==
        std::vector<std::string>{"peer 1 took 3 of the 10 steps"});
}

// Who saw which membership event when: (observer, event kind, member) -> virtual seconds.
struct EventLog {
  std::map<std::tuple<PeerId, net::membership::EventKind, PeerId>, std::vector<double>> seen;
  void attach(SimConfig& c) {
    c.onMembership = [this](PeerId observer, double at, const net::membership::Event& e) {
      seen[{observer, e.kind, e.member.id}].push_back(at);
    };
  }
  std::vector<double> at(PeerId observer, net::membership::EventKind kind, PeerId member) const {
    const auto it = seen.find({observer, kind, member});
    return it == seen.end() ? std::vector<double>{} : it->second;
  }
  std::size_t count(net::membership::EventKind kind) const {
    std::size_t n = 0;
    for (const auto& [key, times] : seen) n += std::get<1>(key) == kind ? times.size() : 0;
    return n;
  }
};

TEST_CASE("sim: membership is the SWIM protocol: a kill is detected by every survivor in its bounds") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(8, "gosgd", 200);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 10, .kind = FaultKind::kill, .pick = 3}};  // peer 4
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  CHECK(r.membershipMessages > 0);
  // The run's options (lan, T = 1 s, stretched for a 40 ms round trip: unchanged), N = 8.
  const net::membership::Options o = c.membership.forRoundTrip(40ms);
  const double period = std::chrono::duration<double>(o.probeInterval).count();
  const double minSuspicion = std::chrono::duration<double>(o.suspicionTimeout(8)).count();
  const double maxSuspicion = std::chrono::duration<double>(o.suspicionTimeout(8, 0)).count();
  for (PeerId observer = 1; observer <= 8; ++observer) {
    if (observer == 4) continue;
    CAPTURE(observer);
    const std::vector<double> failed = log.at(observer, EventKind::failed, 4);
    REQUIRE(failed.size() == 1);
    // Not before someone's probe failed and the shortest suspicion ran out; by the time every
    // member probed it (two rounds of the round-robin) and the longest one ran out.
    CHECK(failed[0] >= 10 + minSuspicion);
    CHECK(failed[0] <= 10 + 2 * 7 * period + period + maxSuspicion);
  }
  // Nobody else was declared failed on a lossless network, and every peer joined once.
  CHECK(log.count(EventKind::failed) == 7);
  CHECK(log.count(EventKind::joined) == 8);
}

TEST_CASE("sim: membership is the SWIM protocol: a partition splits the views, which merge again") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(6, "gosgd", 600);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 10, .kind = FaultKind::partition, .seconds = 30, .pick = 1}};  // peer 2
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  for (PeerId other = 1; other <= 6; ++other) {
    if (other == 2) continue;
    CAPTURE(other);
    // Each side declares the other failed during the partition ...
    const std::vector<double> failed = log.at(other, EventKind::failed, 2);
    const std::vector<double> failedThere = log.at(2, EventKind::failed, other);
    REQUIRE(failed.size() == 1);
    REQUIRE(failedThere.size() == 1);
    CHECK(failed[0] > 10);
    CHECK(failed[0] < 40);
    CHECK(failedThere[0] < 40);
    // ... and takes it back after it heals (push-pull's reconnect rounds), before the end.
    const std::vector<double> back = log.at(other, EventKind::rejoined, 2);
    const std::vector<double> backThere = log.at(2, EventKind::rejoined, other);
    REQUIRE(back.size() == 1);
    REQUIRE(backThere.size() == 1);
    CHECK(back[0] > 40);
    CHECK(backThere[0] > 40);
  }
  for (const SimPeerResult& p : r.peers) CHECK(p.finished);
}

TEST_CASE("sim: membership is the SWIM protocol: a joiner is admitted by a seed, then known to all") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(6, "dpsgd", 100);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 1, .kind = FaultKind::kill, .pick = 0},  // peer 1, the first seed
              Fault{.at = 8, .kind = FaultKind::join}};            // peer 7
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  // Through the second seed (the first is dead: refused after a round trip).
  const std::vector<double> own = log.at(7, EventKind::joined, 7);
  REQUIRE(own.size() == 1);
  CHECK(own[0] >= 8 + 2 * 0.040);
  CHECK(own[0] < 8 + 1);
  for (PeerId other = 2; other <= 6; ++other) {
    CAPTURE(other);
    const std::vector<double> joined = log.at(other, EventKind::joined, 7);
    REQUIRE(joined.size() == 1);
    CHECK(joined[0] > own[0] - 0.1);
    CHECK(joined[0] < own[0] + 5);
    CHECK(log.at(7, EventKind::joined, other).size() == 1);
  }
  CHECK(log.at(7, EventKind::joined, 1).empty());  // it learns peer 1 only as dead
  REQUIRE(r.peers.size() == 7);
  CHECK(r.peers[6].finished);
  CHECK(r.peers[6].steps == 100);
}

// A ring exchange every step (as dpsgd's, without the mixing) whose peer 2 throws at step 5.
class ThrowsOnce final : public Algorithm {
 public:
  std::string name() const override { return "throws-once"; }
  void setup(PeerContext&) override {}
  double step(PeerContext& ctx) override {
    const std::uint64_t tag = Tags::forRound(1, ctx.step());
    ctx.send(ctx.graph().outNeighbors(ctx.self()),
             Message{.kind = 1, .step = ctx.step(), .tag = tag});
    const double loss = ctx.computeGradients();
    if (ctx.self() == 2 && ctx.step() == 5) throw Error("a bug in step 5");
    std::vector<PeerId> from;
    for (const topology::WeightedPeer& j : ctx.graph().inNeighbors(ctx.self()))
      from.push_back(j.id);
    ctx.gather(from, tag, ctx.commTimeout());
    ctx.applyOptimizer();
    return loss;
  }
};

TEST_CASE("sim: a peer whose algorithm throws is reported; the others drop it and finish") {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("throws-once", "test only",
                          AlgorithmSpec{"test only", "ring", {}, [](const OptionValues&) {
                                          return std::make_unique<ThrowsOnce>();
                                        }});
  SimConfig c = baseConfig(6, "throws-once", 40);
  c.network = net::shaped::NetworkProfile::geo();
  const SimResult r = simulate(c, registry, smallData(registry));
  REQUIRE(r.violations.size() == 1);
  CHECK(r.violations[0].what == "peer 2 failed: a bug in step 5");
  for (const SimPeerResult& p : r.peers) {
    CAPTURE(p.id);
    CHECK(p.finished == (p.id != 2));
    CHECK(p.steps == (p.id == 2 ? 5 : 40));
  }
  // The neighbours waited for it until its failure was detected, not until the 10 s deadlines.
  CHECK(r.virtualSeconds < 40 * 0.3 + 10);
}

// A test-only algorithm with a bug that shows only after a failure: once the members shrink, it
// writes NaN into its model. The invariant "every final model is finite" catches it.
class BreaksAfterFailure final : public Algorithm {
 public:
  std::string name() const override { return "breaks-after-failure"; }
  void setup(PeerContext& ctx) override {
    if (seen_ > 0 && ctx.members().size() < seen_) ctx.params()[0] = std::nanf("");
    seen_ = ctx.members().size();
  }

 private:
  std::size_t seen_ = 0;
};

TEST_CASE("sim: a broken invariant is reported, and the same seed replays the same failure") {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("breaks-after-failure", "test only",
                          AlgorithmSpec{"test only", "ring", {}, [](const OptionValues&) {
                                          return std::make_unique<BreaksAfterFailure>();
                                        }});
  auto run = [&](std::uint64_t seed) {
    SimConfig c = chaosConfig(seed, "breaks-after-failure");
    c.faults = drawFaults(seed, 2, 12, {FaultKind::kill, FaultKind::straggler});
    return simulate(c, registry, smallData(registry));
  };
  // A seed whose schedule kills someone breaks the invariant; one without a kill does not.
  std::optional<std::uint64_t> breaking, clean;
  for (std::uint64_t seed = 1; seed < 60 && (!breaking || !clean); ++seed) {
    const SimResult r = run(seed);
    const bool killed = std::any_of(r.faultLog.begin(), r.faultLog.end(), [](const std::string& f) {
      return f.find("kill") != std::string::npos;
    });
    CHECK(r.violations.empty() == !killed);
    (killed ? breaking : clean) = seed;
  }
  REQUIRE(breaking);
  REQUIRE(clean);
  const SimResult first = run(*breaking);
  const SimResult again = run(*breaking);
  REQUIRE_FALSE(first.violations.empty());
  CHECK(first.violations.front().what.find("not finite") != std::string::npos);
  CHECK(format(first) == format(again));
}

}  // namespace
}  // namespace gossamer::engine::sim
