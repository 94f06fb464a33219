// The built-in topologies (topology.h has the list and their definitions) and their factory.
#include <bit>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "topology/edge_list.h"
#include "topology/random.h"
#include "topology/topology.h"

namespace gossamer::topology {
namespace {

// "base" or "base(p1, p2, mixing=uniform)".
std::string composeName(const std::string& base, std::vector<std::string> params, Mixing mixing) {
  if (mixing == Mixing::kUniform) params.push_back("mixing=uniform");
  if (params.empty()) return base;
  return fmt::format("{}({})", base, fmt::join(params, ", "));
}

// ---- edges of the undirected built-ins, on positions 0..n-1 ----

Adjacency ringEdges(std::size_t n) {
  Adjacency adjacency(n);
  for (std::size_t i = 0; i < n; ++i) addEdge(adjacency, i, (i + 1) % n);
  return adjacency;
}

Adjacency meshEdges(std::size_t n) {
  Adjacency adjacency(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) addEdge(adjacency, i, j);
  }
  return adjacency;
}

Adjacency torusEdges(std::size_t n) {
  std::size_t rows = 1;
  for (std::size_t q = 1; q * q <= n; ++q) {
    if (n % q == 0) rows = q;
  }
  const std::size_t columns = n / rows;
  Adjacency adjacency(n);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < columns; ++c) {
      addEdge(adjacency, r * columns + c, ((r + 1) % rows) * columns + c);
      addEdge(adjacency, r * columns + c, r * columns + (c + 1) % columns);
    }
  }
  return adjacency;
}

Adjacency hypercubeEdges(std::size_t n) {
  Adjacency adjacency(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t bit = 1; bit < n; bit <<= 1) {
      if ((i ^ bit) < n) addEdge(adjacency, i, i ^ bit);
    }
  }
  return adjacency;
}

Adjacency exponentialEdges(std::size_t n) {
  Adjacency adjacency(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t hop = 1; hop < n; hop <<= 1) addEdge(adjacency, i, (i + hop) % n);
  }
  return adjacency;
}

// ---- trees, as parent vectors (Graph::kNoParent at the root) ----

std::vector<std::size_t> karyParents(std::size_t n, std::size_t arity) {
  std::vector<std::size_t> parents(n, Graph::kNoParent);
  for (std::size_t i = 1; i < n; ++i) parents[i] = (i - 1) / arity;
  return parents;
}

std::vector<std::size_t> starParents(std::size_t n, std::size_t center) {
  GOSSAMER_ENFORCE(center < n, "star: the center index {} is not a position among {} members",
                   center, n);
  std::vector<std::size_t> parents(n, center);
  parents[center] = Graph::kNoParent;
  return parents;
}

Adjacency treeEdges(const std::vector<std::size_t>& parents) {
  Adjacency adjacency(parents.size());
  for (std::size_t i = 0; i < parents.size(); ++i) {
    if (parents[i] != Graph::kNoParent) addEdge(adjacency, i, parents[i]);
  }
  return adjacency;
}

// ---- random d-regular ----

void removeEdge(Adjacency& adjacency, std::size_t a, std::size_t b) {
  auto erase = [](std::vector<std::size_t>& list, std::size_t value) {
    list.erase(std::lower_bound(list.begin(), list.end(), value));
  };
  erase(adjacency[a], b);
  erase(adjacency[b], a);
}

bool hasEdge(const Adjacency& adjacency, std::size_t a, std::size_t b) {
  return std::binary_search(adjacency[a].begin(), adjacency[a].end(), b);
}

// Rounds of 10 * edges swaps before giving up on a connected result; for d >= 3 a random
// d-regular graph is connected with high probability, so one round almost always suffices.
constexpr std::size_t kMaxSwapRounds = 100;

Adjacency randomRegularEdges(std::size_t n, std::size_t d, std::uint64_t seed) {
  GOSSAMER_ENFORCE(d < n && (n * d) % 2 == 0,
                   "random-regular: there is no {}-regular graph on {} peers (needs d < n and "
                   "n * d even)",
                   d, n);
  GOSSAMER_ENFORCE(d >= 2 || n == 2,
                   "random-regular: d = 1 is a perfect matching, disconnected for {} > 2 peers; "
                   "use d >= 2",
                   n);
  std::mt19937_64 rng = detail::seededRng(seed, n);
  Adjacency adjacency(n);
  if (d == 2) {
    // A random 2-regular graph is usually several cycles; a random Hamiltonian cycle is
    // connected.
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    detail::shuffle(std::span(order), rng);
    for (std::size_t i = 0; i < n; ++i) addEdge(adjacency, order[i], order[(i + 1) % n]);
    return adjacency;
  }
  // Connected circulant start: i ~ i + s for s = 1..d/2, and i ~ i + n/2 when d is odd.
  std::vector<std::pair<std::size_t, std::size_t>> edges;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t s = 1; s <= d / 2; ++s) edges.emplace_back(i, (i + s) % n);
    if (d % 2 == 1 && i < n / 2) edges.emplace_back(i, i + n / 2);
  }
  for (const auto& [a, b] : edges) addEdge(adjacency, a, b);
  // Degree-preserving swaps a-b, c-e -> a-c, b-e, rejected when they would make a loop or a
  // parallel edge.
  for (std::size_t round = 0;; ++round) {
    for (std::size_t attempt = 0; attempt < 10 * edges.size(); ++attempt) {
      const std::size_t first = detail::uniformBelow(rng, edges.size());
      const std::size_t second = detail::uniformBelow(rng, edges.size());
      auto [a, b] = edges[first];
      auto [c, e] = edges[second];
      if (rng() & 1) std::swap(c, e);
      if (first == second || a == c || b == e || hasEdge(adjacency, a, c) ||
          hasEdge(adjacency, b, e)) {
        continue;
      }
      removeEdge(adjacency, a, b);
      removeEdge(adjacency, c, e);
      addEdge(adjacency, a, c);
      addEdge(adjacency, b, e);
      edges[first] = {a, c};
      edges[second] = {b, e};
    }
    if (reachesAll(adjacency, 0)) return adjacency;
    GOSSAMER_ENFORCE_LT(round + 1, kMaxSwapRounds,
                        "random-regular: no connected {}-regular graph on {} peers found", d, n);
  }
}

