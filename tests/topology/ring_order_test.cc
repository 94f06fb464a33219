// Ring orders by the network (topology/ring_order.h): hand-computed costs, a brute-force oracle
// over every permutation, a geo-distributed cluster and points on a circle.
#include "topology/ring_order.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"

namespace gossamer::topology {
namespace {

using Order = std::vector<std::size_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Uniform in [low, high) from one raw draw: the same numbers with every standard library.
double uniform(std::mt19937_64& rng, double low, double high) {
  return low + (high - low) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// n x n costs with every off-diagonal entry from `latency` and `bandwidth`; the diagonal holds
// values the checks would reject, since it must be ignored.
LinkCosts makeCosts(std::size_t n, const std::function<double(std::size_t, std::size_t)>& latency,
                    const std::function<double(std::size_t, std::size_t)>& bandwidth) {
  LinkCosts costs{n, std::vector<double>(n * n, kNaN), std::vector<double>(n * n, -1.0)};
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      costs.latencySeconds[i * n + j] = latency(i, j);
      costs.bandwidthBytesPerSecond[i * n + j] = bandwidth(i, j);
    }
  }
  return costs;
}

// Asymmetric links: latencies in [1, 200) ms, bandwidths in [1 MB/s, 1 GB/s) or unlimited.
LinkCosts randomCosts(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return makeCosts(
      n, [&](std::size_t, std::size_t) { return uniform(rng, 0.001, 0.2); },
      [&](std::size_t, std::size_t) { return rng() % 8 == 0 ? kInf : uniform(rng, 1e6, 1e9); });
}

// Latencies of 1, 2 or 3 s and unlimited bandwidth: exact sums and many ties.
LinkCosts tiedCosts(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return makeCosts(
      n, [&](std::size_t, std::size_t) { return static_cast<double>(1 + rng() % 3); },
      [](std::size_t, std::size_t) { return kInf; });
}

// cost(i -> j) of ring_order.h, written out again.
double edgeCost(const LinkCosts& costs, double modelBytes, std::size_t i, std::size_t j) {
  const std::size_t n = costs.size;
  return costs.latencySeconds[i * n + j] +
         (modelBytes / static_cast<double>(n)) / costs.bandwidthBytesPerSecond[i * n + j];
}

struct RingScore {
  double bottleneck = 0;
  double sum = 0;
};

RingScore ringScore(const LinkCosts& costs, double modelBytes, const Order& order) {
  RingScore score;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const double edge = edgeCost(costs, modelBytes, order[k], order[(k + 1) % order.size()]);
    score.bottleneck = std::max(score.bottleneck, edge);
    score.sum += edge;
  }
  return score;
}

