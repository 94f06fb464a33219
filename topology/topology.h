// Topologies: rules that turn a membership snapshot (sorted peer ids) and a step number into a
// Graph (graph.h): neighbours with mixing weights, a tree, a random gossip partner, metrics.
// Deterministic and pure: the same members, options and step give the same Graph on every peer
// and every machine, which is how peers agree on the graph without talking about it. When
// members join or leave, build again on the new sorted list: positions shift, and every
// built-in is defined on positions, so the graph is rebuilt (not patched) for the new n.
//
// Built-ins (makeTopology; i, j are positions in the sorted members, n their count):
//   ring                  i ~ i +- 1 (mod n); n = 2 is one edge.
//   ring-uni              i sends to i + 1 (mod n) only; W = (I + P) / 2.
//   tree                  k-ary tree over positions: parent(i) = (i - 1) / k, root 0. The Graph's
//                         tree is this tree; the mixing graph is its edges.
//   star                  every peer ~ the center (options.centerIndex, default 0); the tree is
//                         the star rooted at the center.
//   mesh                  complete graph (Metropolis-Hastings gives W = 11^T / n).
//   torus                 2-D torus r x c with r the largest divisor of n that is <= sqrt(n),
//                         c = n / r, i = row * c + column, 4 neighbours (wrapping). A prime n
//                         gives r = 1: the torus degenerates to a ring; r = 2 gives a ladder
//                         (the two row neighbours coincide).
//   hypercube             i ~ i XOR 2^k for every k with both ends < n. For n a power of two the
//                         log2(n)-cube; otherwise the induced subgraph of the next cube (still
//                         connected: clearing i's top bit leads to 0), not regular.
//   exponential           static exponential graph, undirected: i ~ i +- 2^k (mod n) for every
//                         2^k < n. Regular (a circulant).
//   one-peer-exponential  time-varying (Ying et al. 2021, "Exponential graph is provably
//                         efficient for decentralized deep training"): at step t, with
//                         tau = ceil(log2 n), i sends only to i + 2^(t mod tau) (mod n) and mixes
//                         with weight 1/2: W = (I + P_t) / 2. One step's graph is disconnected
//                         when 2^(t mod tau) shares a factor with n (step 0, a ring, never is);
//                         the product of any tau consecutive W_t is entrywise positive, and for
//                         n a power of two exactly 11^T / n (exact averaging in tau steps).
//   random-regular        seeded random d-regular simple graph (options.degree, options.seed),
//                         always connected; needs 1 <= d < n and n * d even, and d >= 2 when
//                         n > 2. d = 2 is a random Hamiltonian cycle; d >= 3 starts from a
//                         circulant and applies 10 * edges random degree-preserving edge swaps,
//                         swapping on while the result is disconnected. The seed is mixed with n.
//   file                  an edge list (edge_list.h) over positions.
// Undirected built-ins use options.mixing; directed ones (ring-uni, one-peer-exponential) always
// use (I + P) / 2, and weighted edge-list files their own weights. Every built-in but uniform
// mixing on an irregular graph is doubly stochastic. Every static built-in is connected for
// every n it accepts (edge-list files: when the file's graph is). n = 1 is a single peer with W =
// [1] (gap 1, diameter 0, no neighbours) for every built-in except random-regular, which has no
// d-regular graph on one node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "topology/graph.h"
#include "topology/mixing.h"

namespace gossamer::topology {

// A rule for building graphs. Implementations are immutable after construction, so one object
// may be shared by threads.
class Topology {
 public:
  virtual ~Topology() = default;
  // e.g. "ring", "tree(k=2)", "random-regular(d=4, seed=1)", with ", mixing=uniform" inside the
  // parentheses when uniform mixing was chosen.
  virtual std::string name() const = 0;
  // How W is made: "metropolis-hastings", "uniform", "(I+P)/2", "explicit (from file)".
  virtual std::string mixingRule() const { return "custom"; }
  // True: build() depends on `step`.
  virtual bool timeVarying() const { return false; }
  // The graph over `members` at `step`. Throws gossamer::Error on empty, unsorted or duplicate
  // members, or when the topology cannot be built for this n (the message says why).
  virtual Graph build(std::span<const PeerId> members, std::uint64_t step = 0) const = 0;
};

struct TopologyOptions {
  Mixing mixing = Mixing::kMetropolisHastings;
  std::size_t arity = 2;                   // tree, >= 1 (1 = a path)
  std::size_t degree = 4;                  // random d-regular
  std::optional<std::size_t> centerIndex;  // star: position of the center in the sorted members
  std::string file;                        // edge-list path, read when the topology is made
  std::uint64_t seed = 1;                  // random d-regular (random partners: Graph's rng)
};

// A built-in by name (list above). Throws gossamer::Error listing the names when `name` is
// unknown, on invalid options (arity 0, degree 0), and for "file" when the file cannot be read or
// parsed (file:line in the message).
std::unique_ptr<Topology> makeTopology(const std::string& name,
                                       const TopologyOptions& options = {});

// (name, one-line description) of every built-in, in the order of the list above, for --help.
std::vector<std::pair<std::string, std::string>> builtinTopologies();

// Summary of a topology over `peers` members at one step, for `--describe-topology`.
struct Description {
  std::size_t peers = 0;
  std::size_t minDegree = 0;
  std::size_t maxDegree = 0;
  double meanDegree = 0;
  std::optional<std::size_t> diameter;  // nullopt when disconnected
  double spectralGap = 0;
  bool connected = false;
  bool doublyStochastic = false;  // within 1e-12
  std::uint64_t step = 0;
};

// Builds `topology` over members 0..peers-1 (ids equal positions) at `step` and measures it.
// Throws gossamer::Error when peers == 0 or the topology cannot be built.
Description describe(const Topology& topology, std::size_t peers, std::uint64_t step = 0);

// Human-readable lines ("name: value"), ending in a newline.
std::string formatDescription(const Topology& topology, const Description& description);

}  // namespace gossamer::topology
