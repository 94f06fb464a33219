// The built-in topologies (topology/topologies.cc): structural invariants for every built-in and
// every n in 1..40, closed-form spectra, determinism, membership changes, edge cases and errors.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "tests/topology/topology_testing.h"
#include "topology/spectral.h"
#include "topology/topology.h"

namespace gossamer::topology {
namespace {

using namespace testing;
using std::numbers::pi;

constexpr std::size_t kMaxPeers = 40;

Graph buildOn(const std::string& name, std::size_t n, const TopologyOptions& options = {},
              std::uint64_t step = 0) {
  return makeTopology(name, options)->build(spacedMembers(n), step);
}

std::vector<double> sorted(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values;
}

// Eigenvalues of W, ascending, checked against `expected` (any order) within 1e-12.
void checkEigenvalues(const Graph& graph, std::vector<double> expected) {
  const std::vector<double> actual = symmetricEigenvalues(graph.mixingMatrix(), graph.size());
  expected = sorted(std::move(expected));
  REQUIRE(actual.size() == expected.size());
  for (std::size_t k = 0; k < actual.size(); ++k)
    CHECK(actual[k] == doctest::Approx(expected[k]).epsilon(1e-12));
}

// 1 - the largest modulus among `eigenvalues` other than one copy of 1.
double gapFromEigenvalues(std::vector<double> eigenvalues) {
  eigenvalues = sorted(std::move(eigenvalues));
  eigenvalues.pop_back();  // the eigenvalue 1 of the consensus vector
  double largest = 0;
  for (const double value : eigenvalues) largest = std::max(largest, std::abs(value));
  return 1 - largest;
}

// Product A * B of row-major n x n matrices.
std::vector<double> multiply(const std::vector<double>& a, const std::vector<double>& b,
                             std::size_t n) {
  std::vector<double> c(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
    }
  }
  return c;
}

TEST_CASE("topology: builtinTopologies lists the eleven built-ins and makeTopology names them") {
  const std::vector<std::string> expected = {
      "ring",           "ring-uni",    "tree",
      "star",           "mesh",        "torus",
      "hypercube",      "exponential", "one-peer-exponential",
      "random-regular", "file"};
  std::vector<std::string> names;
  for (const auto& [name, description] : builtinTopologies()) {
    names.push_back(name);
    CHECK(!description.empty());
  }
  CHECK(names == expected);
  CHECK(makeTopology("ring")->name() == "ring");
  CHECK(makeTopology("ring", {.mixing = Mixing::kUniform})->name() == "ring(mixing=uniform)");
  CHECK(makeTopology("tree", {.arity = 3})->name() == "tree(k=3)");
  CHECK(makeTopology("star", {.centerIndex = 2})->name() == "star(center=2)");
  CHECK(makeTopology("random-regular", {.degree = 3, .seed = 9})->name() ==
        "random-regular(d=3, seed=9)");
  CHECK(makeTopology("ring")->mixingRule() == "metropolis-hastings");
  CHECK(makeTopology("mesh", {.mixing = Mixing::kUniform})->mixingRule() == "uniform");
  CHECK(makeTopology("ring-uni")->mixingRule() == "(I+P)/2");
  for (const std::string& name : builtinNamesWithoutFile()) {
    CHECK(makeTopology(name)->timeVarying() == (name == "one-peer-exponential"));
  }
}

TEST_CASE("topology: every static built-in is connected and doubly stochastic for n = 1..40") {
  for (const Mixing mixing : {Mixing::kMetropolisHastings, Mixing::kUniform}) {
    for (const std::string& name : builtinNamesWithoutFile()) {
      const TopologyOptions options{.mixing = mixing};
      const auto topology = makeTopology(name, options);
      for (std::size_t n = 1; n <= kMaxPeers; ++n) {
        if (!buildable(name, n, options)) continue;
        CAPTURE(name);
        CAPTURE(n);
        CAPTURE(mixingName(mixing));
        const Graph graph = topology->build(spacedMembers(n));
        CHECK(graph.size() == n);
        CHECK(graph.members() == spacedMembers(n));
        CHECK(graph.connected());
        REQUIRE(graph.diameter().has_value());
        CHECK(*graph.diameter() < n);
        if (n >= 2) CHECK(graph.spectralGap() > 1e-6);
        CHECK(graph.spectralGap() <= 1 + kTight);
        checkNeighbourConsistency(graph);
        checkTreeConsistency(graph);
        if (!directed(name)) {
          // An undirected support: who i mixes in is who needs i's model.
          for (const PeerId id : graph.members()) {
            std::vector<PeerId> in;
            for (const WeightedPeer& peer : graph.inNeighbors(id)) in.push_back(peer.id);
            CHECK(in == graph.outNeighbors(id));
          }
        }
        if (mixing == Mixing::kMetropolisHastings || directed(name)) {
          checkDoublyStochastic(graph);
          CHECK(graph.symmetric() == (!directed(name) || n <= 2));
        }
      }
    }
  }
}

TEST_CASE("topology: random-regular with odd degree is connected and d-regular for even n") {
  for (const std::size_t d : {3, 5}) {
    for (std::size_t n = d + 1; n <= kMaxPeers; ++n) {
      if (n % 2 == 1) continue;
      CAPTURE(n);
      CAPTURE(d);
      const Graph graph = buildOn("random-regular", n, {.degree = d});
      CHECK(graph.connected());
      const DegreeStats degrees = graph.degreeStats();
      CHECK(degrees.min == d);
      CHECK(degrees.max == d);
      checkDoublyStochastic(graph);
    }
  }
}

TEST_CASE("topology: uniform mixing is 1/(deg+1), doubly stochastic exactly on regular graphs") {
  for (const char* name : {"ring", "mesh", "torus", "exponential", "random-regular"}) {
    for (const std::size_t n : {5, 8, 12, 16, 30}) {
      CAPTURE(name);
      CAPTURE(n);
      const Graph graph = buildOn(name, n, {.mixing = Mixing::kUniform});
      checkDoublyStochastic(graph);
      const Graph mh = buildOn(name, n);
      CHECK(graph.mixingMatrix() == mh.mixingMatrix());  // on a regular graph they agree
    }
  }
  for (const char* name : {"star", "tree", "hypercube"}) {
    CAPTURE(name);
    const Graph graph = buildOn(name, 6, {.mixing = Mixing::kUniform});
    CHECK(!graph.doublyStochastic());
    for (const PeerId i : graph.members()) {
      const double expected = 1.0 / static_cast<double>(graph.inDegree(i) + 1);
      CHECK(graph.selfWeight(i) == doctest::Approx(expected).epsilon(1e-15));
      for (const WeightedPeer& in : graph.inNeighbors(i)) CHECK(in.weight == expected);
    }
  }
  // Not doubly stochastic, so the gap is 1 - |lambda_2|. Uniform star: the leaf differences
  // have eigenvalue 1/2, the (center, leaves) block 1 and 1/n - 1/2, so the gap is 1/2.
  for (std::size_t n = 3; n <= kMaxPeers; ++n) {
    CAPTURE(n);
    const Graph star = buildOn("star", n, {.mixing = Mixing::kUniform});
    CHECK(star.spectralGap() == doctest::Approx(0.5).epsilon(1e-12));
  }
}

TEST_CASE("topology: Metropolis-Hastings weights are 1/(1+max(deg_i, deg_j)), symmetric") {
  for (const char* name : {"star", "tree", "hypercube", "torus"}) {
    CAPTURE(name);
    const Graph graph = buildOn(name, 11);
    CHECK(graph.symmetric());
    for (const PeerId i : graph.members()) {
      for (const WeightedPeer& in : graph.inNeighbors(i)) {
        const auto larger = std::max(graph.inDegree(i), graph.inDegree(in.id));
        CHECK(in.weight == 1.0 / static_cast<double>(1 + larger));
      }
    }
  }
}

TEST_CASE("topology: ring eigenvalues are 1/3 + 2/3 cos(2 pi k / n)") {
  for (const Mixing mixing : {Mixing::kMetropolisHastings, Mixing::kUniform}) {
    for (std::size_t n = 3; n <= kMaxPeers; ++n) {
      CAPTURE(n);
      const Graph graph = buildOn("ring", n, {.mixing = mixing});
      std::vector<double> expected;
      for (std::size_t k = 0; k < n; ++k) {
        expected.push_back(1.0 / 3 + 2.0 / 3 * std::cos(2 * pi * static_cast<double>(k) / n));
      }
      checkEigenvalues(graph, expected);
      CHECK(graph.spectralGap() == doctest::Approx(gapFromEigenvalues(expected)).epsilon(1e-12));
    }
  }
}

TEST_CASE("topology: the full mesh is W = 11^T/n with spectral gap 1") {
  for (const Mixing mixing : {Mixing::kMetropolisHastings, Mixing::kUniform}) {
    for (std::size_t n = 1; n <= kMaxPeers; ++n) {
      CAPTURE(n);
      const Graph graph = buildOn("mesh", n, {.mixing = mixing});
      for (const double w : graph.mixingMatrix()) {
        CHECK(w == doctest::Approx(1.0 / static_cast<double>(n)).epsilon(1e-14));
      }
      CHECK(graph.spectralGap() == doctest::Approx(1).epsilon(1e-12));
      CHECK(*graph.diameter() == (n == 1 ? 0u : 1u));
    }
  }
}

TEST_CASE("topology: the d-dimensional hypercube has spectral gap 2/(d+1)") {
  for (std::size_t d = 1; d <= 5; ++d) {
    const std::size_t n = std::size_t{1} << d;
    CAPTURE(n);
    const Graph graph = buildOn("hypercube", n);
    // Adjacency eigenvalues d - 2k (multiplicity C(d, k)), W = (I + A) / (d + 1).
    std::vector<double> expected;
    for (std::size_t mask = 0; mask < n; ++mask) {
      const auto k = static_cast<double>(std::popcount(mask));
      expected.push_back((1 + static_cast<double>(d) - 2 * k) / static_cast<double>(d + 1));
    }
    checkEigenvalues(graph, expected);
    CHECK(graph.spectralGap() == doctest::Approx(2.0 / static_cast<double>(d + 1)).epsilon(1e-12));
    CHECK(*graph.diameter() == d);
    CHECK(graph.degreeStats().min == d);
    CHECK(graph.degreeStats().max == d);
  }
}

TEST_CASE("topology: the star has eigenvalues 1, 1 - 1/n (n-2 times), 0 and gap 1/n") {
  for (std::size_t n = 3; n <= kMaxPeers; ++n) {
    CAPTURE(n);
    const Graph graph = buildOn("star", n);
    std::vector<double> expected(n - 2, 1 - 1.0 / static_cast<double>(n));
    expected.push_back(1);
    expected.push_back(0);
    checkEigenvalues(graph, expected);
    CHECK(graph.spectralGap() == doctest::Approx(1.0 / static_cast<double>(n)).epsilon(1e-12));
    CHECK(*graph.diameter() == 2);
  }
}

TEST_CASE("topology: circulant built-ins match their Fourier eigenvalues") {
  // W of the exponential graph is circulant: eigenvalue k is sum_j W_0j cos(2 pi j k / n).
  for (std::size_t n = 2; n <= kMaxPeers; ++n) {
    CAPTURE(n);
    const Graph graph = buildOn("exponential", n);
    const std::vector<double>& w = graph.mixingMatrix();
    std::vector<double> expected;
    for (std::size_t k = 0; k < n; ++k) {
      double value = 0;
      for (std::size_t j = 0; j < n; ++j) {
        value += w[j] * std::cos(2 * pi * static_cast<double>(j * k) / static_cast<double>(n));
      }
      expected.push_back(value);
    }
    checkEigenvalues(graph, expected);
    CHECK(graph.degreeStats().min == graph.degreeStats().max);
  }
  // The r x c torus with r, c >= 3: 1/5 + 2/5 cos(2 pi a / r) + 2/5 cos(2 pi b / c).
  for (const auto& [n, r, c] : std::vector<std::array<std::size_t, 3>>{
           {9, 3, 3}, {12, 3, 4}, {16, 4, 4}, {20, 4, 5}, {30, 5, 6}, {36, 6, 6}}) {
    CAPTURE(n);
    const Graph graph = buildOn("torus", n);
    std::vector<double> expected;
    for (std::size_t a = 0; a < r; ++a) {
      for (std::size_t b = 0; b < c; ++b) {
        expected.push_back(0.2 + 0.4 * std::cos(2 * pi * static_cast<double>(a) / r) +
                           0.4 * std::cos(2 * pi * static_cast<double>(b) / c));
      }
    }
    checkEigenvalues(graph, expected);
    CHECK(*graph.diameter() == r / 2 + c / 2);
  }
  // A prime n degenerates to a ring.
  CHECK(buildOn("torus", 13).mixingMatrix() == buildOn("ring", 13).mixingMatrix());
}

TEST_CASE("topology: unidirectional ring is (I+P)/2 with gap 1 - cos(pi/n)") {
  for (std::size_t n = 2; n <= kMaxPeers; ++n) {
    CAPTURE(n);
    const auto members = spacedMembers(n);
    const Graph graph = makeTopology("ring-uni")->build(members);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(graph.outNeighbors(members[i]) == std::vector<PeerId>{members[(i + 1) % n]});
      CHECK(graph.selfWeight(members[i]) == 0.5);
    }
    CHECK(graph.spectralGap() ==
          doctest::Approx(1 - std::cos(pi / static_cast<double>(n))).epsilon(1e-12));
    CHECK(*graph.diameter() == n - 1);
  }
}

