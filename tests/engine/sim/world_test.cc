// The simulated world (engine/sim): fibers, virtual time against its closed form, dpsgd's mixing
// against W^k x0, replay from a seed byte for byte, faults, a broken invariant replayed,
// compressed payloads against the codecs' closed forms, and restarts from checkpoints.
#include "engine/sim/world.h"

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/runtime/payload_codec.h"
#include "engine/sim/fiber.h"
#include "kernels/cpu/cpu_compute.h"
#include "net/mesh/mesh.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

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

TEST_CASE("sim: Clock::now and wallNow read virtual time inside the world, the host's outside") {
  const Clock::time_point virtualNow{std::chrono::hours(1)};
  const std::chrono::system_clock::time_point virtualWall{std::chrono::hours(1)};
  {
    VirtualClockScope scope(&virtualNow);
    CHECK(Clock::now() == virtualNow);
    CHECK(Clock::wallNow() == virtualWall);
  }
  CHECK(Clock::now() != virtualNow);
  CHECK(Clock::wallNow() > virtualWall + std::chrono::hours(24 * 365));
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
  CHECK(
      check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &other}}).size() ==
      1);
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

TEST_CASE(
    "sim: membership is the SWIM protocol: a kill is detected by every survivor in its bounds") {
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

TEST_CASE(
    "sim: membership is the SWIM protocol: a joiner is admitted by a seed, then known to all") {
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

// ---- compression --------------------------------------------------------------------------------

PayloadCompression compressionOf(const std::string& codec, bool errorFeedback = true) {
  return {kernels::parseCodec(codec), errorFeedback};
}

// The simulator counts a frame's header as the real transport does: the size of its Cap'n Proto
// envelope (net::EncodedEnvelope, what the mesh counts in bytesSent besides the payloads).
TEST_CASE("sim: a frame's header bytes are the real wire's") {
  net::wire::EnvelopeHeader header;
  header.tag = 77;
  header.kind = 1;
  header.sender = 0x1234567890abcdefull;
  header.step = 12;
  header.payloads = {{4 * 650, net::wire::Dtype::f32, 650, {}}};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() == kFrameHeaderBytes);
  header.scalars = {0.5};
  header.integers = {1, 2};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() == kFrameHeaderBytes + 8 * 3);
  header.payloads[0] = {662, net::wire::Dtype::bytes, 650,
                        runtime::encodingOf(kernels::parseCodec("int8:256"))};
  CHECK(net::EncodedEnvelope::of(header)->bytes.size() ==
        kFrameHeaderBytes + 8 * 3 + kEncodingBytes);
}

// dpsgd compressed (CHOCO-SGD) on a ring: the first message of each peer to each neighbour is an
// anchor (float32, with the integers {form, seq} and a request {j, seq} for each neighbour's
// estimate), every later one the codec's encoding of a difference with {form, seq}. Their bytes
// follow from kernels/codec.h's layouts.
TEST_CASE("sim: dpsgd's bytes per message with fp16 and int8 equal their closed form") {
  const Registry registry = algorithms::makeRegistry();
  const std::size_t params = 64 * 10 + 10, steps = 12;
  const double latency = 0.1, bandwidth = 1e6;
  for (const auto& [codec, encoded] : std::vector<std::pair<std::string, std::size_t>>{
           {"none", 4 * params},
           {"fp16", 2 * params},
           {"int8:256", 4 * ((params + 255) / 256) + params}}) {
    CAPTURE(codec);
    SimConfig c = baseConfig(4, "dpsgd", steps);
    c.training.topology = "ring";
    c.training.compression = compressionOf(codec);
    c.network = uniform(std::chrono::milliseconds(100), bandwidth);
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    const bool compressed = codec != "none";
    const std::size_t integers = compressed ? 2 : 0;
    const double anchor =
        static_cast<double>(kFrameHeaderBytes + 8 * (integers + 2 * integers) + 4 * params);
    const double later = static_cast<double>(kFrameHeaderBytes + 8 * integers +
                                             (compressed ? kEncodingBytes : 0) + encoded);
    for (const SimPeerResult& p : r.peers)
      CHECK(p.bytesSent == static_cast<std::uint64_t>(2 * (anchor + (steps - 1) * later)));
    // Each step waits for the later of its compute and a frame's latency plus serialization.
    const auto stepTime = [&](double bytes) {
      return std::max(0.3, latency + bytes * 8 / bandwidth);
    };
    CHECK(
        r.virtualSeconds ==
        doctest::Approx(stepTime(anchor) + (steps - 1) * stepTime(later) + latency).epsilon(1e-6));
  }
}

