// A graph with its members placed in a chosen order: the topology's shape kept, the peers moved
// around it (a ring whose neighbours are near each other on the network, network_ring.h). Pure.
#pragma once

#include <span>

#include "topology/graph.h"

namespace gossamer::topology {

// `graph` as built over its sorted members, with order[k] taking the place of graph.members()[k]:
// its row and column of W, its neighbours and its position in the spanning tree. The members stay
// the same sorted set; an order equal to members() gives `graph` back. Throws gossamer::Error
// unless `order` is a permutation of graph.members().
Graph placeMembers(const Graph& graph, std::span<const PeerId> order);

}  // namespace gossamer::topology
