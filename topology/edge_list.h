// The edge-list file format of the "file" topology: an undirected graph over the positions of
// the sorted member list, optionally with explicit mixing weights.
//
//   # a comment runs from '#' to the end of the line; blank lines are ignored
//   nodes 6          required, once, before any edge: the graph has nodes 0..5
//   0 1              an undirected edge between members()[0] and members()[1]
//   1 2 0.25         ... with the explicit weight W_12 = W_21 = 0.25
//
// Rules: indices are decimal integers below `nodes`; no self-loops; an edge appears once (in
// either orientation). Either every edge has a weight or none has. Unweighted files take their
// weights from the topology's mixing rule (Metropolis-Hastings by default). Weighted files set
// W_ab = W_ba = weight, in (0, 1], and W_aa = 1 - (sum of a's edge weights), so a node's weights
// may sum to at most 1; the result is symmetric with unit row sums, hence doubly stochastic.
//
// Membership changes: building over n members uses nodes 0..n-1 and drops every edge touching a
// node >= n (weighted files: the dropped weight returns to the diagonal, so W stays doubly
// stochastic). Whether what remains is connected is the file's business: Graph::connected()
// says. More members than `nodes` is an error.
//
// Every error is a gossamer::Error reading "SOURCE:LINE: what is wrong" (line 0 for a problem of
// the whole file, such as a missing `nodes` line).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gossamer::topology {

struct EdgeListEdge {
  std::size_t a = 0;  // a < b
  std::size_t b = 0;
  std::optional<double> weight;
  std::size_t line = 0;  // where it was read, for messages
};

struct EdgeList {
  std::string source;  // the file name (or what the text was called) for messages
  std::size_t nodes = 0;
  bool weighted = false;
  std::vector<EdgeListEdge> edges;  // in file order
};

// Parses `text`; `source` names it in errors.
EdgeList parseEdgeList(std::string_view text, const std::string& source);
// Reads and parses the file at `path`; throws gossamer::Error when it cannot be read.
EdgeList loadEdgeList(const std::string& path);

}  // namespace gossamer::topology
