// Time-boxed rounds (algorithms/time_box.h): the round-seconds setting, the deadline rule, the
// token-weighted merge and what a round agrees on against closed forms; and diloco, local-sgd and
// sparknet with time-boxed rounds in a simulated world of uneven peers: steps in proportion to
// speed, one merged model, the run's end at the cluster's budget on every peer at the same round,
// joiners and restarted peers, and real peers.
#include "algorithms/time_box.h"

#include <vector>

#include <doctest/doctest.h>

#include "algorithms/diloco.h"
#include "engine/builtin.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/forwarding_context.h"
#include "tests/engine/sim/sim_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using Clock = engine::Clock;

TEST_CASE("time box: round-seconds is off, auto or a positive number of seconds") {
  CHECK_FALSE(RoundTime::parse("diloco", "off").enabled());
  CHECK_FALSE(RoundTime::parse("diloco", "0").enabled());
  CHECK(RoundTime::parse("diloco", "auto").automatic);
  CHECK(RoundTime::parse("diloco", "2.5").seconds == 2.5);
  for (const char* bad : {"", "-1", "fast", "2s", "nan", "inf"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(RoundTime::parse("diloco", bad),
                      doctest::Contains("diloco.round-seconds must be off, auto or"));
  }
}

TEST_CASE("time box: a peer stops before the step that would not fit, after one step at least") {
  TimeBox box(RoundTime{.seconds = 1.0}, 50);
  const Clock::time_point t0{};
  box.begin(t0, 100, 0.0);
  // 300 ms steps: after the third (0.9 s) a fourth would end at 1.2 s.
  CHECK_FALSE(box.due(t0 + 300ms));
  CHECK_FALSE(box.due(t0 + 600ms));
  CHECK(box.due(t0 + 900ms));
  CHECK(box.steps() == 3);
  // A step longer than the round: the round is due after it.
  TimeBox slow(RoundTime{.seconds = 1.0}, 50);
  slow.begin(t0, 100, 0.0);
  CHECK(slow.due(t0 + 1500ms));
  // auto: the first round is one step (it measures the speeds); merged() sets the next ones.
  TimeBox automatic(RoundTime{.automatic = true}, 2);
  automatic.begin(t0, 100, 0.0);
  CHECK(automatic.due(t0 + 100ms));
  CHECK(automatic.roundSeconds() == 0);
}

TEST_CASE(
    "time box: the merge weights each model by its steps and every member agrees on the spend") {
  const std::unique_ptr<kernels::Compute> cpu = kernels::cpu::makeCompute();
  kernels::Compute& compute = *cpu;
  const Clock::time_point t0{};
  // Three members: 4 steps of w = (1, 2), 2 steps of (4, 8), 1 step of (10, 0); the middle one
  // a joiner that knows no budget or spend.
  struct Member {
    std::vector<float> w;
    int steps;
    std::optional<double> spent;
  };
  const std::vector<Member> members{
      {{1, 2}, 4, 30.0}, {{4, 8}, 2, std::nullopt}, {{10, 0}, 1, 30.0}};
  std::vector<float> sum(2 + TimeBox::kTailFloats, 0.0f);
  for (const Member& m : members) {
    TimeBox box(RoundTime{.automatic = true}, 10);
    box.begin(t0, 120, m.spent);
    for (int s = 1; s <= m.steps; ++s) box.due(t0 + s * 100ms);
    std::vector<float> packed(2 + TimeBox::kTailFloats);
    box.pack(compute, m.w, packed);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += packed[i] / 3.0f;
  }
  TimeBox box(RoundTime{.automatic = true}, 10);
  box.begin(t0, 120, std::nullopt);
  std::vector<float> merged(2);
  const RoundAgreement agreed = box.merged(compute, sum, 3, merged, t0 + 1s);
  // (4 (1, 2) + 2 (4, 8) + 1 (10, 0)) / 7
  CHECK(merged[0] == doctest::Approx(22.0 / 7));
  CHECK(merged[1] == doctest::Approx(24.0 / 7));
  CHECK(agreed.steps == 7);
  CHECK(agreed.secondsPerStep == doctest::Approx(0.1));
  CHECK(agreed.budget == 120);  // the members that know it
  CHECK(agreed.spent == 37);    // their 30, and the round's 7
  CHECK_FALSE(agreed.ended());
  CHECK(box.spent() == 37.0);                         // the joiner took it
  CHECK(box.roundSeconds() == doctest::Approx(1.0));  // auto: 10 x 0.1 s
  CHECK(box.steps() == 0);
}

TEST_CASE("time box: a round of joiners only agrees on the mean of the budgets they would set") {
  const std::unique_ptr<kernels::Compute> cpu = kernels::cpu::makeCompute();
  kernels::Compute& compute = *cpu;
  const Clock::time_point t0{};
  // Two joiners that saw different clusters at their start: budgets 100 and 140, spend unknown.
  std::vector<float> sum(1 + TimeBox::kTailFloats, 0.0f);
  std::vector<TimeBox> boxes;
  for (double budget : {100.0, 140.0}) {
    boxes.emplace_back(RoundTime{.seconds = 1}, 10);
    boxes.back().begin(t0, budget, std::nullopt);
    boxes.back().due(t0 + 100ms);
    std::vector<float> packed(1 + TimeBox::kTailFloats);
    boxes.back().pack(compute, std::vector<float>{3}, packed);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += packed[i] / 2.0f;
  }
  for (TimeBox& box : boxes) {
    std::vector<float> merged(1);
    const RoundAgreement agreed = box.merged(compute, sum, 2, merged, t0 + 1s);
    CHECK(merged[0] == doctest::Approx(3.0));
    CHECK(agreed.budget == 120);  // (100 + 140) / 2 on both
    CHECK(agreed.spent == 2);     // nothing known before, the round's 2 steps
    CHECK(box.budget() == 120);
  }
}

TEST_CASE("time box: steps taken while a round is in flight count in the next round") {
  const std::unique_ptr<kernels::Compute> cpu = kernels::cpu::makeCompute();
  const Clock::time_point t0{};
  TimeBox box(RoundTime{.seconds = 1}, 10);
  box.begin(t0, 100, 0.0);
  for (int s = 1; s <= 3; ++s) box.count(t0 + s * 100ms);
  std::vector<float> packed(1 + TimeBox::kTailFloats);
  box.pack(*cpu, std::vector<float>{2}, packed);
  CHECK(packed[0] == 6);                     // n x = 3 x 2
  CHECK(packed[1] == 3);                     // n
  CHECK(packed[2] == doctest::Approx(0.1));  // s: 3 steps in 300 ms
  box.count(t0 + 500ms);                     // two steps while the round travels, of 200 ms each
  box.count(t0 + 700ms);
  std::vector<float> merged(1);
  const RoundAgreement agreed = box.merged(*cpu, packed, 1, merged, t0 + 700ms);
  CHECK(merged[0] == 2);
  CHECK(agreed.steps == 3);
  CHECK(agreed.spent == 3);
  CHECK(box.steps() == 2);  // theirs go into the next round
  // A failed round keeps every step for the next one.
  box.pack(*cpu, std::vector<float>{2}, packed);
  CHECK(packed[2] == doctest::Approx(0.2));  // s: the steps since the last pack
  box.count(t0 + 900ms);
  box.failed(t0 + 900ms);
  CHECK(box.steps() == 3);
}

TEST_CASE("time box: fragment f's rounds start f/F of a round after fragment 0's, T apart") {
  const Clock::time_point t0{};
  FragmentClock clock(4);
  clock.begin(t0);
  // T = 2 s: fragment 0 at 0 s (after the first step), fragment 2 at 1 s, then every 2 s.
  CHECK(clock.due(0, t0 + 100ms, 0.1, 2));
  CHECK_FALSE(clock.due(2, t0 + 700ms, 0.25, 2));  // the next step ends at 0.95 s
  CHECK(clock.due(2, t0 + 800ms, 0.25, 2));        // at 1.05 s: past 1 s
  clock.started(2);
  CHECK_FALSE(clock.due(2, t0 + 2700ms, 0.25, 2));  // its next at 3 s
  CHECK(clock.due(2, t0 + 2800ms, 0.25, 2));
  // `auto` before its first measurement (T = 0): every fragment is due at once.
  CHECK(clock.due(3, t0 + 100ms, 0.1, 0));
}

// Four simulated peers of 100, 100, 200 and 400 ms a step running `algorithm` for 60 steps each
// (an even run's budget: 240 cluster steps) with `options`; no invariant broken.
engine::sim::SimResult unevenRun(const std::string& algorithm, engine::OptionValues options,
                                 const engine::Registry& registry = test::registry()) {
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, algorithm, 60);
  c.training.peerStepTimes = {100ms, 100ms, 200ms, 400ms};
  c.training.algorithmOptions = std::move(options);
  engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  return result;
}

