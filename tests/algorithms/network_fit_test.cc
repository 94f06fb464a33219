// Defaults that fit the network (algorithms/network_fit.h, network_survey.h): each rule against
// its closed form, the `auto` option type, and simulated clusters on a uniform emulated network
// where every member chooses the same knobs, the ones the closed form gives from the profile.
#include "algorithms/network_fit.h"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "algorithms/diloco.h"
#include "algorithms/dts.h"
#include "algorithms/network_survey.h"
#include "algorithms/time_box.h"
#include "engine/options.h"
#include "engine/sim/world.h"
#include "kernels/cpu/cpu_compute.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// n members, every pair at round trip `rtt` and `bandwidth` bytes/s, but pair (0, 1) at
// `slowBandwidth`; each member's step `step` seconds.
NetworkFacts factsOf(std::size_t n, double step, double rtt, double bandwidth,
                     double slowBandwidth) {
  std::vector<float> steps(n, static_cast<float>(step)), rtts(n * n, 0.0f), bws(n * n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      rtts[i * n + j] = static_cast<float>(rtt);
      bws[i * n + j] = static_cast<float>((i + j == 1) ? slowBandwidth : bandwidth);
    }
  }
  const std::optional<NetworkFacts> facts = NetworkFacts::from(steps, rtts, bws);
  REQUIRE(facts);
  return *facts;
}

TEST_CASE("network fit: exchanges on the slowest pair, in closed form") {
  const NetworkFacts f = factsOf(4, 0.3, 0.2, 10e6, 5e6);
  CHECK(f.members() == 4);
  CHECK(f.slowestStepSeconds() == doctest::Approx(0.3));
  CHECK(f.maxLatencySeconds() == doctest::Approx(0.1));
  // 40 MB: direct 2 (0.1 + 10 MB / 5 MB/s); ring 6 hops of the same; master 2 (0.1 + 40 / 5).
  CHECK(f.exchangeSeconds(Exchange::kDirect, 40e6) == doctest::Approx(4.2));
  CHECK(f.exchangeSeconds(Exchange::kRing, 40e6) == doctest::Approx(12.6));
  CHECK(f.exchangeSeconds(Exchange::kMaster, 40e6) == doctest::Approx(16.2));
  CHECK(f.wireSeconds(Exchange::kDirect, 40e6) == doctest::Approx(4.0));
  // A blocking round: 19 x the exchange of compute, at the slowest member's step.
  CHECK(blockingRoundSeconds(1.0) == doctest::Approx(19.0));
  CHECK(blockingRoundSteps(f, Exchange::kDirect, 40e6, 10, 500) == 266);  // ceil(79.8 / 0.3)
  CHECK(blockingRoundSteps(f, Exchange::kDirect, 40e6, 10, 100) == 100);
  CHECK(blockingRoundSteps(f, Exchange::kDirect, 0, 10, 100) == 13);  // latency: 3.8 s / 0.3
  CHECK(blockingRoundSteps(f, Exchange::kDirect, 0, 20, 100) == 20);
}

TEST_CASE("network fit: a measured exchange past the dead band scales every estimate") {
  NetworkFacts f = factsOf(4, 0.3, 0.2, 10e6, 5e6);
  // The model's direct exchange of 40 MB: 4.2 s. Measured 8.4 s: everything twice as long.
  f.calibrate(Exchange::kDirect, 40e6, 8.4);
  CHECK(f.slowdown() == doctest::Approx(2.0));
  CHECK(f.exchangeSeconds(Exchange::kDirect, 40e6) == doctest::Approx(8.4));
  CHECK(f.exchangeSeconds(Exchange::kRing, 40e6) == doctest::Approx(25.2));
  CHECK(f.wireSeconds(Exchange::kDirect, 40e6) == doctest::Approx(8.0));
  CHECK(blockingRoundSteps(f, Exchange::kDirect, 40e6, 10, 1000) == 532);  // ceil(159.6 / 0.3)
  // Within a quarter of the model (headers, skew), or faster: the model stands.
  f.calibrate(Exchange::kDirect, 40e6, 4.2 * 1.24);
  CHECK(f.slowdown() == 1.0);
  f.calibrate(Exchange::kDirect, 40e6, 1.0);
  CHECK(f.slowdown() == 1.0);
  CHECK(f.exchangeSeconds(Exchange::kDirect, 40e6) == doctest::Approx(4.2));
  // At most kMaxSlowdown.
  f.calibrate(Exchange::kDirect, 40e6, 1000);
  CHECK(f.slowdown() == kMaxSlowdown);
  // The survey's measurement: the members' mean wait, none unless every member measured one.
  Survey survey;
  survey.exchangeSeconds = {2.5f, 2.0f, 3.0f};
  CHECK(survey.measuredExchangeSeconds() == doctest::Approx(2.5));
  survey.exchangeSeconds = {2.5f, 0.0f, 3.0f};
  CHECK(survey.measuredExchangeSeconds() == 0.0);
}