// A test-only exchange around the ring 1 -> 2 -> ... -> n -> 1: each step a peer sends its model,
// marked compressible with its residual and `sent` span, and replaces its model with the one it
// receives. The first value it sent last is its metric "sent0".
class RingPass final : public Algorithm {
 public:
  std::string name() const override { return "ring-pass"; }
  void setup(PeerContext& ctx) override {
    residual_.assign(ctx.params().size(), 0.0f);
    sent_.assign(ctx.params().size(), 0.0f);
  }
  double step(PeerContext& ctx) override {
    const std::size_t n = ctx.members().size();
    const PeerId next = ctx.self() % n + 1, previous = (ctx.self() + n - 2) % n + 1;
    const std::uint64_t tag = Tags::forRound(1, ctx.step());
    Message m{.kind = 1, .step = ctx.step(), .tag = tag, .payloads = {ctx.params()}};
    m.compressible = {{.payload = 0, .residual = residual_, .sent = sent_}};
    ctx.send(std::span<const PeerId>(&next, 1), m);
    GatherResult got = ctx.gather(std::span<const PeerId>(&previous, 1), tag, ctx.commTimeout());
    GOSSAMER_ENFORCE_EQ(got.messages.size(), 1u, "ring-pass: no model from peer {}", previous);
    const std::span<const float> received = got.messages[0].payload(0);
    std::copy(received.begin(), received.end(), ctx.params().begin());
    ctx.metrics().set("sent0", sent_[0]);
    return 0;
  }

 private:
  std::vector<float> residual_, sent_;
};

// Two steps of RingPass with int8: peer i ends with C(C(x_i-2) + e_i-1), where C is the codec's
// encode and decode and e_j = x_j - C(x_j) the residual of its first send (0 without error
// feedback), x_j the initial models: what the kernels' codec gives, bit for bit.
TEST_CASE("sim: receivers read the decoded payloads, and error feedback updates the residuals") {
  Registry registry = algorithms::makeRegistry();
  registry.algorithms.add("ring-pass", "test only",
                          AlgorithmSpec{"test only", "ring", {}, [](const OptionValues&) {
                                          return std::make_unique<RingPass>();
                                        }});
  const kernels::Codec codec = kernels::parseCodec("int8:64");
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  const auto roundTrip = [&](const std::vector<float>& x) {
    std::vector<std::byte> bytes(kernels::encodedBytes(codec, x.size()));
    const std::size_t used = compute->encode(codec, x, {}, bytes, 0);
    std::vector<float> out(x.size());
    compute->decode(codec, std::span<const std::byte>(bytes).first(used), out,
                    kernels::DecodeMode::kOverwrite);
    return out;
  };
  const std::size_t n = 4;
  for (const bool feedback : {true, false}) {
    CAPTURE(feedback);
    SimConfig c = baseConfig(n, "ring-pass", 2);
    c.training.initialParams = test::distinctParams;
    c.training.compression = compressionOf("int8:64", feedback);
    c.network = uniform(std::chrono::milliseconds(10));
    const SimResult r = simulate(c, registry, smallData(registry));
    REQUIRE(r.violations.empty());
    REQUIRE(r.finals.size() == n);
    const std::size_t count = r.finals[0].params.size();
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> from = test::distinctParams((i + n - 1) % n, count);
      const std::vector<float> before = test::distinctParams((i + n - 2) % n, count);
      std::vector<float> second = roundTrip(before);  // what peer i-1 holds after step 1
      if (feedback) {
        const std::vector<float> first = roundTrip(from);
        for (std::size_t q = 0; q < count; ++q) second[q] += from[q] - first[q];
      }
      const std::vector<float> expected = roundTrip(second);
      CAPTURE(i);
      CHECK(r.finals[i].params == expected);
      CHECK(r.peers[(i + n - 1) % n].metrics.at("sent0") == expected[0]);
      CHECK((r.finals[i].params != roundTrip(roundTrip(before))) == feedback);
    }
  }
}

// Real peers of a local cluster (ids 1..N, as the simulator's) whose dpsgd rounds are
// synchronous end with models that depend on nothing but the data and the codec: the simulated
// ones must be the same bits, random-k's draws included.
TEST_CASE("sim: compressed dpsgd ends with the real peers' models, bit for bit") {
  test::Watchdog watchdog(120s);
  for (const std::string codec : {"int8", "randk:0.25"}) {
    CAPTURE(codec);
    runtime::ClusterConfig real = test::algorithmCluster("dpsgd", 4, 20);
    real.peer.training.topology = "ring";
    real.peer.training.compression = compressionOf(codec);
    const runtime::ClusterResult got =
        runtime::runLocalCluster(real, test::registry(), test::smallData());
    SimConfig c;
    c.peers = 4;
    c.training = real.peer.training;
    c.network = net::shaped::NetworkProfile::lan();
    const SimResult simulated = simulate(c, test::registry(), test::smallData());
    REQUIRE(simulated.violations.empty());
    REQUIRE(got.finals.size() == 4);
    REQUIRE(simulated.finals.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(simulated.finals[i].params == got.finals[i].params);
      CHECK(simulated.peers[i].bytesSent == got.peers[i].bytesSent);
    }
  }
}