// 1 s rounds: each takes 10 + 10 + 5 + 2 (the last peer's third step would end at 1.2 s) = 27
// steps; the round that reaches 240 ends the run: 9 rounds, 243 cluster steps, one model.
void checkOneSecondRounds(const engine::sim::SimResult& result, const std::string& who) {
  REQUIRE(result.peers.size() == 4);
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    CHECK(peer.metrics.at(who + ".cluster_steps") == 243);
    CHECK(peer.metrics.at(who + ".rounds") == 9);
    CHECK(peer.metrics.count(who + ".fallbacks") == 0);
  }
  CHECK(result.peers[0].steps == 90);
  CHECK(result.peers[1].steps == 90);
  CHECK(result.peers[2].steps == 45);
  CHECK(result.peers[3].steps == 18);
  REQUIRE(result.finals.size() == 4);
  for (const auto& final : result.finals) CHECK(final.params == result.finals[0].params);
}

TEST_CASE("time box: diloco on uneven peers takes steps by speed and ends at the budget together") {
  checkOneSecondRounds(unevenRun("diloco", {{"round-seconds", "1"}}), "diloco");

  // auto with h = 10: the first round one step each, then 10 x the mean of 0.1, 0.1, 0.2 and
  // 0.4 s per step = 2 s rounds.
  const engine::sim::SimResult automatic =
      unevenRun("diloco", {{"round-seconds", "auto"}, {"h", "10"}});
  for (const auto& peer : automatic.peers) {
    CAPTURE(peer.id);
    CHECK(peer.metrics.at("diloco.round_seconds") == doctest::Approx(2.0));
    CHECK(peer.metrics.at("diloco.cluster_steps") >= 240);
  }
  // 1 + 5 x 20 steps against 1 + 5 x 5: 4 + 5 x 55 = 279 cluster steps in 6 rounds.
  CHECK(automatic.peers[0].steps == 101);
  CHECK(automatic.peers[3].steps == 26);
}