TEST_CASE("topology: one-peer exponential sends to i + 2^(t mod tau) and averages exactly") {
  const auto topology = makeTopology("one-peer-exponential");
  for (std::size_t n = 1; n <= kMaxPeers; ++n) {
    CAPTURE(n);
    const auto members = spacedMembers(n);
    const auto period = static_cast<std::size_t>(std::bit_width(n - 1));
    CHECK(topology->build(members, 0).connected());
    std::vector<double> product(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) product[i * n + i] = 1;
    for (std::uint64_t step = 0; step < 2 * std::max<std::size_t>(period, 1); ++step) {
      CAPTURE(step);
      const Graph graph = topology->build(members, step);
      checkDoublyStochastic(graph);
      checkNeighbourConsistency(graph);
      checkTreeConsistency(graph);
      if (n == 1) continue;
      const std::size_t hop = std::size_t{1} << (step % period);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(graph.outNeighbors(members[i]) == std::vector<PeerId>{members[(i + hop) % n]});
        CHECK(graph.inNeighbors(members[i]) ==
              std::vector<WeightedPeer>{{members[(i + n - hop) % n], 0.5}});
        CHECK(graph.selfWeight(members[i]) == 0.5);
      }
      if (step < period) product = multiply(product, graph.mixingMatrix(), n);
    }
    // Over one period every model reaches every peer; for n = 2^tau exactly the average.
    const bool powerOfTwo = std::has_single_bit(n);
    for (const double w : product) {
      CHECK(w > 0);
      if (powerOfTwo) CHECK(w == doctest::Approx(1.0 / static_cast<double>(n)).epsilon(1e-14));
    }
  }
  // One step alone can be disconnected: n = 4, hop 2 pairs 0-2 and 1-3.
  const Graph split = topology->build(spacedMembers(4), 1);
  CHECK(!split.connected());
  CHECK(!split.diameter().has_value());
  CHECK(split.spectralGap() == 0);
}

