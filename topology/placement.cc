#include "topology/placement.h"

#include <algorithm>
#include <vector>

#include "engine/base/enforce.h"

namespace gossamer::topology {

Graph placeMembers(const Graph& graph, std::span<const PeerId> order) {
  const std::vector<PeerId>& members = graph.members();
  const std::size_t n = members.size();
  GOSSAMER_ENFORCE(order.size() == n && std::is_permutation(order.begin(), order.end(),
                                                            members.begin(), members.end()),
                   "placing members: the order must be a permutation of the graph's {} members", n);
  // The place of sorted index a goes to the peer order[a], at sorted index to[a].
  std::vector<std::size_t> to(n);
  for (std::size_t a = 0; a < n; ++a) to[a] = graph.indexOf(order[a]);
  const std::vector<double>& w = graph.mixingMatrix();
  std::vector<double> placed(n * n, 0.0);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b) placed[to[a] * n + to[b]] = w[a * n + b];
  std::vector<std::size_t> parents(n, Graph::kNoParent);
  for (std::size_t a = 0; a < n; ++a)
    if (const std::optional<PeerId> parent = graph.parent(members[a]))
      parents[to[a]] = to[graph.indexOf(*parent)];
  return Graph(members, std::move(placed), std::move(parents));
}

}  // namespace gossamer::topology