// ---- the topology classes ----

// An undirected built-in: edges (and possibly its own tree) as functions of n, weights from the
// mixing rule.
class UndirectedTopology final : public Topology {
 public:
  using EdgesFn = std::function<Adjacency(std::size_t n)>;
  using TreeFn = std::function<std::vector<std::size_t>(std::size_t n)>;

  UndirectedTopology(std::string kind, std::string name, Mixing mixing, EdgesFn edges,
                     TreeFn tree = {})
      : kind_(std::move(kind)),
        name_(std::move(name)),
        mixing_(mixing),
        edges_(std::move(edges)),
        tree_(std::move(tree)) {}

  std::string name() const override { return name_; }
  std::string mixingRule() const override { return mixingName(mixing_); }

  Graph build(std::span<const PeerId> members, std::uint64_t /*step*/) const override {
    checkMembers(members, kind_.c_str());
    const std::size_t n = members.size();
    return Graph({members.begin(), members.end()}, mixingWeights(edges_(n), mixing_),
                 tree_ ? tree_(n) : std::vector<std::size_t>{});
  }

 private:
  std::string kind_;
  std::string name_;
  Mixing mixing_;
  EdgesFn edges_;
  TreeFn tree_;
};

// A directed built-in in which every peer sends to exactly one peer: W = (I + P) / 2.
class PermutationTopology final : public Topology {
 public:
  using SendToFn = std::function<std::vector<std::size_t>(std::size_t n, std::uint64_t step)>;

  PermutationTopology(std::string name, bool timeVarying, SendToFn sendTo)
      : name_(std::move(name)), timeVarying_(timeVarying), sendTo_(std::move(sendTo)) {}

  std::string name() const override { return name_; }
  std::string mixingRule() const override { return "(I+P)/2"; }
  bool timeVarying() const override { return timeVarying_; }

  Graph build(std::span<const PeerId> members, std::uint64_t step) const override {
    checkMembers(members, name_.c_str());
    return Graph({members.begin(), members.end()},
                 permutationWeights(sendTo_(members.size(), step)));
  }

 private:
  std::string name_;
  bool timeVarying_;
  SendToFn sendTo_;
};

std::vector<std::size_t> shiftBy(std::size_t n, std::size_t hop) {
  std::vector<std::size_t> sendTo(n);
  for (std::size_t i = 0; i < n; ++i) sendTo[i] = (i + hop) % n;
  return sendTo;
}

// One-peer exponential graph: hop 2^(step mod ceil(log2 n)); n = 1 sends to itself.
std::vector<std::size_t> onePeerExponentialSendTo(std::size_t n, std::uint64_t step) {
  const auto period = static_cast<std::uint64_t>(std::bit_width(n - 1));  // ceil(log2 n)
  if (period == 0) return shiftBy(n, 0);
  return shiftBy(n, std::size_t{1} << (step % period));
}

// An edge-list file, read once when the topology is made.
class FileTopology final : public Topology {
 public:
  FileTopology(EdgeList list, Mixing mixing) : list_(std::move(list)), mixing_(mixing) {}

  std::string name() const override {
    return composeName("file", {list_.source},
                       list_.weighted ? Mixing::kMetropolisHastings : mixing_);
  }
  std::string mixingRule() const override {
    return list_.weighted ? "explicit (from file)" : mixingName(mixing_);
  }

  Graph build(std::span<const PeerId> members, std::uint64_t /*step*/) const override {
    checkMembers(members, "file");
    const std::size_t n = members.size();
    GOSSAMER_ENFORCE(n <= list_.nodes, "{}: the file has {} nodes but there are {} members",
                     list_.source, list_.nodes, n);
    std::vector<double> weights;
    if (list_.weighted) {
      std::vector<WeightedEdge> kept;
      for (const EdgeListEdge& e : list_.edges) {
        if (e.b < n) kept.push_back({e.a, e.b, *e.weight});
      }
      weights = explicitWeights(n, kept);
    } else {
      Adjacency adjacency(n);
      for (const EdgeListEdge& e : list_.edges) {
        if (e.b < n) addEdge(adjacency, e.a, e.b);
      }
      weights = mixingWeights(adjacency, mixing_);
    }
    return Graph({members.begin(), members.end()}, std::move(weights));
  }

