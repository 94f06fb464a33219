// Mixing weights: from a graph's edges to a mixing matrix W (row-major n x n, conventions in
// graph.h).
//
//   Metropolis-Hastings  W_ij = 1 / (1 + max(deg_i, deg_j)) on every edge, W_ii = 1 - row sum.
//                        Symmetric and doubly stochastic on every graph; the default.
//   uniform              W_ij = 1 / (deg_i + 1) over the closed neighbourhood of i (self
//                        included). Row stochastic always, but doubly stochastic (so preserving
//                        the average of the models) only on regular graphs; on an irregular graph
//                        (star, tree, hypercube with n not a power of two, most edge lists) the
//                        consensus is biased towards high-degree peers.
//   permutation          W = (I + P) / 2 for directed graphs in which every peer sends to exactly
//                        one peer and receives from exactly one (ring-uni, one-peer exponential):
//                        each peer averages its model with the one it receives. Doubly stochastic.
//   explicit             symmetric weights given per edge (edge-list files), W_ii = 1 - row sum.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "topology/graph.h"

namespace gossamer::topology {

enum class Mixing { kMetropolisHastings, kUniform };

// "metropolis-hastings" or "uniform".
std::string mixingName(Mixing mixing);

// W for an undirected graph (addEdge) under `mixing`.
std::vector<double> mixingWeights(const Adjacency& adjacency, Mixing mixing);

// W = (I + P) / 2 where peer i sends its model to sendTo[i] (W[sendTo[i]][i] = 1/2); a fixed
// point sendTo[i] == i gives W_ii = 1. Throws gossamer::Error unless sendTo is a permutation.
std::vector<double> permutationWeights(std::span<const std::size_t> sendTo);

struct WeightedEdge {
  std::size_t a;
  std::size_t b;
  double weight;  // W_ab = W_ba
};

// Symmetric W from explicit edge weights, W_ii = 1 - (sum of i's edge weights). Throws
// gossamer::Error on an index >= n, a self-loop, a weight outside (0, 1] or a row whose edge
// weights sum to more than 1 (+1e-12). Symmetric rows summing to 1 make W doubly stochastic.
std::vector<double> explicitWeights(std::size_t n, std::span<const WeightedEdge> edges);

}  // namespace gossamer::topology