// diloco set up through a context whose end was already raised to 3x the run's steps, as a member
// reads it that starts after another member's time box raised its end to the budget (the members'
// status carries the raised count).
class RaisedEndContext final : public test::ForwardingContext {
 public:
  using ForwardingContext::ForwardingContext;
  std::uint64_t totalSteps() const override { return 3 * inner_.totalSteps(); }
};
class RaisedEndShell final : public test::AlgorithmShell {
 public:
  using AlgorithmShell::AlgorithmShell;
  void setup(engine::PeerContext& ctx) override {
    RaisedEndContext raised(ctx);
    inner().setup(raised);
  }
};

TEST_CASE("time box: the budget comes from the run's planned steps, not from a raised end") {
  engine::Registry registry = engine::makeBuiltinRegistry();
  engine::AlgorithmSpec spec =
      engine::algorithmSpec<Diloco, DilocoOptions>("diloco, set up with a raised end", "ring");
  spec.make = [](const engine::OptionValues& values) {
    return std::unique_ptr<engine::Algorithm>(std::make_unique<RaisedEndShell>(
        std::make_unique<Diloco>(engine::parseOptions<DilocoOptions>(values))));
  };
  registry.algorithms.add("diloco", "diloco in a test shell", std::move(spec));
  // The same 9 rounds and 243 cluster steps as without the shell: B = 4 x 60, not 4 x 180.
  checkOneSecondRounds(unevenRun("diloco", {{"round-seconds", "1"}}, registry), "diloco");
}

