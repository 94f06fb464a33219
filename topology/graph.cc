// Graph (graph.h): neighbour lists, the spanning tree and the metrics derived from one mixing
// matrix; plus the small graph helpers (BFS, addEdge, member checks) the built-ins share.
#include "topology/graph.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "topology/random.h"
#include "topology/spectral.h"

namespace gossamer::topology {
namespace {

// Row sums of W must be 1 within this; the built-ins reach ~1e-15.
constexpr double kRowSumTolerance = 1e-9;

std::string memberList(const std::vector<PeerId>& members) {
  constexpr std::size_t kShown = 8;
  const std::size_t shown = std::min(members.size(), kShown);
  std::string text = fmt::format("{}", fmt::join(members.begin(), members.begin() + shown, ", "));
  if (members.size() > shown) text += fmt::format(", ... ({} in all)", members.size());
  return text;
}

}  // namespace

std::vector<std::size_t> hopDistances(const Adjacency& adjacency, std::size_t source) {
  std::vector<std::size_t> distance(adjacency.size(), kUnreachable);
  std::deque<std::size_t> queue{source};
  distance[source] = 0;
  while (!queue.empty()) {
    const std::size_t at = queue.front();
    queue.pop_front();
    for (const std::size_t next : adjacency[at]) {
      if (distance[next] == kUnreachable) {
        distance[next] = distance[at] + 1;
        queue.push_back(next);
      }
    }
  }
  return distance;
}

bool reachesAll(const Adjacency& adjacency, std::size_t source) {
  const std::vector<std::size_t> distance = hopDistances(adjacency, source);
  return std::find(distance.begin(), distance.end(), kUnreachable) == distance.end();
}

void addEdge(Adjacency& adjacency, std::size_t a, std::size_t b) {
  GOSSAMER_ENFORCE(a < adjacency.size() && b < adjacency.size(), "edge {} - {} outside {} nodes", a,
                   b, adjacency.size());
  if (a == b) return;
  auto insert = [](std::vector<std::size_t>& list, std::size_t value) {
    const auto it = std::lower_bound(list.begin(), list.end(), value);
    if (it == list.end() || *it != value) list.insert(it, value);
  };
  insert(adjacency[a], b);
  insert(adjacency[b], a);
}

void checkMembers(std::span<const PeerId> members, const char* what) {
  GOSSAMER_ENFORCE(!members.empty(), "{}: the membership is empty", what);
  for (std::size_t i = 1; i < members.size(); ++i) {
    GOSSAMER_ENFORCE(members[i - 1] < members[i],
                     "{}: members must be sorted ascending without duplicates, but member {} is "
                     "{} and member {} is {}",
                     what, i - 1, members[i - 1], i, members[i]);
  }
}

Graph::Graph(std::vector<PeerId> members, std::vector<double> weights,
             std::vector<std::size_t> treeParents)
    : members_(std::move(members)), weights_(std::move(weights)) {
  checkMembers(members_, "graph");
  const std::size_t n = members_.size();
  GOSSAMER_ENFORCE_EQ(weights_.size(), n * n, "the mixing matrix must be n x n for {} members", n);
  in_.resize(n);
  out_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    double rowSum = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const double w = weights_[i * n + j];
      GOSSAMER_ENFORCE(std::isfinite(w) && w >= 0 && w <= 1,
                       "mixing weight W[{}][{}] = {} is not in [0, 1]", i, j, w);
      rowSum += w;
      if (j != i && w > 0) {
        in_[i].push_back(j);
        out_[j].push_back(i);
      }
    }
    GOSSAMER_ENFORCE(std::abs(rowSum - 1) <= kRowSumTolerance,
                     "row {} of the mixing matrix sums to {}, not 1", i, rowSum);
  }
  connected_ = reachesAll(out_, 0) && reachesAll(in_, 0);
  buildTree(std::move(treeParents));
}

void Graph::checkTreeEdge(std::size_t child, std::size_t parent) const {
  const std::size_t n = size();
  GOSSAMER_ENFORCE(parent < n && parent != child, "tree parent {} of member {} is invalid", parent,
                   child);
  GOSSAMER_ENFORCE(weights_[child * n + parent] > 0 || weights_[parent * n + child] > 0,
                   "tree edge {} - {} is not an edge of the communication graph", child, parent);
}