Order identityOrder(std::size_t n) {
  Order order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

// The lexicographically first permutation starting at 0 with the least bottleneck and, among
// those, a sum within 1e-12 of the least: std::next_permutation walks them in that order.
Order bruteForceOrder(const LinkCosts& costs, double modelBytes) {
  const Order first = identityOrder(costs.size);
  double bottleneck = kInf;
  Order order = first;
  do {
    bottleneck = std::min(bottleneck, ringScore(costs, modelBytes, order).bottleneck);
  } while (std::next_permutation(order.begin() + 1, order.end()));
  double sum = kInf;
  do {
    const RingScore score = ringScore(costs, modelBytes, order);
    if (score.bottleneck == bottleneck) sum = std::min(sum, score.sum);
  } while (std::next_permutation(order.begin() + 1, order.end()));
  do {
    const RingScore score = ringScore(costs, modelBytes, order);
    if (score.bottleneck == bottleneck && score.sum <= sum * (1 + 1e-12)) return order;
  } while (std::next_permutation(order.begin() + 1, order.end()));
  FAIL("brute force found no ring");
  return first;
}

bool isRingOrder(const Order& order, std::size_t n) {
  Order sorted = order;
  std::sort(sorted.begin(), sorted.end());
  return !order.empty() && order[0] == 0 && sorted == identityOrder(n);
}

// The message of the gossamer::Error `f` throws; empty when it throws none.
std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// 3 members, 300 bytes (chunks of 100): 0 -> 1 -> 2 -> 0 costs 0.11, 0.52, 0.03 s and
// 0 -> 2 -> 1 -> 0 costs 1.001, 0.0021, 2.004 s.
LinkCosts threeMembers() {
  LinkCosts costs{3, std::vector<double>(9, 0.0), std::vector<double>(9, kInf)};
  auto set = [&](std::size_t i, std::size_t j, double latency, double bandwidth) {
    costs.latencySeconds[i * 3 + j] = latency;
    costs.bandwidthBytesPerSecond[i * 3 + j] = bandwidth;
  };
  set(0, 1, 0.01, 1000);
  set(1, 2, 0.02, 200);
  set(2, 0, 0.03, kInf);
  set(0, 2, 0.001, 100);
  set(2, 1, 0.002, 1e6);
  set(1, 0, 0.004, 50);
  return costs;
}

TEST_CASE("topology: ring order round time by hand on three members") {
  const LinkCosts costs = threeMembers();
  // 2 (n - 1) = 4 steps, each as slow as the slowest edge.
  CHECK(estimateRingRoundSeconds(costs, Order{0, 1, 2}, 300) == doctest::Approx(4 * 0.52));
  CHECK(estimateRingRoundSeconds(costs, Order{1, 2, 0}, 300) == doctest::Approx(4 * 0.52));
  CHECK(estimateRingRoundSeconds(costs, Order{0, 2, 1}, 300) == doctest::Approx(4 * 2.004));
  // No bytes: latencies alone (0.01, 0.02, 0.03).
  CHECK(estimateRingRoundSeconds(costs, Order{0, 1, 2}, 0) == doctest::Approx(4 * 0.03));
}

TEST_CASE("topology: ring order of one, two and three members") {
  const LinkCosts one{1, {kNaN}, {0.0}};  // the diagonal is ignored
  CHECK(orderRing(one, 1e9) == Order{0});
  CHECK(orderRingHeuristic(one, 1e9) == Order{0});
  CHECK(estimateRingRoundSeconds(one, Order{0}, 1e9) == 0);

  const LinkCosts two{2, {0, 0.1, 0.3, 0}, {1, 1000, 50, 1}};
  CHECK(orderRing(two, 100) == Order{0, 1});
  CHECK(orderRingHeuristic(two, 100) == Order{0, 1});
  // Chunks of 50 bytes: 0 -> 1 takes 0.1 + 0.05, 1 -> 0 takes 0.3 + 1.
  CHECK(estimateRingRoundSeconds(two, Order{0, 1}, 100) == doctest::Approx(2 * 1.3));
  CHECK(estimateRingRoundSeconds(two, Order{1, 0}, 100) == doctest::Approx(2 * 1.3));

  const LinkCosts three = threeMembers();
  CHECK(orderRing(three, 300) == Order{0, 1, 2});
  CHECK(orderRingHeuristic(three, 300) == Order{0, 1, 2});
  // Transposed, the other direction wins.
  LinkCosts transposed = three;
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      transposed.latencySeconds[i * 3 + j] = three.latencySeconds[j * 3 + i];
      transposed.bandwidthBytesPerSecond[i * 3 + j] = three.bandwidthBytesPerSecond[j * 3 + i];
    }
  }
  CHECK(orderRing(transposed, 300) == Order{0, 2, 1});
  CHECK(orderRingHeuristic(transposed, 300) == Order{0, 2, 1});
}