TEST_CASE("network fit: facts need every member's step and every pair measured one way") {
  const std::vector<float> steps{0.1f, 0.2f}, noStep{0.1f, 0.0f};
  const std::vector<float> rtts{0, 0.05f, -1, 0}, none{0, -1, -1, 0}, bws{0, 0, 0, 0};
  const std::optional<NetworkFacts> facts = NetworkFacts::from(steps, rtts, bws);
  REQUIRE(facts);
  CHECK(facts->slowestStepSeconds() == doctest::Approx(0.2));
  CHECK(facts->meanStepSeconds() == doctest::Approx(0.15));
  CHECK(facts->exchangeSeconds(Exchange::kDirect, 1e9) == doctest::Approx(0.05));  // unlimited
  CHECK_FALSE(NetworkFacts::from(noStep, rtts, bws));
  CHECK_FALSE(NetworkFacts::from(steps, none, bws));
}

TEST_CASE("network fit: dts's period and delay in the seed-002 regime and on a fast network") {
  // 4 members, 80 MB of gradients, momentum (a window sends 160 MB), 300 ms steps, 37.5 MB/s.
  const NetworkFacts geo = factsOf(4, 0.3, 0.21, 37.5e6, 37.5e6);
  const DtsChoice slow = chooseDts(geo, 80e6, 160e6);
  // One step's gradient needs 1.07 s of wire > 0.8 x 0.3: p = ceil(2.13 / 0.24) = 9; a window's
  // exchange, 2 (0.105 + 40 / 37.5) = 2.34 s, fits in one window of 9 steps: t = 9.
  CHECK(slow.period == 9);
  CHECK(slow.delay == 9);
  // A fast network: the gradient itself every step, awaited one step later.
  const NetworkFacts lan = factsOf(4, 0.3, 0.21, 1e9, 1e9);
  const DtsChoice fast = chooseDts(lan, 4e6, 8e6);
  CHECK(fast.period == 1);
  CHECK(fast.delay == 1);  // ceil(2 (0.105 + 0.001) / 0.3)
  // A fixed value stays; the other one is chosen around it.
  CHECK(chooseDts(geo, 80e6, 160e6, std::nullopt, 4).period == 4);
  CHECK(chooseDts(geo, 80e6, 160e6, std::nullopt, 4).delay == 8);  // ceil(2.34 / 1.2) windows
  CHECK(chooseDts(geo, 80e6, 160e6, 8, std::nullopt).period == 8);
  CHECK(chooseDts(geo, 80e6, 160e6, 30, std::nullopt).period == 10);  // smallest divisor >= 9
  CHECK(chooseDts(geo, 80e6, 160e6, 0, std::nullopt).period == 9);
}