void Graph::buildTree(std::vector<std::size_t> treeParents) {
  const std::size_t n = size();
  if (treeParents.empty()) {
    // BFS forest over the undirected communication graph, children by ascending index.
    Adjacency undirected(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::set_union(in_[i].begin(), in_[i].end(), out_[i].begin(), out_[i].end(),
                     std::back_inserter(undirected[i]));
    }
    treeParents.assign(n, kNoParent);
    std::vector<bool> seen(n, false);
    for (std::size_t root = 0; root < n; ++root) {
      if (seen[root]) continue;
      seen[root] = true;
      std::deque<std::size_t> queue{root};
      while (!queue.empty()) {
        const std::size_t at = queue.front();
        queue.pop_front();
        for (const std::size_t next : undirected[at]) {
          if (!seen[next]) {
            seen[next] = true;
            treeParents[next] = at;
            queue.push_back(next);
          }
        }
      }
    }
  } else {
    GOSSAMER_ENFORCE_EQ(treeParents.size(), n, "the tree needs one parent entry per member");
    GOSSAMER_ENFORCE_EQ(std::count(treeParents.begin(), treeParents.end(), kNoParent), 1,
                        "a tree has exactly one root");
    for (std::size_t i = 0; i < n; ++i) {
      if (treeParents[i] != kNoParent) checkTreeEdge(i, treeParents[i]);
    }
  }
  parents_ = std::move(treeParents);
  children_.assign(n, {});
  for (std::size_t i = 0; i < n; ++i) {
    if (parents_[i] != kNoParent) children_[parents_[i]].push_back(i);
  }
  // Depths by walking up; a walk longer than n steps means a cycle.
  depths_.assign(n, kUnreachable);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::size_t> path;
    std::size_t at = i;
    while (depths_[at] == kUnreachable && parents_[at] != kNoParent) {
      path.push_back(at);
      GOSSAMER_ENFORCE_LE(path.size(), n, "the tree parents contain a cycle through member {}", i);
      at = parents_[at];
    }
    if (depths_[at] == kUnreachable) depths_[at] = 0;  // a root
    std::size_t d = depths_[at];
    for (auto it = path.rbegin(); it != path.rend(); ++it) depths_[*it] = ++d;
  }
}

bool Graph::contains(PeerId id) const {
  return std::binary_search(members_.begin(), members_.end(), id);
}

std::size_t Graph::indexOf(PeerId id) const {
  const auto it = std::lower_bound(members_.begin(), members_.end(), id);
  if (it == members_.end() || *it != id) {
    GOSSAMER_THROW("peer {} is not a member of this graph (members: {})", id, memberList(members_));
  }
  return static_cast<std::size_t>(it - members_.begin());
}

double Graph::selfWeight(PeerId id) const {
  const std::size_t i = indexOf(id);
  return weights_[i * size() + i];
}

double Graph::weight(PeerId i, PeerId j) const {
  return weights_[indexOf(i) * size() + indexOf(j)];
}

std::vector<WeightedPeer> Graph::inNeighbors(PeerId id) const {
  const std::size_t i = indexOf(id);
  std::vector<WeightedPeer> result;
  result.reserve(in_[i].size());
  for (const std::size_t j : in_[i]) result.push_back({members_[j], weights_[i * size() + j]});
  return result;
}

std::vector<PeerId> Graph::outNeighbors(PeerId id) const {
  std::vector<PeerId> result;
  for (const std::size_t i : out_[indexOf(id)]) result.push_back(members_[i]);
  return result;
}

std::size_t Graph::inDegree(PeerId id) const { return in_[indexOf(id)].size(); }

std::size_t Graph::outDegree(PeerId id) const { return out_[indexOf(id)].size(); }

std::optional<PeerId> Graph::parent(PeerId id) const {
  const std::size_t p = parents_[indexOf(id)];
  if (p == kNoParent) return std::nullopt;
  return members_[p];
}

std::vector<PeerId> Graph::children(PeerId id) const {
  std::vector<PeerId> result;
  for (const std::size_t c : children_[indexOf(id)]) result.push_back(members_[c]);
  return result;
}

std::size_t Graph::depth(PeerId id) const { return depths_[indexOf(id)]; }

PeerId Graph::root() const {
  std::size_t at = 0;
  while (parents_[at] != kNoParent) at = parents_[at];
  return members_[at];
}

std::optional<PeerId> Graph::randomPartner(PeerId id, std::mt19937_64& rng) const {
  const std::vector<std::size_t>& candidates = out_[indexOf(id)];
  if (candidates.empty()) return std::nullopt;
  return members_[candidates[detail::uniformBelow(rng, candidates.size())]];
}

bool Graph::symmetric() const {
  const std::size_t n = size();
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      if (weights_[i * n + j] != weights_[j * n + i]) return false;
    }
  }
  return true;
}

bool Graph::doublyStochastic(double tolerance) const {
  const std::size_t n = size();
  for (std::size_t i = 0; i < n; ++i) {
    double row = 0;
    double column = 0;
    for (std::size_t j = 0; j < n; ++j) {
      row += weights_[i * n + j];
      column += weights_[j * n + i];
    }
    if (std::abs(row - 1) > tolerance || std::abs(column - 1) > tolerance) return false;
  }
  return true;
}

double Graph::spectralGap() const { return topology::spectralGap(weights_, size()); }

std::optional<std::size_t> Graph::diameter() const {
  if (!connected_) return std::nullopt;
  std::size_t longest = 0;
  for (std::size_t source = 0; source < size(); ++source) {
    const std::vector<std::size_t> distance = hopDistances(out_, source);
    longest = std::max(longest, *std::max_element(distance.begin(), distance.end()));
  }
  return longest;
}

DegreeStats Graph::degreeStats() const {
  DegreeStats stats{in_[0].size(), in_[0].size(), 0};
  std::size_t total = 0;
  for (const auto& neighbours : in_) {
    stats.min = std::min(stats.min, neighbours.size());
    stats.max = std::max(stats.max, neighbours.size());
    total += neighbours.size();
  }
  stats.mean = static_cast<double>(total) / static_cast<double>(size());
  return stats;
}

}  // namespace gossamer::topology