 private:
  EdgeList list_;
  Mixing mixing_;
};

// ---- the table of built-ins: one place for names, descriptions and factories ----

struct Builtin {
  const char* name;
  const char* description;
  std::function<std::unique_ptr<Topology>(const TopologyOptions&)> make;
};

std::unique_ptr<Topology> undirected(const std::string& kind, std::vector<std::string> params,
                                     const TopologyOptions& options,
                                     UndirectedTopology::EdgesFn edges,
                                     UndirectedTopology::TreeFn tree = {}) {
  return std::make_unique<UndirectedTopology>(kind,
                                              composeName(kind, std::move(params), options.mixing),
                                              options.mixing, std::move(edges), std::move(tree));
}

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> table = {
      {"ring", "bidirectional ring: i ~ i +- 1",
       [](const TopologyOptions& o) { return undirected("ring", {}, o, ringEdges); }},
      {"ring-uni", "unidirectional ring: i sends to i + 1, W = (I + P) / 2",
       [](const TopologyOptions&) -> std::unique_ptr<Topology> {
         return std::make_unique<PermutationTopology>(
             "ring-uni", false, [](std::size_t n, std::uint64_t) { return shiftBy(n, 1); });
       }},
      {"tree", "k-ary tree (arity k): parent(i) = (i - 1) / k, root at the smallest id",
       [](const TopologyOptions& o) {
         GOSSAMER_ENFORCE_GE(o.arity, std::size_t{1}, "tree: the arity must be at least 1");
         const std::size_t k = o.arity;
         return undirected(
             "tree", {fmt::format("k={}", k)}, o,
             [k](std::size_t n) { return treeEdges(karyParents(n, k)); },
             [k](std::size_t n) { return karyParents(n, k); });
       }},
      {"star", "star around one center (default: the smallest id)",
       [](const TopologyOptions& o) {
         const std::size_t c = o.centerIndex.value_or(0);
         return undirected(
             "star", {fmt::format("center={}", c)}, o,
             [c](std::size_t n) { return treeEdges(starParents(n, c)); },
             [c](std::size_t n) { return starParents(n, c); });
       }},
      {"mesh", "full mesh: every peer ~ every other",
       [](const TopologyOptions& o) { return undirected("mesh", {}, o, meshEdges); }},
      {"torus", "2-D torus r x c, r the largest divisor of n <= sqrt(n) (prime n: a ring)",
       [](const TopologyOptions& o) { return undirected("torus", {}, o, torusEdges); }},
      {"hypercube", "hypercube: i ~ i XOR 2^k (partial cube when n is not a power of two)",
       [](const TopologyOptions& o) { return undirected("hypercube", {}, o, hypercubeEdges); }},
      {"exponential", "static exponential graph: i ~ i +- 2^k",
       [](const TopologyOptions& o) { return undirected("exponential", {}, o, exponentialEdges); }},
      {"one-peer-exponential",
       "time-varying: at step t, i sends to i + 2^(t mod ceil(log2 n)), W = (I + P) / 2",
       [](const TopologyOptions&) -> std::unique_ptr<Topology> {
         return std::make_unique<PermutationTopology>("one-peer-exponential", true,
                                                      onePeerExponentialSendTo);
       }},
      {"random-regular", "seeded random connected d-regular graph (degree d)",
       [](const TopologyOptions& o) {
         GOSSAMER_ENFORCE_GE(o.degree, std::size_t{1}, "random-regular: the degree must be >= 1");
         const std::size_t d = o.degree;
         const std::uint64_t seed = o.seed;
         return undirected("random-regular", {fmt::format("d={}", d), fmt::format("seed={}", seed)},
                           o, [d, seed](std::size_t n) { return randomRegularEdges(n, d, seed); });
       }},
      {"file", "edge list from a file: 'nodes N', then 'a b [weight]' lines",
       [](const TopologyOptions& o) -> std::unique_ptr<Topology> {
         GOSSAMER_ENFORCE(!o.file.empty(), "file: no edge-list file was given");
         return std::make_unique<FileTopology>(loadEdgeList(o.file), o.mixing);
       }},
  };
  return table;
}

}  // namespace

std::unique_ptr<Topology> makeTopology(const std::string& name, const TopologyOptions& options) {
  for (const Builtin& builtin : builtins()) {
    if (name == builtin.name) return builtin.make(options);
  }
  std::vector<std::string> names;
  for (const Builtin& builtin : builtins()) names.emplace_back(builtin.name);
  GOSSAMER_THROW("unknown topology '{}'; the built-ins are: {}", name, fmt::join(names, ", "));
}

std::vector<std::pair<std::string, std::string>> builtinTopologies() {
  std::vector<std::pair<std::string, std::string>> result;
  for (const Builtin& builtin : builtins()) result.emplace_back(builtin.name, builtin.description);
  return result;
}

}  // namespace gossamer::topology
