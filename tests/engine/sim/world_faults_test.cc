// The simulated world (engine/sim) under faults: the same seed replays a chaos run byte for byte,
// a killed peer leaves the views while the others finish, the survivors' invariants, a peer whose
// algorithm throws, a broken invariant reported and replayed from its seed, and restarts from
// checkpoints.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/sim/world.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::engine::sim::testing {
namespace {

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

TEST_CASE("sim: a killed peer leaves the views, the others take every step and finish") {
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
  // gosgd's own declaration (Algorithm::invariants), as the simulator and chaos check it.
  const Invariants gosgd =
      algorithms::makeRegistry().algorithms.get("gosgd").make({})->invariants();
  auto check = [&](std::vector<Survivor> survivors) {
    return survivorViolations(survivors, {}, 10, gosgd);
  };
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}}).empty());
  // A settled survivor with another record breaks the agreement; an unsettled one does not
  // (the others dropped it near the end: its weight is in their record of the dead).
  const std::vector<std::string> disagree =
      check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &other}});
  REQUIRE_FALSE(disagree.empty());
  CHECK(disagree[0].find("peer 1 reads 0.25 and peer 3 reads 0.1") != std::string::npos);
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

TEST_CASE("sim: a peer whose algorithm throws is reported, the others drop it and finish") {
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

TEST_CASE("world faults: a straggler's slow-down and length can be given, the rest stays drawn") {
  const std::vector<FaultKind> kinds = {FaultKind::kill, FaultKind::straggler};
  const std::vector<Fault> drawn = drawFaults(7, 12, 60, kinds);
  const std::vector<Fault> shaped = drawFaults(7, 12, 60, kinds, {.factor = 4, .seconds = 30});
  REQUIRE(drawn.size() == shaped.size());
  std::size_t stragglers = 0;
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    CHECK(shaped[i].at == drawn[i].at);
    CHECK(shaped[i].kind == drawn[i].kind);
    CHECK(shaped[i].pick == drawn[i].pick);
    if (drawn[i].kind != FaultKind::straggler) continue;
    ++stragglers;
    CHECK(drawn[i].magnitude >= 3);
    CHECK(drawn[i].seconds <= 6);
    CHECK(shaped[i].magnitude == 4);
    CHECK(shaped[i].seconds == 30);
  }
  CHECK(stragglers > 0);
}

}  // namespace
}  // namespace gossamer::engine::sim::testing