TEST_CASE(
    "time box: local-sgd's and sparknet's time-boxed rounds weight the models and end at "
    "the budget") {
  for (const std::string algorithm : {"local-sgd", "sparknet"}) {
    CAPTURE(algorithm);
    checkOneSecondRounds(unevenRun(algorithm, {{"round-seconds", "1"}}), algorithm);
    // Options that do not fit are refused with the option's name.
    CHECK_THROWS_WITH(
        unevenRun(algorithm, {{"round-seconds", "soon"}}),
        doctest::Contains((algorithm + ".round-seconds must be off, auto or").c_str()));
  }
}

// streaming-diloco, time-boxed, on the same four peers: steps in proportion to speed, the rounds'
// spend agreed, every step counted in it once, and one model at the end.
void checkStreamingRounds(const engine::sim::SimResult& result) {
  const double spent = result.peers[0].metrics.at("streaming-diloco.cluster_steps");
  CHECK(spent >= 240);
  std::uint64_t steps = 0;
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    if (!peer.alive) continue;
    CHECK(peer.metrics.at("streaming-diloco.cluster_steps") == spent);
    CHECK(peer.metrics.count("streaming-diloco.fallbacks") == 0);
    steps += peer.steps;
  }
  // The rounds after the ending one carry the steps taken since it started.
  CHECK(static_cast<double>(steps) >= spent);
  for (const auto& final : result.finals) {
    CAPTURE(final.peer);
    CHECK(final.params == result.finals[0].params);
  }
}

TEST_CASE("time box: streaming-diloco's fragments take steps by speed and end at the budget") {
  const engine::sim::SimResult result = unevenRun(
      "streaming-diloco", {{"round-seconds", "1"}, {"h", "10"}, {"fragments", "2"}, {"tau", "1"}});
  checkStreamingRounds(result);
  REQUIRE(result.peers.size() == 4);
  CHECK(result.peers[0].steps == result.peers[1].steps);
  // 4x the slowest peer's steps, give or take the one step each takes across a round's edge.
  CHECK(result.peers[0].steps == doctest::Approx(4.0 * result.peers[3].steps).epsilon(0.1));
  CHECK(result.peers[0].steps == doctest::Approx(2.0 * result.peers[2].steps).epsilon(0.1));
  // 2 fragments each merged about once a second (the run lasts about 9 s).
  CHECK(result.peers[0].metrics.at("streaming-diloco.rounds") >= 16);
  // auto: h x the mean step time, 10 x 0.2 s.
  const engine::sim::SimResult automatic =
      unevenRun("streaming-diloco", {{"round-seconds", "auto"}, {"h", "10"}, {"fragments", "2"}});
  checkStreamingRounds(automatic);
  for (const auto& peer : automatic.peers)
    CHECK(peer.metrics.at("streaming-diloco.round_seconds") == doctest::Approx(2.0));
  CHECK_THROWS_WITH(unevenRun("streaming-diloco", {{"round-seconds", "-1"}}),
                    doctest::Contains("streaming-diloco.round-seconds must be off, auto or"));
}