TEST_CASE("topology: k-ary tree and star trees") {
  for (const std::size_t k : {1, 2, 3, 5}) {
    const std::size_t n = 23;
    const auto members = spacedMembers(n);
    const Graph graph = makeTopology("tree", {.arity = k})->build(members);
    CAPTURE(k);
    CHECK(graph.root() == members[0]);
    for (std::size_t i = 1; i < n; ++i) {
      CHECK(graph.parent(members[i]) == members[(i - 1) / k]);
    }
    std::vector<PeerId> rootChildren;
    for (std::size_t c = 1; c <= std::min(k, n - 1); ++c) rootChildren.push_back(members[c]);
    CHECK(graph.children(members[0]) == rootChildren);
    // Depth of position i in a complete k-ary tree numbered breadth first.
    std::size_t depth = 0;
    std::size_t levelEnd = 0;  // last position of the current level
    std::size_t levelSize = 1;
    for (std::size_t i = 0; i < n; ++i) {
      if (i > levelEnd) {
        ++depth;
        levelSize *= k;
        levelEnd += levelSize;
      }
      CHECK(graph.depth(members[i]) == depth);
    }
  }
  for (const std::size_t center : {0, 4, 9}) {
    const auto members = spacedMembers(10);
    const Graph graph = makeTopology("star", {.centerIndex = center})->build(members);
    CHECK(graph.root() == members[center]);
    for (const PeerId id : members) {
      if (id == members[center]) continue;
      CHECK(graph.parent(id) == members[center]);
      CHECK(graph.depth(id) == 1);
      CHECK(graph.inNeighbors(id).size() == 1);
    }
    CHECK(graph.children(members[center]).size() == 9);
  }
}