TEST_CASE("network fit: streaming-diloco's fragments and overlap") {
  const NetworkFacts geo = factsOf(4, 0.3, 0.21, 37.5e6, 37.5e6);
  // h = 50, 80 MB: F = 1 needs tau 5 (1.28 s), F = 2 tau 3 (0.74 s), F = 3 tau 2 (0.57 s); no F up
  // to 8 gets below 2 steps (F = 8: 0.34 s): the fewest fragments with the smallest tau.
  const StreamingChoice c = chooseStreaming(geo, 80e6, 50);
  CHECK(c.fragments == 3);
  CHECK(c.tau == 2);
  CHECK(chooseStreaming(geo, 80e6, 50, 4, std::nullopt).tau == 2);
  CHECK(chooseStreaming(geo, 80e6, 50, std::nullopt, 3).fragments == 2);
  // Nothing covers it in 1 step: one fragment at the fixed tau.
  const StreamingChoice none = chooseStreaming(geo, 80e6, 50, std::nullopt, 1);
  CHECK(none.fragments == 1);
  CHECK(none.tau == 1);
  // h = 4: tau < h / F leaves F = 1 (tau 5 does not fit either): overlapped as far as it can be.
  const StreamingChoice shortRounds = chooseStreaming(geo, 80e6, 4);
  CHECK(shortRounds.fragments == 1);
  CHECK(shortRounds.tau == 3);
}

TEST_CASE("network fit: gosgd's probability fills 80% of the link at most") {
  CHECK(chooseGossipProbability(0.3, 2.4) == doctest::Approx(0.1));
  CHECK(chooseGossipProbability(0.3, 0) == 1.0);
  CHECK(chooseGossipProbability(0.3, 0.1) == 1.0);
  CHECK(chooseGossipProbability(0.001, 100) == kMinGossip);
}

TEST_CASE("network fit: auto options parse, print and keep a fixed value") {
  const DilocoOptions automatic = engine::parseOptions<DilocoOptions>({});
  CHECK(automatic.h.isAuto());
  CHECK(engine::optionValues(automatic).at("h") == "auto");
  const DilocoOptions fixed = engine::parseOptions<DilocoOptions>({{"h", "40"}});
  CHECK(fixed.h.valueOr(7) == 40);
  CHECK(engine::optionValues(fixed).at("h") == "40");
  CHECK(engine::parseOptions<DilocoOptions>({{"h", "auto"}}).h.isAuto());
  CHECK_THROWS_WITH(engine::parseOptions<DilocoOptions>({{"h", "fast"}}), doctest::Contains("'h'"));
  CHECK_THROWS_WITH(engine::parseOptions<DilocoOptions>({{"h", "0"}}),
                    doctest::Contains("diloco.h must be at least 1"));
  for (const engine::OptionInfo& info : engine::describeOptions<DtsOptions>())
    if (info.name == "delay") CHECK(info.type == "auto or int");
  // dts: fixed pairs are checked as before; a fixed delay with an auto period is fine.
  CHECK_THROWS_WITH(engine::parseOptions<DtsOptions>({{"delay", "5"}, {"period", "2"}}),
                    doctest::Contains("multiple of dts.period"));
  CHECK_NOTHROW(engine::parseOptions<DtsOptions>({{"delay", "5"}}));
}

TEST_CASE("network fit: a time-boxed round with k auto lasts 19 x the members' mean exchange") {
  const std::unique_ptr<kernels::Compute> cpu = kernels::cpu::makeCompute();
  const RoundTime time = RoundTime::parse("diloco", "auto");
  std::vector<TimeBox> boxes(2, TimeBox(time, 0));
  const auto t0 = engine::Clock::time_point{} + 1s;
  std::vector<float> sum(1 + TimeBox::kTailFloats, 0.0f);
  const double exchanges[] = {0.1, 0.3};  // seconds, as each member estimated it
  for (std::size_t i = 0; i < 2; ++i) {
    boxes[i].begin(t0, 100, 0.0);
    CHECK(boxes[i].fitsExchange());
    CHECK(boxes[i].due(t0 + 10ms));  // the first round: one step
    std::vector<float> packed(1 + TimeBox::kTailFloats);
    boxes[i].pack(*cpu, std::vector<float>{1}, packed, exchanges[i]);
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += packed[k] / 2;
  }
  std::vector<float> merged(1);
  boxes[0].merged(*cpu, sum, 2, merged, t0 + 20ms);
  CHECK(boxes[0].roundSeconds() == doctest::Approx(19 * 0.2).epsilon(1e-6));
  // Nobody measured a path: 8 mean steps.
  TimeBox blind(time, 0);
  blind.begin(t0, 100, 0.0);
  blind.due(t0 + 10ms);
  std::vector<float> packed(1 + TimeBox::kTailFloats);
  blind.pack(*cpu, std::vector<float>{1}, packed, 0);
  blind.merged(*cpu, packed, 1, merged, t0 + 20ms);
  CHECK(blind.roundSeconds() == doctest::Approx(8 * 0.01).epsilon(1e-4));
}