// diloco's (one round at a time) and streaming-diloco's (two fragments' rounds in flight).
void checkJoinerAndRestart(const std::string& algorithm, engine::OptionValues options) {
  CAPTURE(algorithm);
  const engine::Registry& registry = test::registry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, algorithm, 60);
  c.training.peerStepTimes = {100ms, 100ms, 200ms, 400ms};
  c.training.algorithmOptions = std::move(options);
  c.faults = {engine::sim::Fault{.at = 2.5, .kind = engine::sim::FaultKind::join},
              engine::sim::Fault{.at = 4.5, .kind = engine::sim::FaultKind::kill, .pick = 1},
              engine::sim::Fault{.at = 5.5, .kind = engine::sim::FaultKind::restartFresh}};
  const engine::sim::SimResult result =
      engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
  for (const auto& v : result.violations) FAIL_CHECK(v.what);
  for (const std::string& f : result.faultLog) MESSAGE(f);
  REQUIRE(result.peers.size() == 5);
  // Every live peer ends on the same model, at the same agreed spend, after rounds with all.
  const double spent = result.peers[0].metrics.at(algorithm + ".cluster_steps");
  CHECK(spent >= 240);
  for (const auto& peer : result.peers) {
    CAPTURE(peer.id);
    if (!peer.alive) continue;
    CHECK(peer.metrics.at(algorithm + ".cluster_steps") == spent);
  }
  for (const auto& final : result.finals) {
    CAPTURE(final.peer);
    CHECK(final.params == result.finals[0].params);
  }
  // The joiner took part in rounds (it took steps and merged).
  CHECK(result.peers[4].metrics.at(algorithm + ".rounds") >= 1);
}

TEST_CASE("time box: a joiner and a restarted peer find the members' round and merge with them") {
  checkJoinerAndRestart("diloco", {{"round-seconds", "1"}});
  checkJoinerAndRestart("streaming-diloco",
                        {{"round-seconds", "1"}, {"h", "10"}, {"fragments", "2"}});
  // With a quorum: the leader after each view change is its first member, until a round completes.
  checkJoinerAndRestart("diloco", {{"round-seconds", "1"}, {"quorum", "0.6"}});
  checkJoinerAndRestart("local-sgd", {{"round-seconds", "1"}, {"quorum", "3"}});
}

// Three real peers of 10, 10 and 30 ms a step (or `stepTimes`), 40 steps each (a budget of 120
// cluster steps): the spend agreed, one model, steps by speed. With `exact`, every step counted
// once (the run ends at a round; streaming-diloco's last rounds carry more steps than the spend).
void checkRealPeers(const std::string& algorithm, engine::OptionValues options, bool exact,
                    std::vector<std::chrono::microseconds> stepTimes = {10ms, 10ms, 30ms}) {
  CAPTURE(algorithm);
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster(algorithm, 3, 40, 0.05, std::move(options));
  config.peer.training.peerStepTimes = std::move(stepTimes);
  const engine::runtime::ClusterResult result =
      engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.peers.size() == 3);
  const double spent = result.peers[0].metrics.at(algorithm + ".cluster_steps");
  CHECK(spent >= 120);
  std::uint64_t steps = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(result.peers[i].metrics.at(algorithm + ".cluster_steps") == spent);
    CHECK(result.peers[i].metrics.count(algorithm + ".fallbacks") == 0);
    CHECK(result.finals[i].params == result.finals[0].params);
    steps += result.peers[i].steps;
  }
  if (exact)
    CHECK(static_cast<double>(steps) == spent);
  else
    CHECK(static_cast<double>(steps) >= spent);
  CHECK(result.peers[0].steps > result.peers[2].steps);
}

TEST_CASE("time box: diloco's time-boxed rounds on real peers of uneven speed") {
  checkRealPeers("diloco", {{"round-seconds", "0.2"}}, true);
}

TEST_CASE("time box: a quorum of two of three real peers, one slower than a round") {
  checkRealPeers("diloco", {{"round-seconds", "0.2"}, {"quorum", "2"}}, true, {10ms, 10ms, 250ms});
}

TEST_CASE("time box: streaming-diloco's time-boxed fragments on real peers of uneven speed") {
  checkRealPeers("streaming-diloco",
                 {{"round-seconds", "0.2"}, {"h", "10"}, {"fragments", "2"}, {"tau", "1"}}, false);
}

}  // namespace
}  // namespace gossamer::algorithms