TEST_CASE("topology: non-tree topologies use a BFS tree rooted at the smallest id") {
  const auto members = spacedMembers(8);
  const Graph ring = makeTopology("ring")->build(members);
  CHECK(ring.root() == members[0]);
  CHECK(ring.children(members[0]) == std::vector<PeerId>{members[1], members[7]});
  CHECK(ring.parent(members[4]) == members[3]);  // reached via 3 first (smaller index)
  CHECK(ring.depth(members[4]) == 4);
  const Graph mesh = makeTopology("mesh")->build(members);
  CHECK(mesh.children(members[0]).size() == 7);
}

TEST_CASE("topology: same members and seed give the same graph, seeds differ") {
  for (const std::string& name : builtinNamesWithoutFile()) {
    CAPTURE(name);
    CHECK(buildOn(name, 20, {}, 3).mixingMatrix() == buildOn(name, 20, {}, 3).mixingMatrix());
  }
  const auto members = spacedMembers(30);
  std::set<std::vector<double>> distinct;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const Graph graph = makeTopology("random-regular", {.degree = 4, .seed = seed})->build(members);
    CHECK(graph.degreeStats().min == 4);
    CHECK(graph.degreeStats().max == 4);
    CHECK(graph.connected());
    distinct.insert(graph.mixingMatrix());
  }
  CHECK(distinct.size() == 5);
  // d = 2 is one random cycle: connected, and not simply the ring.
  const Graph cycle = makeTopology("random-regular", {.degree = 2, .seed = 7})->build(members);
  CHECK(cycle.connected());
  CHECK(cycle.degreeStats().max == 2);
  CHECK(cycle.mixingMatrix() != makeTopology("ring")->build(members).mixingMatrix());
}

