// Ring orders by the network (ring_order.h): the edge costs, the exact search (least bottleneck,
// then Held-Karp) and the local-search heuristic for larger rings.
#include "topology/ring_order.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "engine/base/enforce.h"

namespace gossamer::topology {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Sums within this relative distance of each other count as equal (ring_order.h).
constexpr double kSumTolerance = 1e-12;
// The heuristic's nearest-neighbour starts (ring_order.h).
constexpr std::size_t kStarts = 8;

using Order = std::vector<std::size_t>;

Order identity(std::size_t n) {
  Order order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

// cost(i -> j) of ring_order.h, row-major n x n (diagonal 0).
struct EdgeCosts {
  std::size_t n = 0;
  std::vector<double> cost;
  double operator()(std::size_t i, std::size_t j) const { return cost[i * n + j]; }
};

// Checks `costs` and `modelBytes` (ring_order.h) and computes the edge costs.
EdgeCosts edgeCosts(const LinkCosts& costs, double modelBytes) {
  const std::size_t n = costs.size;
  GOSSAMER_ENFORCE(n >= 1, "ring order: a ring needs at least one member");
  GOSSAMER_ENFORCE(
      costs.latencySeconds.size() == n * n && costs.bandwidthBytesPerSecond.size() == n * n,
      "ring order: {} latencies and {} bandwidths for {} members; expected n * n = {} of each",
      costs.latencySeconds.size(), costs.bandwidthBytesPerSecond.size(), n, n * n);
  GOSSAMER_ENFORCE(std::isfinite(modelBytes) && modelBytes >= 0,
                   "ring order: the model size must be finite and >= 0 bytes (got {})", modelBytes);
  const double chunk = modelBytes / static_cast<double>(n);
  EdgeCosts result{n, std::vector<double>(n * n, 0.0)};
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double latency = costs.latencySeconds[i * n + j];
      const double bandwidth = costs.bandwidthBytesPerSecond[i * n + j];
      GOSSAMER_ENFORCE(std::isfinite(latency) && latency >= 0,
                       "ring order: latency {} -> {} is {} s; it must be finite and >= 0", i, j,
                       latency);
      GOSSAMER_ENFORCE(bandwidth > 0, "ring order: bandwidth {} -> {} is {} B/s; it must be > 0", i,
                       j, bandwidth);
      result.cost[i * n + j] = latency + chunk / bandwidth;
      GOSSAMER_ENFORCE(std::isfinite(result(i, j)), "ring order: cost {} -> {} overflows", i, j);
    }
  }
  return result;
}

struct Score {
  double bottleneck = 0, sum = 0;
};

Score score(const EdgeCosts& cost, const Order& order) {
  Score result;
  for (std::size_t k = 0; k < cost.n; ++k) {
    const double edge = cost(order[k], order[(k + 1) % cost.n]);
    result.bottleneck = std::max(result.bottleneck, edge);
    result.sum += edge;
  }
  return result;
}

// Strictly better in (bottleneck, sum), sums within the tolerance being equal.
bool better(const Score& a, const Score& b) {
  if (a.bottleneck != b.bottleneck) return a.bottleneck < b.bottleneck;
  return a.sum < b.sum - kSumTolerance * b.sum;
}

// ---- exact, n <= kExactRingOrderLimit: sets of members are bitmasks, member 0 is bit 0 ----

using Mask = std::uint32_t;
Mask bit(std::size_t member) { return Mask{1} << member; }

// Held-Karp backwards over the edges that cost at most `bottleneck`: rest[S * n + v] is the
// least sum of a path from v through every member outside S and back to 0, for S odd (holding 0)
// and v in S; infinity when there is none. So rest[n] (S = {0}, v = 0) is finite iff those
// edges hold a Hamiltonian cycle.
std::vector<double> completions(const EdgeCosts& cost, double bottleneck) {
  const std::size_t n = cost.n;
  std::vector<Mask> allowed(n, 0);
  for (std::size_t v = 0; v < n; ++v) {
    for (std::size_t u = 0; u < n; ++u) {
      if (u != v && cost(v, u) <= bottleneck) allowed[v] |= bit(u);
    }
  }
  const Mask full = bit(n) - 1;
  std::vector<double> rest((std::size_t{full} + 1) * n, kInfinity);
  for (std::size_t v = 1; v < n; ++v) {
    if ((allowed[v] & 1) != 0) rest[std::size_t{full} * n + v] = cost(v, 0);
  }
  for (Mask s = full - 2;; s -= 2) {
    for (Mask members = s; members != 0; members &= members - 1) {
      const std::size_t v = std::countr_zero(members);
      double best = kInfinity;
      for (Mask next = allowed[v] & ~s; next != 0; next &= next - 1) {
        const std::size_t u = std::countr_zero(next);
        best = std::min(best, cost(v, u) + rest[std::size_t{s | bit(u)} * n + u]);
      }
      rest[std::size_t{s} * n + v] = best;
    }
    if (s == 1) break;
  }
  return rest;
}