// 4 simulated peers on one uniform link (150 ms one way, 1 MB/s), 300 ms steps.
engine::sim::SimResult uniformRun(const std::string& algorithm, std::uint64_t steps,
                                  const engine::OptionValues& options = {}) {
  const engine::Registry registry = makeRegistry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(4, algorithm, steps);
  c.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
  c.training.algorithmOptions = options;
  net::shaped::LinkProfile link;
  link.latency = 150ms;
  link.bandwidthBitsPerSecond = 8e6;
  c.network = net::shaped::NetworkProfile::uniform("uniform", link);
  return engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
}

// The value every peer chose for `knob`, checked the same everywhere.
double chosenEverywhere(const engine::sim::SimResult& r, const std::string& knob) {
  REQUIRE(r.violations.empty());
  REQUIRE(r.peers.size() == 4);
  const auto first = r.peers.front().metrics.find("chosen." + knob);
  REQUIRE(first != r.peers.front().metrics.end());
  for (const auto& peer : r.peers) CHECK(peer.metrics.at("chosen." + knob) == first->second);
  return first->second;
}

TEST_CASE("network fit: simulated diloco and local-sgd agree on the closed form's period") {
  const engine::sim::SimResult diloco = uniformRun("diloco", 120);
  const double bytes = static_cast<double>(diloco.finals.front().params.size()) * sizeof(float);
  // Direct all-reduce: 2 (0.15 + bytes / 4 / 1 MB/s); h = ceil(19 x that / 0.3) within [10, 500].
  const double exchange = 2 * (0.15 + bytes / 4 / 1e6);
  const auto expected = [&](double seconds, double low, double high) {
    return std::clamp(std::ceil(19 * seconds / 0.3 - 1e-9), low, high);
  };
  CHECK(chosenEverywhere(diloco, "diloco.h") == expected(exchange, 10, 500));
  for (const auto& final : diloco.finals) CHECK(final.params == diloco.finals.front().params);
  const engine::sim::SimResult local = uniformRun("local-sgd", 60);
  // Ring all-reduce: 6 hops of (0.15 + bytes / 4 / 1 MB/s), tau within [4, 64].
  CHECK(chosenEverywhere(local, "local-sgd.tau") == expected(3 * exchange, 4, 64));
  // A fixed value wins: nothing is chosen.
  const engine::sim::SimResult fixed = uniformRun("diloco", 40, {{"h", "10"}});
  CHECK(fixed.peers.front().metrics.count("chosen.diloco.h") == 0);
}

TEST_CASE("network fit: simulated dts, streaming-diloco and gosgd choose at run time") {
  const engine::sim::SimResult dts = uniformRun("dts", 80);
  const double period = chosenEverywhere(dts, "dts.period");
  const double delay = chosenEverywhere(dts, "dts.delay");
  CHECK(period >= 1);
  CHECK(std::fmod(delay, period) == 0);
  // Every window compensated: the peers end on one model.
  for (const auto& final : dts.finals)
    for (std::size_t k = 0; k < final.params.size(); ++k)
      CHECK(final.params[k] == doctest::Approx(dts.finals.front().params[k]).epsilon(1e-4));
  const engine::sim::SimResult streaming = uniformRun("streaming-diloco", 120);
  const double fragments = chosenEverywhere(streaming, "streaming-diloco.fragments");
  const double tau = chosenEverywhere(streaming, "streaming-diloco.tau");
  CHECK(fragments >= 1);
  CHECK(tau * fragments < 50);
  const engine::sim::SimResult gosgd = uniformRun("gosgd", 40);
  for (const auto& peer : gosgd.peers) {
    const double p = peer.metrics.at("chosen.gosgd.p");
    CHECK(p >= kMinGossip);
    CHECK(p <= 1.0);
  }
}

}  // namespace
}  // namespace gossamer::algorithms