TEST_CASE("topology: graphs rebuild on the reduced member list when peers leave") {
  std::vector<PeerId> members = {3, 7, 10, 15, 22, 40, 41, 99, 120, 121, 300};
  const std::vector<PeerId> left = {10, 41, 300};
  std::vector<PeerId> remaining;
  std::set_difference(members.begin(), members.end(), left.begin(), left.end(),
                      std::back_inserter(remaining));
  for (const std::string& name : builtinNamesWithoutFile()) {
    const TopologyOptions options{.degree = 3};
    if (!buildable(name, remaining.size(), options)) continue;
    CAPTURE(name);
    const Graph graph = makeTopology(name, options)->build(remaining);
    CHECK(graph.members() == remaining);
    CHECK(graph.connected());
    checkDoublyStochastic(graph);
    checkNeighbourConsistency(graph);
    for (const PeerId gone : left) {
      CHECK(!graph.contains(gone));
      CHECK_THROWS_WITH_AS(graph.inNeighbors(gone), doctest::Contains("not a member"), Error);
    }
  }
  // Ids map through positions: remaining = 3 7 15 22 40 99 120 121.
  const Graph ring = makeTopology("ring")->build(remaining);
  CHECK(ring.outNeighbors(7) == std::vector<PeerId>{3, 15});
  CHECK(ring.outNeighbors(121) == std::vector<PeerId>{3, 120});
  const Graph tree = makeTopology("tree")->build(remaining);
  CHECK(tree.parent(22) == 7);
  CHECK(tree.children(7) == std::vector<PeerId>{22, 40});
  CHECK(tree.indexOf(99) == 5);
}

