// The minimum quorum of time-boxed rounds (algorithms/round_quorum.h): the leader's rule as a pure
// function, the option, and simulated clusters with a peer whose one step outlasts a round.
#include "algorithms/round_quorum.h"

#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::PeerId;
using Ids = std::vector<PeerId>;

const Ids kMembers{11, 22, 33, 44};

std::optional<Ids> close(std::vector<ReadyMember> ready, bool pastDeadline,
                         std::optional<double> stepsToEnd = 1000, std::size_t quorum = 3) {
  return closeRound({.members = kMembers,
                     .ready = ready,
                     .quorum = quorum,
                     .pastDeadline = pastDeadline,
                     .stepsToEnd = stepsToEnd});
}

TEST_CASE("round quorum: the leader closes with everyone, or with a quorum once the time is up") {
  // Everyone ready: all contribute, in member order, whatever the clock says.
  CHECK(close({{44, 1}, {22, 5}, {11, 5}, {33, 5}}, false) == Ids{11, 22, 33, 44});
  // Three of four before the deadline: the round waits.
  CHECK(close({{11, 5}, {22, 5}, {33, 5}}, false) == std::nullopt);
  // After it: those three, in member order.
  CHECK(close({{33, 5}, {11, 5}, {22, 5}}, true) == Ids{11, 22, 33});
  // Fewer than the quorum: it waits, also after the deadline.
  CHECK(close({{11, 5}, {22, 5}}, true) == std::nullopt);
  CHECK(close({{11, 5}, {22, 5}}, true, 1000, 2) == Ids{11, 22});
  // Duplicates and strangers do not count.
  CHECK(close({{11, 5}, {11, 5}, {99, 5}, {22, 5}}, true) == std::nullopt);
}

TEST_CASE("round quorum: the round that spends the budget waits for every member") {
  // 15 steps ready against 20 left: not the last round, so three may close it.
  CHECK(close({{11, 5}, {22, 5}, {33, 5}}, true, 20.0) == Ids{11, 22, 33});
  // 15 against 15: the run would end there without the fourth member's steps.
  CHECK(close({{11, 5}, {22, 5}, {33, 5}}, true, 15.0) == std::nullopt);
  // A leader that does not know the spend (a joiner) never closes without everyone.
  CHECK(close({{11, 5}, {22, 5}, {33, 5}}, true, std::nullopt) == std::nullopt);
  CHECK(close({{11, 5}, {22, 5}, {33, 5}, {44, 1}}, false, std::nullopt) == kMembers);
}

TEST_CASE("round quorum: quorum is all, a member count or a fraction of the members") {
  CHECK_FALSE(QuorumSize::parse("diloco", "all").enabled());
  CHECK(QuorumSize::parse("diloco", "all").of(5) == 5);
  CHECK(QuorumSize::parse("diloco", "3").of(4) == 3);
  CHECK(QuorumSize::parse("diloco", "3").of(2) == 2);  // never more than the members
  CHECK(QuorumSize::parse("diloco", "0.75").of(4) == 3);
  CHECK(QuorumSize::parse("diloco", "0.5").of(5) == 3);  // rounded up
  CHECK(QuorumSize::parse("diloco", "0.01").of(4) == 1);
  for (const char* bad : {"0", "-1", "1.5", "x", "", "nan", "inf"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(QuorumSize::parse("local-sgd", bad),
                      doctest::Contains("local-sgd.quorum must be all, a number of members"));
  }
}

// Two real peers: the second sends the first malformed quorum messages for round 1, then a valid
// decision; the first refuses each of them (counted in "q.refused"), and takes the decision.
class QuorumCheck final : public engine::Algorithm {
 public:
  std::string name() const override { return "quorum-check"; }
  void setup(engine::PeerContext& ctx) override {
    if (done_) return;
    done_ = true;
    const Ids members = ctx.members();
    REQUIRE(members.size() == 2);
    if (ctx.self() == members[1]) {
      const auto send = [&](std::uint64_t round, std::vector<std::uint64_t> integers,
                            std::vector<double> scalars) {
        ctx.send(members[0], engine::Message{.kind = RoundQuorum::kKind,
                                             .step = round,
                                             .scalars = std::move(scalars),
                                             .integers = std::move(integers)});
      };
      // integers[0]: 0 ready (scalar: steps), 1 a decision (the contributors after it).
      send(1, {}, {});                                       // nothing
      send(1, {0}, {-1});                                    // a negative step count
      send(1, {5}, {});                                      // neither ready nor a decision
      send(1, {1, 0xdead}, {});                              // a contributor that is not a member
      send(1, {1, members[0], members[0], members[1]}, {});  // more contributors than members
      send(1000, {0}, {3});                                  // too far ahead
      send(1, {1, members[1]}, {});                          // the decision: without the first
      return;
    }
    RoundQuorum quorum("q", QuorumSize{.count = 1, .fraction = 0});
    std::optional<Ids> decision;
    const engine::Clock::time_point deadline = ctx.now() + 20s;
    while (!decision && ctx.now() < deadline) {
      decision = quorum.decided(ctx, 1);
      if (!decision) ctx.inbox().wait(RoundQuorum::kKind, ctx.now() + 50ms);
    }
    ctx.metrics().set("check.decided", decision == Ids{members[1]} ? 1 : 0);
  }

 private:
  bool done_ = false;
};

TEST_CASE("round quorum: malformed quorum messages are refused and counted, and the decision stands") {
  test::Watchdog watchdog(60s);
  engine::Registry registry = algorithms::makeRegistry();
  registry.algorithms.add(
      "quorum-check", "quorum message checks",
      engine::AlgorithmSpec{"quorum message checks", "mesh", {}, [](const auto&) {
                              return std::make_unique<QuorumCheck>();
                            }});
  const auto result = engine::runtime::runLocalCluster(test::algorithmCluster("quorum-check", 2, 1),
                                                       registry, test::smallData());
  REQUIRE(result.peers.size() == 2);
  CHECK(result.peers[0].metrics.at("check.decided") == 1);
  CHECK(result.peers[0].metrics.at("q.refused") == 6);
}

constexpr std::uint64_t kSteps = 60;

// Four simulated peers, three at 100 ms a step and one at 1.5 s (longer than the 1 s round),
// running `algorithm` time-boxed for an even run's budget of 240 cluster steps.
engine::sim::SimResult slowFourth(const std::string& algorithm, const std::string& quorum) {
  const engine::Registry& registry = test::registry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, algorithm, kSteps);
  c.training.peerStepTimes = {100ms, 100ms, 100ms, 1500ms};
  c.training.algorithmOptions = {{"round-seconds", "1"}, {"quorum", quorum}};
  engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  return result;
}

