// gosgd's bound on bytes in flight (InflightBound, algorithms/reliable_delivery.h): the estimate
// from the acks with a fake clock, and in a cluster, a fixed bound of one transfer (the draws
// that find one in flight are skipped, the mass holds) and the estimated one.
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/gosgd.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/algorithms/gosgd_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using test::massOf;
using test::metricOf;

// The bound on bytes in flight, driven by a fake clock: 2 x (windowed maximum delivery rate) x
// (windowed minimum ack round trip), at least one transfer (up to 4 small ones in 1 MiB), at most
// the cap; 4 transfers before any sample.
TEST_CASE("gosgd: the bound on bytes in flight is twice the estimated bandwidth-delay product") {
  const engine::Clock::time_point t0{};
  const auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  const std::size_t mb = 1'000'000;

  SUBCASE("before the first ack: 4 transfers; one transfer always fits") {
    InflightBound bound;
    CHECK(bound.limit(mb) == 4 * mb);
    CHECK(bound.allows(3 * mb, mb));
    CHECK_FALSE(bound.allows(4 * mb, mb));
    CHECK(bound.allows(0, 10 * InflightBound::kCapBytes));
  }
  SUBCASE("a fixed bound, and its floor of one transfer") {
    InflightBound fixed(1000);
    CHECK(fixed.limit(400) == 1000);
    CHECK(fixed.allows(400, 400));
    CHECK_FALSE(fixed.allows(800, 400));
    InflightBound tiny(10);
    CHECK(tiny.limit(400) == 400);
    CHECK(tiny.allows(0, 400));
    CHECK_FALSE(tiny.allows(400, 400));
    tiny.sent(1, 400, at(0));  // acks change nothing of a fixed bound
    tiny.acked(1, at(1), false);
    CHECK(tiny.limit(400) == 400);
  }
  SUBCASE("rate and round trip from the acks") {
    InflightBound bound;
    // One 1 MB transfer acknowledged after 100 ms: 10 MB/s, 100 ms: 2 x 1 MB.
    bound.sent(1, mb, at(0));
    bound.acked(1, at(100), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(10e6));
    CHECK(bound.limit(mb) == 2 * mb);
    // Two at once, both acknowledged after 100 ms: the second saw 2 MB delivered in its 100 ms
    // (20 MB/s): twice the rate, twice the bound.
    bound.sent(2, mb, at(1000));
    bound.sent(3, mb, at(1000));
    bound.acked(2, at(1100), false);
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(10e6));
    bound.acked(3, at(1100), false);
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(20e6));
    CHECK(bound.limit(mb) == 4 * mb);
    // A transfer whose ack took longer (queued, or waiting for the receiver's step boundary): the
    // minimum round trip and the maximum rate stay, so neither lowers nor inflates the bound.
    bound.sent(4, mb, at(2000));
    bound.acked(4, at(2400), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(20e6));
    CHECK(bound.limit(mb) == 4 * mb);
    // The ack of a resent transfer matches no single send: no sample (Karn's rule).
    const double rate = bound.rateBytesPerSecond();
    bound.sent(5, mb, at(3000));
    bound.acked(5, at(3001), true);
    CHECK(bound.rateBytesPerSecond() == rate);
    CHECK(bound.rttSeconds() == doctest::Approx(0.1));
    // An ack for a transfer that is unknown or forgotten is ignored.
    bound.sent(6, mb, at(3000));
    bound.forget(6);
    bound.acked(6, at(3001), false);
    bound.acked(99, at(3001), false);
    CHECK(bound.rateBytesPerSecond() == rate);
    // Past the 10 s window both are renewed by the next sample: the path got longer and slower.
    bound.sent(7, mb, at(20000));
    bound.acked(7, at(20250), false);
    CHECK(bound.rttSeconds() == doctest::Approx(0.25));
    CHECK(bound.rateBytesPerSecond() == doctest::Approx(4e6));
    CHECK(bound.limit(mb) == 2 * mb);
  }
  SUBCASE("at least one transfer, at most the cap") {
    InflightBound small;
    small.sent(1, 10, at(0));
    small.acked(1, at(1), false);  // 10 B in 1 ms: 2 x 10 kB/s x 1 ms = 20 B
    CHECK(small.limit(mb) == mb);  // floor: one transfer
    // Small transfers: as many as fit in 1 MiB, at most 4, whatever the estimate says.
    CHECK(small.limit(300'000) == 3 * 300'000);
    CHECK(small.limit(100'000) == 4 * 100'000);
    CHECK(small.limit(600'000) == 600'000);
    InflightBound fast;
    fast.sent(1, 100 * mb, at(0));
    fast.acked(1, at(1000), false);  // 100 MB/s x 1 s x 2 = 200 MB: under the cap
    CHECK(fast.limit(mb) == 200 * mb);
    fast.sent(2, 100 * mb, at(2000));
    fast.sent(3, 100 * mb, at(2000));
    fast.acked(2, at(3000), false);
    fast.acked(3, at(3000), false);  // 200 MB/s x 1 s x 2 = 400 MB: over the cap
    CHECK(fast.limit(mb) == InflightBound::kCapBytes);
    CHECK(fast.limit(2 * InflightBound::kCapBytes) == 2 * InflightBound::kCapBytes);
  }
}

// max_inflight_bytes below one model: the floor of one transfer in flight, and the draws that
// find one in flight are skipped. The mass invariants do not depend on how many are in flight.
TEST_CASE("gosgd: with room for one transfer in flight the others are skipped and the mass holds") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 4;
  auto config =
      test::algorithmCluster("gosgd", peers, 300, 0.0, {{"p", "1"}, {"max_inflight_bytes", "1"}});
  config.peer.training.initialParams = test::distinctParams;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  REQUIRE(result.finals.size() == peers);
  const std::size_t n = result.finals[0].params.size();
  double alphaSum = 0, throttled = 0;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < peers; ++i) {
    const auto& p = result.peers[i];
    CHECK(metricOf(p, "gosgd.inflight_limit_bytes") == 4.0 * static_cast<double>(n));
    CHECK(metricOf(p, "gosgd.inflight_peak_bytes") == 4.0 * static_cast<double>(n));
    CHECK(metricOf(p, "gosgd.sent") > 0);
    throttled += metricOf(p, "gosgd.throttled");
    alphaSum += metricOf(p, "gosgd.alpha");
    all.push_back(i);
  }
  CHECK(throttled > 0);  // p = 1: a draw every step, while an ack takes a step or more
  CHECK(alphaSum == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(test::maxAbsDiff(massOf(result, all), test::averageOfDistinct(peers, n)) < 1e-5);
}

// The estimate (the default): measured from the acks, and never below one transfer.
TEST_CASE("gosgd: the bound on bytes in flight is estimated from the acks") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("gosgd", 4, 300, 0.1, {{"p", "0.5"}});
  config.peer.training.minStepTime = 1ms;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double transfer = 4.0 * static_cast<double>(result.finals[0].params.size());
  for (const auto& p : result.peers) {
    CHECK(metricOf(p, "gosgd.ack_rtt_ms") > 0);
    CHECK(metricOf(p, "gosgd.ack_rate_mbps") > 0);
    CHECK(metricOf(p, "gosgd.inflight_limit_bytes") >= transfer);
    CHECK(metricOf(p, "gosgd.inflight_limit_bytes") <= InflightBound::kCapBytes);
    CHECK(metricOf(p, "gosgd.inflight_peak_bytes") >= transfer);
  }
  CHECK(result.consensus.accuracy > 0.9);
}
}  // namespace
}  // namespace gossamer::algorithms
