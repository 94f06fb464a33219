// Graph (topology/graph.h), the mixing rules (topology/mixing.h) and the LAPACK spectra
// (topology/spectral.h) on hand-made matrices.
#include "topology/graph.h"

#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "tests/topology/topology_testing.h"
#include "topology/mixing.h"
#include "topology/spectral.h"

namespace gossamer::topology {
namespace {

using namespace testing;

// Entry by entry within rounding (W_ii = 1 - row sum may differ from a literal by an ulp).
void checkMatrix(const std::vector<double>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t k = 0; k < actual.size(); ++k) {
    CAPTURE(k);
    CHECK(std::abs(actual[k] - expected[k]) <= 1e-15);
  }
}

TEST_CASE("topology: LAPACK eigenvalues and singular values of small matrices") {
  const std::vector<double> symmetric = {2, 1, 0, 1, 2, 0, 0, 0, 5};
  const std::vector<double> eigenvalues = symmetricEigenvalues(symmetric, 3);
  REQUIRE(eigenvalues.size() == 3);
  CHECK(eigenvalues[0] == doctest::Approx(1).epsilon(1e-14));
  CHECK(eigenvalues[1] == doctest::Approx(3).epsilon(1e-14));
  CHECK(eigenvalues[2] == doctest::Approx(5).epsilon(1e-14));
  // [[0, 2], [0, 0]] has singular values 2 and 0; row-major vs column-major does not matter.
  const std::vector<double> singular = singularValues(std::vector<double>{0, 2, 0, 0}, 2);
  CHECK(singular[0] == doctest::Approx(2).epsilon(1e-14));
  CHECK(std::abs(singular[1]) < 1e-14);
  CHECK_THROWS_AS(symmetricEigenvalues(symmetric, 2), Error);
  CHECK_THROWS_AS(singularValues(std::vector<double>{}, 0), Error);
}

TEST_CASE("topology: spectral gap conventions: one peer, exact averaging, no mixing") {
  CHECK(spectralGap(std::vector<double>{1}, 1) == 1);
  CHECK(spectralGap(std::vector<double>(16, 0.25), 4) == doctest::Approx(1).epsilon(1e-14));
  const std::vector<double> identity = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  CHECK(consensusRate(identity, 3) == doctest::Approx(1).epsilon(1e-14));
  CHECK(spectralGap(identity, 3) == 0);
  // A 3-cycle permutation mixed half-half: singular values |1/2 + 1/2 e^(2 pi i k / 3)|.
  const std::vector<double> cycle = {0.5, 0, 0.5, 0.5, 0.5, 0, 0, 0.5, 0.5};
  CHECK(spectralGap(cycle, 3) == doctest::Approx(0.5).epsilon(1e-13));
}

TEST_CASE("topology: mixing rules on a path of three") {
  Adjacency path(3);
  addEdge(path, 0, 1);
  addEdge(path, 2, 1);
  addEdge(path, 1, 2);  // present: ignored
  addEdge(path, 1, 1);  // self-loop: ignored
  CHECK(path == Adjacency{{1}, {0, 2}, {1}});
  CHECK_THROWS_AS(addEdge(path, 0, 3), Error);
  // Metropolis-Hastings: every edge touches degree 2, so 1/3 on edges.
  const std::vector<double> mh = mixingWeights(path, Mixing::kMetropolisHastings);
  checkMatrix(mh, {2.0 / 3, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 2.0 / 3});
  // Uniform: the ends split 1/2 - 1/2, the middle 1/3 each; columns do not sum to 1.
  const std::vector<double> uniform = mixingWeights(path, Mixing::kUniform);
  checkMatrix(uniform, {0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0.5, 0.5});
  const Graph graph(std::vector<PeerId>{1, 2, 3}, uniform);
  CHECK(!graph.doublyStochastic());
  CHECK(!graph.symmetric());
  // Eigenvalues 1, 1/2 (on (1, 0, -1)) and -1/6: gap 1 - |lambda_2| = 1/2.
  CHECK(graph.spectralGap() == doctest::Approx(0.5).epsilon(1e-12));
  const std::vector<double> moduli = eigenvalueModuli(uniform, 3);
  CHECK(moduli[0] == doctest::Approx(1).epsilon(1e-12));
  CHECK(moduli[2] == doctest::Approx(1.0 / 6).epsilon(1e-12));
  CHECK(mixingName(Mixing::kUniform) == "uniform");
  CHECK(mixingName(Mixing::kMetropolisHastings) == "metropolis-hastings");
}

TEST_CASE("topology: permutation and explicit weights") {
  const std::vector<std::size_t> sendTo = {1, 2, 0};
  CHECK(permutationWeights(sendTo) == std::vector<double>{0.5, 0, 0.5, 0.5, 0.5, 0, 0, 0.5, 0.5});
  CHECK(permutationWeights(std::vector<std::size_t>{0}) == std::vector<double>{1});
  CHECK_THROWS_WITH_AS(permutationWeights(std::vector<std::size_t>{1, 1}),
                       doctest::Contains("not a permutation"), Error);
  CHECK_THROWS_AS(permutationWeights(std::vector<std::size_t>{0, 2}), Error);
  const std::vector<WeightedEdge> edges = {{0, 1, 0.25}, {1, 2, 0.5}};
  CHECK(explicitWeights(3, edges) ==
        std::vector<double>{0.75, 0.25, 0, 0.25, 0.25, 0.5, 0, 0.5, 0.5});
  const std::vector<WeightedEdge> heavy = {{0, 1, 0.75}, {1, 2, 0.5}};
  CHECK_THROWS_WITH_AS(explicitWeights(3, heavy), doctest::Contains("node 1 sum to 1.25"), Error);
  const std::vector<WeightedEdge> loop = {{1, 1, 0.5}};
  CHECK_THROWS_AS(explicitWeights(3, loop), Error);
  const std::vector<WeightedEdge> zero = {{0, 1, 0}};
  CHECK_THROWS_AS(explicitWeights(3, zero), Error);
}

TEST_CASE("topology: Graph validates members, the matrix and a given tree") {
  const std::vector<double> ring3(9, 1.0 / 3);
  CHECK_THROWS_WITH_AS(Graph({3, 1, 2}, ring3), doctest::Contains("sorted"), Error);
  CHECK_THROWS_WITH_AS(Graph({}, {}), doctest::Contains("empty"), Error);
  CHECK_THROWS_WITH_AS(Graph({1, 2}, ring3), doctest::Contains("n x n"), Error);
  CHECK_THROWS_WITH_AS(Graph({1, 2}, {1.5, -0.5, 0.5, 0.5}), doctest::Contains("not in [0, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(Graph({1, 2}, {0.5, 0.4, 0.5, 0.5}), doctest::Contains("sums to"), Error);
  constexpr std::size_t kRoot = Graph::kNoParent;
  // A valid explicit tree: 2 is the root, 1 and 3 its children.
  const Graph tree({1, 2, 3}, ring3, {1, kRoot, 1});
  CHECK(tree.root() == 2);
  CHECK(tree.children(2) == std::vector<PeerId>{1, 3});
  CHECK(tree.depth(3) == 1);
  CHECK_THROWS_WITH_AS(Graph({1, 2, 3}, ring3, {kRoot, kRoot, 1}),
                       doctest::Contains("exactly one root"), Error);
  CHECK_THROWS_WITH_AS(Graph({1, 2, 3}, ring3, {2, kRoot, 0}), doctest::Contains("cycle"), Error);
  CHECK_THROWS_AS(Graph({1, 2, 3}, ring3, {1, kRoot}), Error);
  const std::vector<double> path =
      mixingWeights(Adjacency{{1}, {0, 2}, {1}}, Mixing::kMetropolisHastings);
  CHECK_THROWS_WITH_AS(Graph({1, 2, 3}, path, {kRoot, 0, 0}),
                       doctest::Contains("not an edge of the communication graph"), Error);
}

TEST_CASE("topology: directed graphs: strong connectivity, diameter, in/out neighbours") {
  // 0 -> 1 -> 2 only (2 keeps its own model): W_10 = W_21 = 1/2.
  const Graph chain({1, 2, 3}, {1, 0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5});
  CHECK(!chain.connected());
  CHECK(!chain.diameter().has_value());
  CHECK(chain.outNeighbors(1) == std::vector<PeerId>{2});
  CHECK(chain.inNeighbors(2) == std::vector<WeightedPeer>{{1, 0.5}});
  CHECK(chain.inNeighbors(1).empty());
  checkNeighbourConsistency(chain);
  // The BFS tree ignores direction.
  CHECK(chain.parent(3) == 2);
  CHECK(chain.depth(3) == 2);
  const Graph cycle({1, 2, 3}, permutationWeights(std::vector<std::size_t>{1, 2, 0}));
  CHECK(cycle.connected());
  CHECK(cycle.diameter() == std::size_t{2});
  const DegreeStats degrees = cycle.degreeStats();
  CHECK(degrees.min == 1);
  CHECK(degrees.max == 1);
  CHECK(degrees.mean == 1);
}

}  // namespace
}  // namespace gossamer::topology