Order exactOrder(const EdgeCosts& cost) {
  const std::size_t n = cost.n;
  if (n == 1) return {0};
  // The least bottleneck: binary search over the distinct edge costs for the smallest whose
  // edges still hold a Hamiltonian cycle (the largest does: the complete graph; the diagonal's
  // zeros join the candidates harmlessly).
  std::vector<double> levels = cost.cost;
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const double bottleneck = *std::partition_point(
      levels.begin(), levels.end() - 1,
      [&](double level) { return !(completions(cost, level)[n] < kInfinity); });
  const std::vector<double> rest = completions(cost, bottleneck);

  // Forward, always taking the smallest next member that still completes a ring within the
  // tolerance of the least sum (the cheapest one, should rounding leave none).
  const double limit = rest[n] * (1 + kSumTolerance);  // rest[n]: S = {0}, v = 0
  Order order = {0};
  Mask visited = 1;
  double prefix = 0;
  for (std::size_t step = 1; step < n; ++step) {
    const std::size_t v = order.back();
    std::size_t pick = n;
    double cheapest = kInfinity;
    for (std::size_t u = 1; u < n; ++u) {
      if ((visited & bit(u)) != 0 || cost(v, u) > bottleneck) continue;
      const double through = cost(v, u) + rest[std::size_t{visited | bit(u)} * n + u];
      if (prefix + through <= limit || through < cheapest) pick = u;
      if (prefix + through <= limit) break;
      cheapest = std::min(cheapest, through);
    }
    GOSSAMER_ENFORCE(pick < n, "ring order: internal error, no member completes the ring");
    prefix += cost(v, pick);
    visited |= bit(pick);
    order.push_back(pick);
  }
  return order;
}

// ---- heuristic: local search over orders that keep member 0 first ----

// Greedy from `start`: the cheapest edge to a member not yet visited, ties to the smaller index;
// rotated to start at 0.
Order nearestNeighbour(const EdgeCosts& cost, std::size_t start) {
  Order order = {start};
  std::vector<bool> visited(cost.n, false);
  visited[start] = true;
  for (std::size_t step = 1; step < cost.n; ++step) {
    const std::size_t v = order.back();
    std::size_t pick = cost.n;
    for (std::size_t u = 0; u < cost.n; ++u) {
      if (!visited[u] && (pick == cost.n || cost(v, u) < cost(v, pick))) pick = u;
    }
    visited[pick] = true;
    order.push_back(pick);
  }
  std::rotate(order.begin(), std::find(order.begin(), order.end(), 0), order.end());
  return order;
}

// Replaces `order` by `candidate` when a full score confirms that it is better.
bool accept(const EdgeCosts& cost, Order& order, Score& current, Order candidate) {
  const Score exact = score(cost, candidate);
  if (!better(exact, current)) return false;
  order = std::move(candidate);
  current = exact;
  return true;
}

// The first improving reversal of order[i..j] (1 <= i < j < n), screened in O(1) with prefix
// and suffix maxima and sums of the edges, k being the edge order[k] -> order[k + 1].
bool twoOptMove(const EdgeCosts& cost, Order& order, Score& current) {
  const std::size_t n = cost.n;
  auto at = [&](std::size_t a, std::size_t b) { return cost(order[a], order[b % n]); };
  std::vector<double> prefixMax(n + 1, 0.0), suffixMax(n + 1, 0.0), prefixSum(n + 1, 0.0);
  for (std::size_t k = 0; k < n; ++k) {
    prefixMax[k + 1] = std::max(prefixMax[k], at(k, k + 1));
    prefixSum[k + 1] = prefixSum[k] + at(k, k + 1);
  }
  for (std::size_t k = n; k-- > 0;) suffixMax[k] = std::max(suffixMax[k + 1], at(k, k + 1));
  for (std::size_t i = 1; i + 1 < n; ++i) {
    double reversedSum = 0, reversedMax = 0;
    for (std::size_t j = i + 1; j < n; ++j) {
      reversedSum += at(j, j - 1);
      reversedMax = std::max(reversedMax, at(j, j - 1));
      const double in = at(i - 1, j), out = at(i, j + 1);
      const Score screened = {
          std::max({prefixMax[i - 1], suffixMax[j + 1], in, out, reversedMax}),
          current.sum - (prefixSum[j + 1] - prefixSum[i - 1]) + in + out + reversedSum};
      if (!better(screened, current)) continue;
      Order candidate = order;
      std::reverse(candidate.begin() + i, candidate.begin() + j + 1);
      if (accept(cost, order, current, std::move(candidate))) return true;
    }
  }
  return false;
}