// Every peer agrees on the spend and ends with the same model; returns the spend.
double checkOneModel(const engine::sim::SimResult& result, const std::string& who) {
  REQUIRE(result.peers.size() == 4);
  const double spent = result.peers[0].metrics.at(who + ".cluster_steps");
  CHECK(spent >= 4 * kSteps);
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    CHECK(peer.error.empty());
    CHECK(peer.metrics.at(who + ".cluster_steps") == spent);
    CHECK(peer.metrics.count(who + ".fallbacks") == 0);
  }
  REQUIRE(result.finals.size() == 4);
  for (const auto& final : result.finals) CHECK(final.params == result.finals[0].params);
  return spent;
}

TEST_CASE("round quorum: three fast peers go on without one whose step outlasts the round") {
  for (const std::string algorithm : {"local-sgd", "diloco"}) {
    CAPTURE(algorithm);
    // Without a quorum every round waits for the slow peer's 1.5 s step.
    const engine::sim::SimResult waiting = slowFourth(algorithm, "all");
    checkOneModel(waiting, algorithm);
    // With three: rounds close 1.1 s after they start (the round and its grace), the slow peer
    // joining every other one with the step it finished meanwhile.
    const engine::sim::SimResult quorum = slowFourth(algorithm, "3");
    const double spent = checkOneModel(quorum, algorithm);
    const auto& slow = quorum.peers[3];
    CHECK(slow.metrics.at(algorithm + ".rounds_left_out") >= 3);
    // Every step merged but those of a last round that left a member out (none here: the round
    // that spends the budget waits for everyone).
    std::uint64_t steps = 0;
    for (const auto& peer : quorum.peers) {
      CAPTURE(peer.id);
      steps += peer.steps;
      CHECK(peer.metrics.count(algorithm + ".steps_dropped") == 0);
    }
    CHECK(static_cast<double>(steps) == spent);
    // The fast peers finish the budget sooner: they no longer wait 0.5 s or more every round.
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(quorum.peers[i].trainSeconds <= 0.85 * waiting.peers[i].trainSeconds);
      CHECK(quorum.peers[i].metrics.count(algorithm + ".rounds_left_out") == 0);
    }
  }
}

TEST_CASE("round quorum: a quorum needs time-boxed rounds, and is refused where it cannot hold") {
  for (const std::string algorithm : {"local-sgd", "sparknet", "diloco"}) {
    CAPTURE(algorithm);
    const auto& spec = test::registry().algorithms.get(algorithm);
    CHECK_THROWS_WITH(spec.make({{"quorum", "3"}}),
                      doctest::Contains((algorithm + ".quorum needs time-boxed rounds").c_str()));
    CHECK_THROWS_WITH(spec.make({{"round-seconds", "auto"}, {"quorum", "many"}}),
                      doctest::Contains((algorithm + ".quorum must be all").c_str()));
    CHECK_NOTHROW(spec.make({{"round-seconds", "auto"}, {"quorum", "0.75"}}));
  }
}

}  // namespace
}  // namespace gossamer::algorithms
