// Shared helpers of the topology tests (tests/topology/): member lists, the options that make
// every built-in buildable, and the invariants every Graph must satisfy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "topology/topology.h"

namespace gossamer::topology::testing {

// Exact-arithmetic tolerance for sums of a handful of weights.
constexpr double kTight = 1e-12;

// Ids first, first + stride, ... (n of them): ids that differ from positions.
inline std::vector<PeerId> spacedMembers(std::size_t n, PeerId first = 100, PeerId stride = 7) {
  std::vector<PeerId> members(n);
  for (std::size_t i = 0; i < n; ++i) members[i] = first + stride * i;
  return members;
}

// The built-ins that need no file, with the topology made from default options.
inline std::vector<std::string> builtinNamesWithoutFile() {
  std::vector<std::string> names;
  for (const auto& [name, description] : builtinTopologies()) {
    if (name != "file") names.push_back(name);
  }
  return names;
}

// Whether `name` (default options) accepts n members; random-regular needs d < n, n * d even.
inline bool buildable(const std::string& name, std::size_t n, const TopologyOptions& options) {
  if (name != "random-regular") return true;
  const std::size_t d = options.degree;
  return d < n && (n * d) % 2 == 0 && (d >= 2 || n == 2);
}

// Directed built-ins: W is not symmetric for n >= 3.
inline bool directed(const std::string& name) {
  return name == "ring-uni" || name == "one-peer-exponential";
}

// Rows and columns of W sum to 1 within kTight; every entry in [0, 1].
inline void checkDoublyStochastic(const Graph& graph) {
  const std::size_t n = graph.size();
  const std::vector<double>& w = graph.mixingMatrix();
  REQUIRE(w.size() == n * n);
  for (std::size_t i = 0; i < n; ++i) {
    double row = 0;
    double column = 0;
    for (std::size_t j = 0; j < n; ++j) {
      CHECK(w[i * n + j] >= 0);
      CHECK(w[i * n + j] <= 1);
      row += w[i * n + j];
      column += w[j * n + i];
    }
    CHECK(std::abs(row - 1) <= kTight);
    CHECK(std::abs(column - 1) <= kTight);
  }
  CHECK(graph.doublyStochastic());
}

// j is an in-neighbour of i (with weight W_ij) iff i is an out-neighbour of j; W_ii plus the
// in-weights is 1.
inline void checkNeighbourConsistency(const Graph& graph) {
  for (const PeerId i : graph.members()) {
    double row = graph.selfWeight(i);
    for (const WeightedPeer& in : graph.inNeighbors(i)) {
      CHECK(in.id != i);
      CHECK(in.weight > 0);
      CHECK(in.weight == graph.weight(i, in.id));
      const std::vector<PeerId> out = graph.outNeighbors(in.id);
      CHECK(std::find(out.begin(), out.end(), i) != out.end());
      row += in.weight;
    }
    CHECK(std::abs(row - 1) <= kTight);
    for (const PeerId j : graph.outNeighbors(i)) {
      CHECK(graph.weight(j, i) > 0);
    }
    CHECK(graph.inDegree(i) == graph.inNeighbors(i).size());
    CHECK(graph.outDegree(i) == graph.outNeighbors(i).size());
  }
}

// parent/children agree, depths count edges from the root, and every tree edge is an edge of
// the communication graph.
inline void checkTreeConsistency(const Graph& graph) {
  const PeerId root = graph.root();
  CHECK(!graph.parent(root).has_value());
  CHECK(graph.depth(root) == 0);
  std::size_t childCount = 0;
  for (const PeerId id : graph.members()) {
    const std::vector<PeerId> children = graph.children(id);
    childCount += children.size();
    for (const PeerId child : children) {
      REQUIRE(graph.parent(child).has_value());
      CHECK(*graph.parent(child) == id);
      CHECK(graph.depth(child) == graph.depth(id) + 1);
      CHECK((graph.weight(child, id) > 0 || graph.weight(id, child) > 0));
    }
    if (const auto parent = graph.parent(id)) {
      const std::vector<PeerId> siblings = graph.children(*parent);
      CHECK(std::find(siblings.begin(), siblings.end(), id) != siblings.end());
    }
  }
  if (graph.connected()) CHECK(childCount + 1 == graph.size());
}

}  // namespace gossamer::topology::testing