TEST_CASE("topology: a single peer and two peers") {
  for (const std::string& name : builtinNamesWithoutFile()) {
    CAPTURE(name);
    const TopologyOptions options{.degree = 1};
    if (buildable(name, 1, options)) {
      const Graph one = makeTopology(name, options)->build(std::vector<PeerId>{42});
      CHECK(one.mixingMatrix() == std::vector<double>{1.0});
      CHECK(one.selfWeight(42) == 1);
      CHECK(one.inNeighbors(42).empty());
      CHECK(one.outNeighbors(42).empty());
      CHECK(!one.parent(42).has_value());
      CHECK(one.children(42).empty());
      CHECK(one.root() == 42);
      CHECK(one.depth(42) == 0);
      std::mt19937_64 rng(1);
      CHECK(!one.randomPartner(42, rng).has_value());
      CHECK(one.spectralGap() == 1);
      CHECK(one.connected());
      CHECK(one.diameter() == std::size_t{0});
      CHECK(one.degreeStats().max == 0);
    }
    const Graph two = makeTopology(name, options)->build(std::vector<PeerId>{5, 9});
    CHECK(two.mixingMatrix() == std::vector<double>{0.5, 0.5, 0.5, 0.5});
    CHECK(two.inNeighbors(5) == std::vector<WeightedPeer>{{9, 0.5}});
    CHECK(two.outNeighbors(9) == std::vector<PeerId>{5});
    CHECK(two.spectralGap() == doctest::Approx(1).epsilon(1e-12));
    CHECK(two.diameter() == std::size_t{1});
    CHECK(two.parent(9) == std::optional<PeerId>(5));
  }
}

TEST_CASE("topology: randomPartner draws uniformly among out-neighbours, reproducibly") {
  const Graph graph = makeTopology("mesh")->build(spacedMembers(5));
  const PeerId self = graph.members()[2];
  std::mt19937_64 rng(123);
  std::mt19937_64 again(123);
  std::map<PeerId, int> counts;
  constexpr int kDraws = 4000;
  for (int draw = 0; draw < kDraws; ++draw) {
    const auto partner = graph.randomPartner(self, rng);
    REQUIRE(partner.has_value());
    CHECK(partner == graph.randomPartner(self, again));
    ++counts[*partner];
  }
  const auto out = graph.outNeighbors(self);
  CHECK(counts.size() == out.size());
  for (const PeerId id : out) {
    CHECK(counts[id] > kDraws / 4 * 0.85);  // 1000 expected, sd ~27
    CHECK(counts[id] < kDraws / 4 * 1.15);
  }
}

