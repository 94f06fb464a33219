// placeMembers (topology/placement.h): a ring built over sorted ids, its peers moved to a chosen
// order, keeps its shape and weights; a tree's parents move with their places; bad orders are
// refused.
#include "topology/placement.h"

#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "topology/topology.h"

namespace gossamer::topology {
namespace {

std::vector<PeerId> inIds(const Graph& graph, PeerId id) {
  std::vector<PeerId> ids;
  for (const WeightedPeer& j : graph.inNeighbors(id)) ids.push_back(j.id);
  return ids;
}

TEST_CASE("placement: a ring's neighbours follow the order, its weights and mean kept") {
  const std::vector<PeerId> members{10, 20, 30, 40, 50};
  const Graph ring = makeTopology("ring")->build(members);
  // 10 - 30 - 50 - 20 - 40 - 10: each peer's neighbours are its order's neighbours.
  const std::vector<PeerId> order{10, 30, 50, 20, 40};
  const Graph placed = placeMembers(ring, order);
  CHECK(placed.members() == members);
  CHECK(inIds(placed, 10) == std::vector<PeerId>{30, 40});
  CHECK(inIds(placed, 30) == std::vector<PeerId>{10, 50});
  CHECK(inIds(placed, 50) == std::vector<PeerId>{20, 30});
  CHECK(inIds(placed, 20) == std::vector<PeerId>{40, 50});
  CHECK(inIds(placed, 40) == std::vector<PeerId>{10, 20});
  for (PeerId id : members) {
    CHECK(placed.selfWeight(id) == ring.selfWeight(10));
    for (const WeightedPeer& j : placed.inNeighbors(id)) CHECK(j.weight == ring.weight(10, 20));
  }
  CHECK(placed.symmetric());
  CHECK(placed.doublyStochastic());
  CHECK(placed.spectralGap() == doctest::Approx(ring.spectralGap()));
  // The id order gives the same graph back.
  const Graph same = placeMembers(ring, members);
  CHECK(same.mixingMatrix() == ring.mixingMatrix());
}

TEST_CASE("placement: a tree's parents and root move with their places") {
  const std::vector<PeerId> members{1, 2, 3};
  const Graph star = makeTopology("star")->build(members);  // centre: the first member
  REQUIRE(star.root() == 1);
  const Graph placed = placeMembers(star, std::vector<PeerId>{3, 1, 2});
  CHECK(placed.root() == 3);
  CHECK(placed.parent(1) == std::optional<PeerId>(3));
  CHECK(placed.parent(2) == std::optional<PeerId>(3));
  CHECK(inIds(placed, 3) == std::vector<PeerId>{1, 2});
  CHECK(inIds(placed, 1) == std::vector<PeerId>{3});
}

TEST_CASE("placement: an order that is not a permutation of the members is refused") {
  const Graph ring = makeTopology("ring")->build(std::vector<PeerId>{1, 2, 3});
  CHECK_THROWS_WITH_AS(placeMembers(ring, std::vector<PeerId>{1, 2}),
                       doctest::Contains("permutation"), Error);
  CHECK_THROWS_WITH_AS(placeMembers(ring, std::vector<PeerId>{1, 2, 4}),
                       doctest::Contains("permutation"), Error);
}

}  // namespace
}  // namespace gossamer::topology
