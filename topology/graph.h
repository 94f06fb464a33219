// One immutable communication graph over a membership snapshot: the mixing matrix W, the
// neighbours it implies, a spanning tree and the graph metrics (degree, diameter, connectivity,
// spectral gap). Pure data: no sockets, no clocks, no global state; every method is const and
// safe to call from any thread.
//
// Conventions used throughout topology/:
//   - members are peer ids sorted strictly ascending; a peer's *index* is its position there.
//   - W is row-major n x n; row i says how peer i averages: x_i <- sum_j W_ij x_j. So W_ij > 0
//     (j != i) means "i mixes in j's model": j is an in-neighbour of i and i an out-neighbour of j
//     (j must send its model to i). Every row sums to 1; the built-ins are doubly stochastic
//     (columns sum to 1 too) except uniform mixing on an irregular graph.
//   - The communication graph has the directed edge j -> i exactly when W_ij > 0, i != j.
//     Symmetric W gives an undirected graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace gossamer::topology {

using PeerId = std::uint64_t;

struct WeightedPeer {
  PeerId id;
  double weight;
  friend bool operator==(const WeightedPeer&, const WeightedPeer&) = default;
};

// Degree statistics over all members; a peer's degree is its in-degree, the number of
// neighbours' models it mixes in per step (equal to its out-degree in every built-in).
struct DegreeStats {
  std::size_t min = 0;
  std::size_t max = 0;
  double mean = 0;
};

// A graph on indices 0..n-1 as neighbour lists, each ascending: undirected (both directions
// listed) or directed, as the user says.
using Adjacency = std::vector<std::vector<std::size_t>>;

// Marks an index that a search did not reach.
inline constexpr std::size_t kUnreachable = std::numeric_limits<std::size_t>::max();

// Hop counts from `source` along `adjacency` (BFS); kUnreachable where there is no path.
std::vector<std::size_t> hopDistances(const Adjacency& adjacency, std::size_t source);
// True when every index is reachable from `source` (for an undirected graph: connected).
bool reachesAll(const Adjacency& adjacency, std::size_t source);

// Adds the undirected edge a - b, keeping both lists sorted; a self-loop (a == b) or an edge
// already present is ignored, so the built-ins can add wrap-around edges without case analysis.
// Throws gossamer::Error unless a, b < adjacency.size().
void addEdge(Adjacency& adjacency, std::size_t a, std::size_t b);

// Throws gossamer::Error unless `members` is non-empty and sorted strictly ascending (no
// duplicates). `what` names the caller in the message ("ring: ...").
void checkMembers(std::span<const PeerId> members, const char* what);

class Graph {
 public:
  // Marks the root in a parents vector.
  static constexpr std::size_t kNoParent = std::numeric_limits<std::size_t>::max();

  // `weights` is W, row-major members.size()^2, entries finite and in [0, 1], each row summing
  // to 1 within 1e-9. `treeParents`, when not empty, is the spanning tree as the parent index of
  // every member (kNoParent for the one root); it must be a tree whose edges are edges of the
  // communication graph in some direction. When empty, the tree is a BFS tree of the
  // communication graph taken as undirected, rooted at index 0, children visited by ascending
  // index; a disconnected graph gets a BFS forest, each further component rooted at its smallest
  // index (those roots have no parent and depth 0; root() stays members()[0]).
  // Throws gossamer::Error on bad members, a wrong-sized or invalid W, or an invalid tree.
  Graph(std::vector<PeerId> members, std::vector<double> weights,
        std::vector<std::size_t> treeParents = {});

  const std::vector<PeerId>& members() const { return members_; }
  std::size_t size() const { return members_.size(); }
  bool contains(PeerId id) const;
  // Position of `id` in members(); throws gossamer::Error for a non-member.
  std::size_t indexOf(PeerId id) const;

  // All id-taking methods below throw gossamer::Error when the id is not a member.

  // W_ii: the weight of a peer's own model.
  double selfWeight(PeerId id) const;
  // W_ij.
  double weight(PeerId i, PeerId j) const;
  // The peers j != id with W_ij > 0, ascending by id, with W_ij: the models `id` mixes in.
  std::vector<WeightedPeer> inNeighbors(PeerId id) const;
  // The peers i != id with W_i,id > 0, ascending: those that need `id`'s model.
  std::vector<PeerId> outNeighbors(PeerId id) const;
  std::size_t inDegree(PeerId id) const;
  std::size_t outDegree(PeerId id) const;

  // The spanning tree (see the constructor): the tree of tree topologies (tree, star), a BFS
  // tree rooted at members()[0] for the others.
  std::optional<PeerId> parent(PeerId id) const;
  // Ascending by id.
  std::vector<PeerId> children(PeerId id) const;
  // Edges from the root of the peer's tree; 0 at a root.
  std::size_t depth(PeerId id) const;
  PeerId root() const;

  // A uniformly random out-neighbour of `id` drawn from `rng` (for gossip); nullopt when it has
  // none. Uses one or more raw draws of `rng` and no std distribution, so a seed gives the same
  // partner with every standard library.
  std::optional<PeerId> randomPartner(PeerId id, std::mt19937_64& rng) const;

  // W, row-major n x n; indices are positions in members().
  const std::vector<double>& mixingMatrix() const { return weights_; }
  // True when W equals its transpose exactly (an undirected graph).
  bool symmetric() const;
  // True when every row and every column of W sums to 1 within `tolerance`.
  bool doublyStochastic(double tolerance = 1e-12) const;

  // 1 - sigma_2(W) (spectral.h; 1 - |lambda_2| when W is not doubly stochastic): 1 for a single
  // peer and for exact averaging (W = 11^T/n), small for slow mixing, 0 when disconnected.
  // O(n^3) through LAPACK on every call.
  double spectralGap() const;
  // Strongly connected: every peer's model reaches every other peer along directed edges (for
  // symmetric W simply connected). A single peer is connected.
  bool connected() const { return connected_; }
  // Longest shortest directed path in edges; 0 for one peer; nullopt when disconnected.
  // O(n * (n + edges)).
  std::optional<std::size_t> diameter() const;
  DegreeStats degreeStats() const;

 private:
  void buildTree(std::vector<std::size_t> treeParents);
  void checkTreeEdge(std::size_t child, std::size_t parent) const;

  std::vector<PeerId> members_;
  std::vector<double> weights_;       // row-major n x n
  Adjacency in_;                      // in_[i]: j != i with W_ij > 0
  Adjacency out_;                     // out_[j]: i != j with W_ij > 0
  std::vector<std::size_t> parents_;  // kNoParent at roots
  Adjacency children_;
  std::vector<std::size_t> depths_;
  bool connected_ = false;
};

}  // namespace gossamer::topology
