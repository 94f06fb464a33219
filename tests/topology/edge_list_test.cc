// The edge-list file format (topology/edge_list.h) and the "file" topology built from it.
#include "topology/edge_list.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "tests/topology/topology_testing.h"
#include "topology/topology.h"

namespace gossamer::topology {
namespace {

using namespace testing;
namespace fs = std::filesystem;

// A file under a fresh temporary directory, removed with it.
struct TempFile {
  fs::path dir;
  fs::path path;
  explicit TempFile(const std::string& text) {
    dir =
        fs::temp_directory_path() / ("gossamer-topology-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    path = dir / "graph.edges";
    std::ofstream(path) << text;
  }
  ~TempFile() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

constexpr const char* kPentagonWithChord = R"(# a 5-cycle plus the chord 0 - 2
nodes 5

0 1   # the cycle
1 2
2 3
3 4
4 0
0 2   # the chord
)";

void checkParseError(const std::string& text, const std::string& expected) {
  CAPTURE(text);
  CHECK_THROWS_WITH_AS(parseEdgeList(text, "g.edges"), doctest::Contains(expected.c_str()), Error);
}

TEST_CASE("topology: edge lists parse nodes, edges, comments and weights") {
  const EdgeList list = parseEdgeList(kPentagonWithChord, "pentagon");
  CHECK(list.source == "pentagon");
  CHECK(list.nodes == 5);
  CHECK(!list.weighted);
  REQUIRE(list.edges.size() == 6);
  CHECK(list.edges[4].a == 0);  // "4 0" is stored with a < b
  CHECK(list.edges[4].b == 4);
  CHECK(list.edges[4].line == 8);
  CHECK(!list.edges[4].weight.has_value());

  const EdgeList weighted = parseEdgeList("nodes 3\n0 1 0.25\r\n2 1 0.5\n", "w");
  CHECK(weighted.weighted);
  REQUIRE(weighted.edges.size() == 2);
  CHECK(*weighted.edges[1].weight == 0.5);
  CHECK(weighted.edges[1].a == 1);
}

TEST_CASE("topology: edge-list files use the mixing rule and drop edges of departed positions") {
  const TempFile file(kPentagonWithChord);
  const auto topology = makeTopology("file", {.file = file.path.string()});
  CHECK(topology->name() == "file(" + file.path.string() + ")");
  const std::vector<PeerId> members = {10, 20, 30, 40, 50};
  const Graph graph = topology->build(members);
  CHECK(graph.connected());
  checkDoublyStochastic(graph);
  checkNeighbourConsistency(graph);
  // Degrees 3 3 3 2 2: W(10, 30) = 1 / (1 + 3), W(40, 50) = 1 / (1 + 2).
  CHECK(graph.weight(10, 30) == 0.25);
  CHECK(graph.weight(40, 50) == 1.0 / 3);
  CHECK(graph.outNeighbors(10) == std::vector<PeerId>{20, 30, 50});
  CHECK(graph.diameter() == std::size_t{2});

  // Two members left: positions 0..2 remain, with edges 0-1, 1-2, 0-2.
  const Graph reduced = topology->build(std::vector<PeerId>{10, 30, 50});
  CHECK(reduced.connected());
  checkDoublyStochastic(reduced);
  CHECK(reduced.outNeighbors(10) == std::vector<PeerId>{30, 50});
  // Uniform mixing from the same file.
  const Graph uniform =
      makeTopology("file", {.mixing = Mixing::kUniform, .file = file.path.string()})
          ->build(members);
  CHECK(uniform.weight(40, 50) == 1.0 / 3);
  CHECK(uniform.weight(10, 30) == 0.25);
  CHECK_THROWS_WITH_AS(topology->build(spacedMembers(6)),
                       doctest::Contains("the file has 5 nodes but there are 6 members"), Error);
}

TEST_CASE("topology: explicit edge-list weights stay doubly stochastic when members leave") {
  const TempFile file("nodes 4\n0 1 0.5\n1 2 0.25\n2 3 0.5\n3 0 0.25\n");
  const auto topology = makeTopology("file", {.file = file.path.string()});
  CHECK(topology->mixingRule() == "explicit (from file)");
  const Graph graph = topology->build(std::vector<PeerId>{1, 2, 3, 4});
  checkDoublyStochastic(graph);
  CHECK(graph.symmetric());
  CHECK(graph.weight(1, 2) == 0.5);
  CHECK(graph.weight(2, 1) == 0.5);
  CHECK(graph.weight(4, 1) == 0.25);
  CHECK(graph.selfWeight(1) == 0.25);
  CHECK(graph.selfWeight(2) == 0.25);
  // Position 3 gone: the edges 2-3 and 3-0 drop out and their weight returns to the diagonal.
  const Graph reduced = topology->build(std::vector<PeerId>{1, 2, 3});
  checkDoublyStochastic(reduced);
  CHECK(reduced.selfWeight(1) == 0.5);
  CHECK(reduced.selfWeight(3) == 0.75);
  CHECK(reduced.connected());
  // Down to two members: only the edge 0 - 1 is left.
  const Graph pair = topology->build(std::vector<PeerId>{1, 2});
  CHECK(pair.mixingMatrix() == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}

TEST_CASE("topology: a disconnected edge list is reported, with a BFS forest") {
  const TempFile file("nodes 4\n0 1\n2 3\n");
  const Graph graph = makeTopology("file", {.file = file.path.string()})->build(spacedMembers(4));
  CHECK(!graph.connected());
  CHECK(!graph.diameter().has_value());
  CHECK(graph.spectralGap() == 0);
  checkDoublyStochastic(graph);
  const auto members = spacedMembers(4);
  CHECK(graph.root() == members[0]);
  CHECK(!graph.parent(members[2]).has_value());  // the root of the second component
  CHECK(graph.parent(members[3]) == members[2]);
  CHECK(graph.depth(members[3]) == 1);
}

TEST_CASE("topology: malformed edge lists name file and line") {
  checkParseError("", "g.edges:0: no 'nodes N' line");
  checkParseError("# only a comment\n", "g.edges:0: no 'nodes N' line");
  checkParseError("0 1\n", "g.edges:1: expected 'nodes N' before the first edge");
  checkParseError("nodes\n", "g.edges:1: expected 'nodes N' with N >= 1");
  checkParseError("nodes 0\n", "g.edges:1: expected 'nodes N' with N >= 1");
  checkParseError("nodes x\n", "g.edges:1: expected 'nodes N'");
  checkParseError("nodes 3\nnodes 3\n", "g.edges:2: 'nodes' repeats line 1");
  checkParseError("nodes 3\n\n0 3\n", "g.edges:3: node '3' is not an index in 0..2");
  checkParseError("nodes 3\n0 -1\n", "g.edges:2: node '-1' is not an index");
  checkParseError("nodes 3\n0 1.5\n", "g.edges:2: node '1.5' is not an index");
  checkParseError("nodes 3\n1 1\n", "g.edges:2: self-loop at node 1");
  checkParseError("nodes 3\n0 1\n# x\n1 0\n", "g.edges:4: edge 0 - 1 repeats line 2");
  checkParseError("nodes 3\n0\n", "g.edges:2: expected an edge 'A B' or 'A B WEIGHT'");
  checkParseError("nodes 3\n0 1 0.5 7\n", "g.edges:2: expected an edge");
  checkParseError("nodes 3\n0 1 0\n", "g.edges:2: weight '0' is not a number in (0, 1]");
  checkParseError("nodes 3\n0 1 1.5\n", "g.edges:2: weight '1.5'");
  checkParseError("nodes 3\n0 1 nan\n", "g.edges:2: weight 'nan'");
  checkParseError("nodes 3\n0 1 half\n", "g.edges:2: weight 'half'");
  checkParseError("nodes 3\n0 1 0.5\n1 2\n", "g.edges:3: every edge must have a weight or none");
  checkParseError("nodes 3\n0 1\n1 2 0.5\n", "g.edges:3: every edge must have a weight or none");
  checkParseError("nodes 3\n0 1 0.75\n1 2 0.5\n",
                  "g.edges:3: the weights of node 1 now sum to 1.25, more than 1");
  CHECK_THROWS_WITH_AS(
      loadEdgeList("/nonexistent/graph.edges"),
      doctest::Contains("cannot open the edge-list file '/nonexistent/graph.edges'"), Error);
  const TempFile bad("nodes 2\n0 1\n0 5\n");
  CHECK_THROWS_WITH_AS(makeTopology("file", {.file = bad.path.string()}),
                       doctest::Contains((bad.path.string() + ":3: node '5'").c_str()), Error);
}

}  // namespace
}  // namespace gossamer::topology
