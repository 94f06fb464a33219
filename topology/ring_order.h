// Orders the members of a ring all-reduce by the network: which member sends to which, so that
// the slowest link of the ring is as fast as it can be. Pure functions: no sockets, no clocks, no
// randomness; the same inputs give the same order on every machine.
//
// Cost model. A ring all-reduce of `modelBytes` over n members runs 2(n - 1) steps; in each one
// every member sends a chunk of modelBytes / n bytes to its successor at once, so a step lasts as
// long as the ring's slowest directed edge:
//   cost(i -> j) = latency(i, j) + (modelBytes / n) / bandwidth(i, j)
//   round(order) = 2(n - 1) * max_k cost(order[k] -> order[(k + 1) % n])
// Indices are positions 0..n-1 (topology/graph.h: positions in the sorted members).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gossamer::topology {

// Directed one-way link measurements between n >= 1 members, row-major n x n: entry i * n + j
// is the link from i to j. The diagonal is ignored (any value, NaN included). Valid when both
// vectors hold n * n entries and, off the diagonal, every latency is finite and >= 0 seconds and
// every bandwidth is > 0 bytes per second (+infinity: unlimited; NaN is invalid).
struct LinkCosts {
  std::size_t size = 0;
  std::vector<double> latencySeconds;
  std::vector<double> bandwidthBytesPerSecond;
};

// round(order) above for a ring all-reduce of `modelBytes` (finite, >= 0) along `order`, a
// permutation of 0..n-1; 0 for a single member. Throws gossamer::Error on invalid costs, an
// invalid modelBytes or an order that is not a permutation.
double estimateRingRoundSeconds(const LinkCosts& costs, std::span<const std::size_t> order,
                                double modelBytes);

// The largest n that orderRing solves exactly.
inline constexpr std::size_t kExactRingOrderLimit = 12;

// The ring order for an all-reduce of `modelBytes` (finite, >= 0): a permutation of 0..n-1 that
// starts at 0 (the canonical rotation) and minimizes, in this order,
//   1. the bottleneck, max over the ring's n directed edges of cost(i -> j);
//   2. the sum of the n edge costs (sums within a relative 1e-12 of the minimum count as equal);
//   3. the sequence itself, lexicographically.
// Exact for n <= kExactRingOrderLimit: the least bottleneck by binary search over the distinct
// edge costs, each step a Hamiltonian-cycle test by subset DP (Held-Karp over the edges within
// it), then the least sum and the smallest sequence from that DP; O(log(n) 2^n n^2) time, O(2^n n)
// memory. Above that it returns orderRingHeuristic (no optimality guarantee). Throws
// gossamer::Error on invalid costs or modelBytes, or when an edge cost overflows to infinity (a
// bandwidth too small for the chunk).
std::vector<std::size_t> orderRing(const LinkCosts& costs, double modelBytes);

// orderRing's path for n > kExactRingOrderLimit, callable at any n (tests compare it with the
// exact order). Local search from up to 9 starts: the identity order and the nearest-neighbour
// tours (cheapest edge to an unvisited member, ties to the smaller index) from members 0..7,
// rotated to start at 0. Each start is improved by first-improvement 2-opt (directed: a reversed
// segment pays its reversed edges) and or-opt (moving 1 to 3 consecutive members) moves, every
// move strictly better in (bottleneck, sum), at most 50 n moves per start, each found by an
// O(n^2) scan. Returns the best result (ties: the smaller sequence), so never worse than the
// identity order. Same preconditions and errors as orderRing.
std::vector<std::size_t> orderRingHeuristic(const LinkCosts& costs, double modelBytes);

}  // namespace gossamer::topology