TEST_CASE("sim: a compressed run is deterministic; random-k draws from the seed") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd"}) {
    CAPTURE(algorithm);
    auto run = [&](std::uint64_t seed, const std::string& codec) {
      SimConfig c = chaosConfig(seed, algorithm);
      c.training.compression = compressionOf(codec);
      return format(simulate(c, registry, smallData(registry)));
    };
    const std::string a = run(7, "randk:0.1");
    CHECK(a == run(7, "randk:0.1"));
    CHECK(a != run(7, "int8"));
    CHECK(a != run(7, "none"));
  }
}

TEST_CASE("sim: compressed dpsgd and gosgd still converge") {
  const Registry registry = algorithms::makeRegistry();
  for (const std::string algorithm : {"dpsgd", "gosgd"}) {
    for (const std::string codec : {"int8", "topk:0.1"}) {
      CAPTURE(algorithm);
      CAPTURE(codec);
      auto run = [&](const std::string& with) {
        SimConfig c = baseConfig(8, algorithm, 150);
        c.training.compression = compressionOf(with);
        c.network = net::shaped::NetworkProfile::lan();
        return simulate(c, registry, smallData(registry));
      };
      const SimResult plain = run("none");
      const SimResult compressed = run(codec);
      REQUIRE(compressed.violations.empty());
      MESSAGE(algorithm, " ", codec, ": ", compressed.consensus.accuracy, " (float32 ",
              plain.consensus.accuracy, ")");
      CHECK(compressed.consensus.accuracy > plain.consensus.accuracy - 0.05);
      // gosgd's few transfers (p = 0.1) are mostly anchors to new partners, in float32.
      if (algorithm == "dpsgd") CHECK(compressed.peers[0].bytesSent < plain.peers[0].bytesSent / 2);
    }
  }
}

// ---- restarts from checkpoints ------------------------------------------------------------------

// Peer 1 takes 0.3 s a step, peers 2-4 3 s (stragglers from their second step): killed at 2.9 s
// after 9 steps, its checkpoint is the one of step 5; restarted at 4 s, when the others have
// taken 2, it resumes at step 5 with the model of its checkpoint (lr 0: its initial one).
// Without checkpoints it joins late: the model of a live peer.
TEST_CASE("sim: a restarted peer resumes at its checkpoint's step with its checkpoint's model") {
  const Registry registry = algorithms::makeRegistry();
  for (const bool checkpoints : {true, false}) {
    CAPTURE(checkpoints);
    SimConfig c = baseConfig(4, "none", 20);
    c.training.optimizer.lr = 0;
    c.training.initialParams = test::distinctParams;
    c.training.checkpointEvery = checkpoints ? 5 : 0;
    c.network = net::shaped::NetworkProfile::lan();
    for (std::uint64_t pick : {1, 2, 3})
      c.faults.push_back(Fault{
          .at = 0, .kind = FaultKind::straggler, .seconds = 1000, .magnitude = 10, .pick = pick});
    c.faults.push_back(Fault{.at = 2.9, .kind = FaultKind::kill, .pick = 0});
    c.faults.push_back(Fault{.at = 4, .kind = FaultKind::restart});
    const SimResult r = simulate(c, registry, smallData(registry));
    for (const std::string& f : r.faultLog) MESSAGE(f);
    REQUIRE(r.violations.empty());
    REQUIRE(r.finals.size() == 4);
    CHECK(r.peers[0].alive);
    CHECK(r.peers[0].steps == 20);
    const std::vector<float> own = test::distinctParams(0, r.finals[0].params.size());
    CHECK((r.finals[0].params == own) == checkpoints);
    if (checkpoints) {
      CHECK(r.peers[0].startStep == 5);
      CHECK(r.faultLog.back().find("peer 1 from its checkpoint of step 5") != std::string::npos);
    } else {
      CHECK(r.faultLog.back().find("without a checkpoint") != std::string::npos);
    }
  }
}

// gosgd restarted from its checkpoint: its new life is later than the killed one (virtual time),
// and the mass invariants hold (live + dead weight <= 1, the survivors agree); replayable.
TEST_CASE("sim: gosgd restarted from a checkpoint keeps its invariants, and the run replays") {
  const Registry registry = algorithms::makeRegistry();
  auto run = [&] {
    SimConfig c = baseConfig(8, "gosgd", 60);
    c.training.checkpointEvery = 5;
    c.network = net::shaped::NetworkProfile::geo();
    c.faults = {Fault{.at = 3, .kind = FaultKind::kill, .pick = 2},
                Fault{.at = 8, .kind = FaultKind::restart}};
    return simulate(c, registry, smallData(registry));
  };
  const SimResult r = run();
  for (const Violation& v : r.violations) INFO(v.what);
  CHECK(r.violations.empty());
  REQUIRE(r.peers.size() == 8);
  CHECK(r.peers[2].alive);
  CHECK(r.peers[2].finished);
  CHECK(r.peers[2].startStep >= 5);
  CHECK(r.faultLog.back().find("from its checkpoint of step") != std::string::npos);
  CHECK(format(r) == format(run()));
}

}  // namespace
}  // namespace gossamer::engine::sim