TEST_CASE("topology: ring order rejects invalid link costs") {
  const LinkCosts good = threeMembers();
  auto order = [](LinkCosts costs, double modelBytes = 300) {
    return errorOf([&] { orderRing(costs, modelBytes); });
  };
  CHECK(order(good).empty());
  CHECK(order(LinkCosts{}).find("at least one member") != std::string::npos);
  LinkCosts shortLatency = good;
  shortLatency.latencySeconds.pop_back();
  CHECK(order(shortLatency).find("8 latencies and 9 bandwidths for 3 members") !=
        std::string::npos);
  LinkCosts longBandwidth = good;
  longBandwidth.bandwidthBytesPerSecond.push_back(1);
  CHECK(order(longBandwidth).find("9 latencies and 10 bandwidths for 3 members") !=
        std::string::npos);
  for (const double latency : {-0.001, kInf, kNaN}) {
    LinkCosts bad = good;
    bad.latencySeconds[1 * 3 + 2] = latency;
    CAPTURE(latency);
    CHECK(order(bad).find("latency 1 -> 2") != std::string::npos);
  }
  for (const double bandwidth : {0.0, -1.0, kNaN}) {
    LinkCosts bad = good;
    bad.bandwidthBytesPerSecond[2 * 3 + 0] = bandwidth;
    CAPTURE(bandwidth);
    CHECK(order(bad).find("bandwidth 2 -> 0") != std::string::npos);
  }
  LinkCosts tiny = good;
  tiny.bandwidthBytesPerSecond[0 * 3 + 1] = 1e-320;
  CHECK(order(tiny, 1e300).find("cost 0 -> 1 overflows") != std::string::npos);
  CHECK(order(good, -1).find("model size") != std::string::npos);
  CHECK(order(good, kNaN).find("model size") != std::string::npos);
  CHECK_THROWS_AS(orderRingHeuristic(shortLatency, 300), Error);
  CHECK_THROWS_AS(estimateRingRoundSeconds(shortLatency, Order{0, 1, 2}, 300), Error);
  // The order given to the estimate must be a permutation of 0..n-1.
  for (const Order& bad : {Order{0, 1}, Order{0, 1, 1}, Order{0, 1, 3}, Order{0, 1, 2, 0}}) {
    CHECK(errorOf([&] {
            estimateRingRoundSeconds(good, bad, 300);
          }).find("ring order: the order") != std::string::npos);
  }
}

TEST_CASE("topology: exact ring order equals brute force on random asymmetric links") {
  for (std::size_t n = 4; n <= 8; ++n) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(n);
      CAPTURE(seed);
      const LinkCosts costs = randomCosts(n, seed * 1000 + n);
      const double modelBytes = 1e8;
      const Order expected = bruteForceOrder(costs, modelBytes);
      const Order order = orderRing(costs, modelBytes);
      REQUIRE(isRingOrder(order, n));
      const RingScore best = ringScore(costs, modelBytes, expected);
      const RingScore got = ringScore(costs, modelBytes, order);
      CHECK(got.bottleneck == best.bottleneck);
      CHECK(got.sum == doctest::Approx(best.sum).epsilon(1e-12));
      CHECK(order == expected);
      CHECK(estimateRingRoundSeconds(costs, order, modelBytes) ==
            doctest::Approx(2.0 * static_cast<double>(n - 1) * best.bottleneck));
    }
  }
}

TEST_CASE("topology: exact ring order breaks ties by sum then lexicographically") {
  for (std::size_t n = 4; n <= 8; ++n) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(n);
      CAPTURE(seed);
      const LinkCosts costs = tiedCosts(n, seed * 77 + n);
      CHECK(orderRing(costs, 1e6) == bruteForceOrder(costs, 1e6));
    }
  }
  // All links alike: every ring ties, the identity is the smallest.
  for (const std::size_t n : {5, 12}) {
    const LinkCosts alike = makeCosts(
        n, [](std::size_t, std::size_t) { return 0.01; },
        [](std::size_t, std::size_t) { return 1e9; });
    CHECK(orderRing(alike, 1e8) == identityOrder(n));
  }
  // Latency 1 everywhere but 1 -> 2 and 3 -> 1 (0): every ring's bottleneck is 1, and only
  // 0 3 1 2 takes both free links (sum 2), though 0 1 2 3 is lexicographically smaller.
  const LinkCosts shortcut = makeCosts(
      4,
      [](std::size_t i, std::size_t j) {
        return (i == 1 && j == 2) || (i == 3 && j == 1) ? 0.0 : 1.0;
      },
      [](std::size_t, std::size_t) { return kInf; });
  CHECK(orderRing(shortcut, 1) == Order{0, 3, 1, 2});
}