// The first improving move of order[a..b] (1 <= a <= b < n, at most 3 members, kept in order)
// to just after position p, screened in O(1): the move drops 3 edges, so the largest edge it
// keeps is among the 4 largest.
bool orOptMove(const EdgeCosts& cost, Order& order, Score& current) {
  const std::size_t n = cost.n;
  auto at = [&](std::size_t a, std::size_t b) { return cost(order[a], order[b % n]); };
  Order largest = identity(n);
  std::stable_sort(largest.begin(), largest.end(),
                   [&](std::size_t x, std::size_t y) { return at(x, x + 1) > at(y, y + 1); });
  largest.resize(std::min<std::size_t>(4, n));
  for (std::size_t a = 1; a < n; ++a) {
    for (std::size_t b = a; b < n && b < a + 3; ++b) {
      for (std::size_t p = 0; p < n; ++p) {
        if (p + 1 >= a && p <= b) continue;
        const auto top = std::find_if(largest.begin(), largest.end(), [&](std::size_t e) {
          return e != a - 1 && e != b && e != p;
        });
        const double untouched = top == largest.end() ? 0 : at(*top, *top + 1);
        const double join = at(a - 1, b + 1), in = at(p, a), out = at(b, p + 1);
        const Score screened = {
            std::max({untouched, join, in, out}),
            current.sum - at(a - 1, a) - at(b, b + 1) - at(p, p + 1) + join + in + out};
        if (!better(screened, current)) continue;
        Order candidate = order;
        const auto it = candidate.begin();
        if (p > b) std::rotate(it + a, it + b + 1, it + p + 1);
        if (p < a) std::rotate(it + p + 1, it + a, it + b + 1);
        if (accept(cost, order, current, std::move(candidate))) return true;
      }
    }
  }
  return false;
}

Order heuristicOrder(const EdgeCosts& cost) {
  const std::size_t n = cost.n;
  Order best = identity(n);
  if (n <= 2) return best;
  // Starts: the identity, then nearest-neighbour tours from members 0..kStarts-1.
  Score bestScore;
  for (std::size_t start = 0; start <= std::min(n, kStarts); ++start) {
    Order order = start == 0 ? best : nearestNeighbour(cost, start - 1);
    Score current = score(cost, order);
    for (std::size_t moves = 0; moves < 50 * n; ++moves) {
      if (!twoOptMove(cost, order, current) && !orOptMove(cost, order, current)) break;
    }
    if (start == 0 || better(current, bestScore) || (!better(bestScore, current) && order < best)) {
      best = std::move(order);
      bestScore = current;
    }
  }
  return best;
}

}  // namespace

double estimateRingRoundSeconds(const LinkCosts& costs, std::span<const std::size_t> order,
                                double modelBytes) {
  const EdgeCosts cost = edgeCosts(costs, modelBytes);
  const std::size_t n = cost.n;
  const Order ring(order.begin(), order.end());
  Order sorted = ring;
  std::sort(sorted.begin(), sorted.end());
  GOSSAMER_ENFORCE(sorted == identity(n), "ring order: the order is not a permutation of 0..{}",
                   n - 1);
  return 2.0 * static_cast<double>(n - 1) * score(cost, ring).bottleneck;
}

std::vector<std::size_t> orderRing(const LinkCosts& costs, double modelBytes) {
  const EdgeCosts cost = edgeCosts(costs, modelBytes);
  return cost.n <= kExactRingOrderLimit ? exactOrder(cost) : heuristicOrder(cost);
}

std::vector<std::size_t> orderRingHeuristic(const LinkCosts& costs, double modelBytes) {
  return heuristicOrder(edgeCosts(costs, modelBytes));
}

}  // namespace gossamer::topology
