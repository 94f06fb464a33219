// The mixing rules of mixing.h: from edges (or a permutation, or explicit weights) to W.
#include "topology/mixing.h"

#include <algorithm>

#include "engine/base/enforce.h"

namespace gossamer::topology {
namespace {

// Tolerance on a row of explicit weights summing to more than 1.
constexpr double kRowSumSlack = 1e-12;

double offDiagonalSum(const std::vector<double>& w, std::size_t n, std::size_t row) {
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    if (j != row) sum += w[row * n + j];
  }
  return sum;
}

// Sets W_ii = 1 - (off-diagonal row sum), clamped at 0 (rounding can overshoot by an ulp).
void fillDiagonal(std::vector<double>& w, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) w[i * n + i] = std::max(0.0, 1.0 - offDiagonalSum(w, n, i));
}

}  // namespace

std::string mixingName(Mixing mixing) {
  return mixing == Mixing::kUniform ? "uniform" : "metropolis-hastings";
}

std::vector<double> mixingWeights(const Adjacency& adjacency, Mixing mixing) {
  const std::size_t n = adjacency.size();
  std::vector<double> w(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t degreeI = adjacency[i].size();
    for (const std::size_t j : adjacency[i]) {
      const std::size_t degreeJ = adjacency[j].size();
      w[i * n + j] = mixing == Mixing::kUniform
                         ? 1.0 / static_cast<double>(degreeI + 1)
                         : 1.0 / static_cast<double>(1 + std::max(degreeI, degreeJ));
    }
  }
  fillDiagonal(w, n);
  return w;
}

std::vector<double> permutationWeights(std::span<const std::size_t> sendTo) {
  const std::size_t n = sendTo.size();
  std::vector<bool> received(n, false);
  std::vector<double> w(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t to = sendTo[i];
    GOSSAMER_ENFORCE(to < n && !received[to], "sendTo is not a permutation of 0..{} (at {} -> {})",
                     n - 1, i, to);
    received[to] = true;
    w[to * n + i] += 0.5;
    w[i * n + i] += 0.5;
  }
  return w;
}

std::vector<double> explicitWeights(std::size_t n, std::span<const WeightedEdge> edges) {
  std::vector<double> w(n * n, 0.0);
  for (const WeightedEdge& e : edges) {
    GOSSAMER_ENFORCE(e.a < n && e.b < n && e.a != e.b, "invalid edge {} - {} for {} nodes", e.a,
                     e.b, n);
    GOSSAMER_ENFORCE(e.weight > 0 && e.weight <= 1, "edge {} - {} has weight {} outside (0, 1]",
                     e.a, e.b, e.weight);
    w[e.a * n + e.b] = w[e.b * n + e.a] = e.weight;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double sum = offDiagonalSum(w, n, i);
    GOSSAMER_ENFORCE(sum <= 1 + kRowSumSlack, "the edge weights of node {} sum to {}, more than 1",
                     i, sum);
  }
  fillDiagonal(w, n);
  return w;
}

}  // namespace gossamer::topology