enum Site : std::size_t { kTokyo, kLondon, kOregon, kOhio };

TEST_CASE("topology: ring order on a geo-distributed cluster avoids the slow links") {
  // Round-trip times in seconds between the sites; 1 ms within one.
  constexpr std::array<std::array<double, 4>, 4> kRtt = {{{0.001, 0.212, 0.098, 0.132},
                                                          {0.212, 0.001, 0.130, 0.086},
                                                          {0.098, 0.130, 0.001, 0.050},
                                                          {0.132, 0.086, 0.050, 0.001}}};
  constexpr std::array<Site, 8> kSiteOf = {kTokyo,  kOhio,   kLondon, kTokyo,
                                           kOregon, kLondon, kOhio,   kOregon};
  // One TCP flow limited by an 8 MiB window, capped at 10 Gbit/s.
  auto siteBandwidth = [&](Site a, Site b) {
    return std::min(8.0 * 1024 * 1024 / kRtt[a][b], 1.25e9);
  };
  const LinkCosts costs = makeCosts(
      8, [&](std::size_t i, std::size_t j) { return kRtt[kSiteOf[i]][kSiteOf[j]] / 2; },
      [&](std::size_t i, std::size_t j) { return siteBandwidth(kSiteOf[i], kSiteOf[j]); });
  const double modelBytes = 80e6;
  // Chunks of 10 MB: tokyo-oregon 0.166 s is tokyo's cheapest link off its site, so no ring
  // does better; tokyo-ohio 0.223 s, london-oregon 0.220 s, tokyo-london 0.359 s.
  auto siteCost = [&](Site a, Site b) { return kRtt[a][b] / 2 + 10e6 / siteBandwidth(a, b); };

  const Order order = orderRing(costs, modelBytes);
  REQUIRE(isRingOrder(order, 8));
  CHECK(order == bruteForceOrder(costs, modelBytes));
  for (std::size_t k = 0; k < 8; ++k) {
    const Site from = kSiteOf[order[k]], to = kSiteOf[order[(k + 1) % 8]];
    CAPTURE(k);
    CHECK_FALSE(((from == kTokyo && to == kLondon) || (from == kLondon && to == kTokyo)));
  }
  // Bottleneck first: tokyo's block is entered and left through the two oregon members, and
  // london, whose other links are slower, sits between the two ohio members. Keeping every site
  // whole (tokyo, oregon, london, ohio) would cost tokyo-ohio or london-oregon.
  CHECK(order == Order{0, 3, 4, 1, 2, 5, 6, 7});
  const double ordered = estimateRingRoundSeconds(costs, order, modelBytes);
  const double byId = estimateRingRoundSeconds(costs, identityOrder(8), modelBytes);
  const double sitesWhole =
      estimateRingRoundSeconds(costs, Order{0, 3, 4, 7, 2, 5, 1, 6}, modelBytes);
  CHECK(ordered == doctest::Approx(14 * siteCost(kTokyo, kOregon)));
  CHECK(byId == doctest::Approx(14 * siteCost(kTokyo, kLondon)));
  CHECK(sitesWhole == doctest::Approx(14 * siteCost(kTokyo, kOhio)));
  const double ratio = byId / ordered;
  MESSAGE("geo ring round for 80 MB: id order ", byId, " s, network order ", ordered, " s (ratio ",
          ratio, "), sites kept whole ", sitesWhole, " s");
  CHECK(ratio >= 1.3);
  CHECK(orderRingHeuristic(costs, modelBytes) == order);
}

// n members on a circle of radius 50 ms in a scrambled order: member i sits at slot slots[i].
struct Circle {
  Order slots;
  LinkCosts costs;
};