TEST_CASE("topology: describe and formatDescription summarise a topology") {
  const auto ring = makeTopology("ring");
  const Description d = describe(*ring, 8);
  CHECK(d.peers == 8);
  CHECK(d.minDegree == 2);
  CHECK(d.maxDegree == 2);
  CHECK(d.meanDegree == 2);
  CHECK(d.diameter == std::size_t{4});
  CHECK(d.connected);
  CHECK(d.doublyStochastic);
  CHECK(d.spectralGap ==
        doctest::Approx(1 - (1.0 / 3 + 2.0 / 3 * std::cos(pi / 4))).epsilon(1e-12));
  const std::string text = formatDescription(*ring, d);
  for (const char* expected : {"topology:", "ring", "peers:", "8", "degree:", "min 2, max 2",
                               "diameter:", "4", "spectral gap:", "connected:", "yes"}) {
    CHECK(text.find(expected) != std::string::npos);
  }

  const auto star = makeTopology("star", {.mixing = Mixing::kUniform});
  const Description s = describe(*star, 6);
  CHECK(s.minDegree == 1);
  CHECK(s.maxDegree == 5);
  CHECK(s.meanDegree == doctest::Approx(10.0 / 6));
  CHECK(!s.doublyStochastic);
  CHECK(formatDescription(*star, s).find("uniform") != std::string::npos);

  const auto onePeer = makeTopology("one-peer-exponential");
  const Description split = describe(*onePeer, 4, 1);
  CHECK(!split.connected);
  CHECK(!split.diameter.has_value());
  const std::string splitText = formatDescription(*onePeer, split);
  CHECK(splitText.find("infinite") != std::string::npos);
  CHECK(splitText.find("step") != std::string::npos);
  CHECK_THROWS_AS(describe(*ring, 0), Error);
}

TEST_CASE("topology: bad input gives a clear gossamer::Error") {
  const auto ring = makeTopology("ring");
  CHECK_THROWS_WITH_AS(ring->build(std::vector<PeerId>{1, 3, 2}), doctest::Contains("sorted"),
                       Error);
  CHECK_THROWS_WITH_AS(ring->build(std::vector<PeerId>{1, 2, 2}), doctest::Contains("duplicates"),
                       Error);
  CHECK_THROWS_WITH_AS(ring->build(std::vector<PeerId>{}), doctest::Contains("empty"), Error);
  const Graph graph = ring->build(std::vector<PeerId>{1, 2, 3});
  CHECK_THROWS_WITH_AS(graph.indexOf(7), doctest::Contains("peer 7 is not a member"), Error);
  CHECK_THROWS_AS(graph.selfWeight(7), Error);
  CHECK_THROWS_AS(graph.outNeighbors(7), Error);
  CHECK_THROWS_AS(graph.parent(7), Error);
  CHECK_THROWS_AS(graph.weight(1, 7), Error);
  std::mt19937_64 rng(1);
  CHECK_THROWS_AS(graph.randomPartner(7, rng), Error);

  CHECK_THROWS_WITH_AS(makeTopology("moebius"),
                       doctest::Contains("ring, ring-uni, tree, star, mesh, torus, hypercube"),
                       Error);
  CHECK_THROWS_WITH_AS(makeTopology("tree", {.arity = 0}), doctest::Contains("arity"), Error);
  CHECK_THROWS_WITH_AS(makeTopology("random-regular", {.degree = 0}), doctest::Contains("degree"),
                       Error);
  CHECK_THROWS_WITH_AS(makeTopology("star", {.centerIndex = 5})->build(spacedMembers(5)),
                       doctest::Contains("center index 5"), Error);
  const auto regular = makeTopology("random-regular", {.degree = 4});
  CHECK_THROWS_WITH_AS(regular->build(spacedMembers(4)), doctest::Contains("d < n"), Error);
  CHECK_THROWS_WITH_AS(regular->build(spacedMembers(1)), doctest::Contains("d < n"), Error);
  const auto odd = makeTopology("random-regular", {.degree = 3});
  CHECK_THROWS_WITH_AS(odd->build(spacedMembers(7)), doctest::Contains("n * d even"), Error);
  CHECK_THROWS_WITH_AS(makeTopology("random-regular", {.degree = 1})->build(spacedMembers(4)),
                       doctest::Contains("disconnected"), Error);
  CHECK_THROWS_WITH_AS(makeTopology("file"), doctest::Contains("no edge-list file"), Error);
}

}  // namespace
}  // namespace gossamer::topology