Circle circle(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Circle result{identityOrder(n), {}};
  for (std::size_t k = n - 1; k > 0; --k) std::swap(result.slots[k], result.slots[rng() % (k + 1)]);
  auto angle = [&](std::size_t i) {
    return 2 * std::numbers::pi * static_cast<double>(result.slots[i]) / static_cast<double>(n);
  };
  result.costs = makeCosts(
      n,
      [&](std::size_t i, std::size_t j) {
        return 0.05 * std::hypot(std::cos(angle(i)) - std::cos(angle(j)),
                                 std::sin(angle(i)) - std::sin(angle(j)));
      },
      [](std::size_t, std::size_t) { return 1e9; });
  return result;
}

TEST_CASE("topology: ring order heuristic recovers members on a circle") {
  for (const std::size_t n : {20, 40}) {
    CAPTURE(n);
    const Circle c = circle(n, n);
    REQUIRE(c.slots != identityOrder(n));
    const double modelBytes = 1e8;
    const Order order = orderRing(c.costs, modelBytes);
    REQUIRE(isRingOrder(order, n));
    // Consecutive members sit in neighbouring slots, all the way round in one direction.
    const std::size_t step = (c.slots[order[1]] + n - c.slots[order[0]]) % n;
    CHECK((step == 1 || step == n - 1));
    for (std::size_t k = 0; k < n; ++k) {
      CAPTURE(k);
      CHECK((c.slots[order[(k + 1) % n]] + n - c.slots[order[k]]) % n == step);
    }
    const double adjacent = 0.05 * 2 * std::sin(std::numbers::pi / static_cast<double>(n)) +
                            modelBytes / static_cast<double>(n) / 1e9;
    const RingScore got = ringScore(c.costs, modelBytes, order);
    CHECK(got.bottleneck == doctest::Approx(adjacent).epsilon(1e-9));
    CHECK(got.bottleneck <= ringScore(c.costs, modelBytes, identityOrder(n)).bottleneck);
    CHECK(orderRing(c.costs, modelBytes) == order);
  }
}

TEST_CASE("topology: ring order heuristic is deterministic and never worse than the id order") {
  for (const std::size_t n : {13, 20, 40}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      CAPTURE(n);
      CAPTURE(seed);
      const LinkCosts costs = randomCosts(n, seed * 31 + n);
      const Order order = orderRing(costs, 1e8);
      REQUIRE(isRingOrder(order, n));
      CHECK(orderRing(costs, 1e8) == order);
      CHECK(orderRingHeuristic(costs, 1e8) == order);
      const RingScore got = ringScore(costs, 1e8, order);
      const RingScore byId = ringScore(costs, 1e8, identityOrder(n));
      CHECK((got.bottleneck < byId.bottleneck ||
             (got.bottleneck == byId.bottleneck && got.sum <= byId.sum)));
    }
  }
}

TEST_CASE("topology: ring order heuristic against the exact order on small rings") {
  std::size_t optimal = 0, cases = 0;
  double worst = 1;
  for (const std::size_t n : {6, 9, 12}) {
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      CAPTURE(n);
      CAPTURE(seed);
      const LinkCosts costs = randomCosts(n, seed * 7 + n);
      const Order heuristic = orderRingHeuristic(costs, 1e8);
      REQUIRE(isRingOrder(heuristic, n));
      const double exact = ringScore(costs, 1e8, orderRing(costs, 1e8)).bottleneck;
      const double found = ringScore(costs, 1e8, heuristic).bottleneck;
      CHECK(found >= exact);  // the exact order is least
      ++cases;
      if (found == exact) ++optimal;
      worst = std::max(worst, found / exact);
    }
  }
  MESSAGE("heuristic bottleneck optimal in ", optimal, " of ", cases, ", worst ratio ", worst);
  CHECK(optimal * 4 >= cases * 3);
  CHECK(worst < 1.25);
}

}  // namespace
}  // namespace gossamer::topology
