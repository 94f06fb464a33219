// Parser of the edge-list format documented in edge_list.h.
#include "topology/edge_list.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "engine/base/enforce.h"

namespace gossamer::topology {
namespace {

// Tolerance on a node's explicit weights summing to more than 1.
constexpr double kWeightSumSlack = 1e-12;

[[noreturn]] void fail(const std::string& source, std::size_t line, const std::string& what) {
  throw Error(fmt::format("{}:{}: {}", source, line, what));
}

// Splits on blanks after cutting the comment.
std::vector<std::string> tokens(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::istringstream stream{std::string(line)};
  std::vector<std::string> result;
  for (std::string token; stream >> token;) result.push_back(std::move(token));
  return result;
}

template <typename T>
std::optional<T> parseWhole(const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

EdgeList parseEdgeList(std::string_view text, const std::string& source) {
  EdgeList list;
  list.source = source;
  std::size_t nodesLine = 0;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> seen;  // edge -> its line
  std::vector<double> weightSums;
  std::size_t lineNumber = 0;
  while (!text.empty()) {
    ++lineNumber;
    const std::size_t newline = text.find('\n');
    const std::vector<std::string> fields = tokens(text.substr(0, newline));
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    if (fields.empty()) continue;

    if (fields[0] == "nodes") {
      if (nodesLine != 0)
        fail(source, lineNumber, fmt::format("'nodes' repeats line {}", nodesLine));
      const std::optional<std::size_t> nodes =
          fields.size() == 2 ? parseWhole<std::size_t>(fields[1]) : std::nullopt;
      if (!nodes || *nodes == 0) fail(source, lineNumber, "expected 'nodes N' with N >= 1");
      list.nodes = *nodes;
      nodesLine = lineNumber;
      weightSums.assign(list.nodes, 0.0);
      continue;
    }
    if (nodesLine == 0) fail(source, lineNumber, "expected 'nodes N' before the first edge");
    if (fields.size() != 2 && fields.size() != 3) {
      fail(source, lineNumber, "expected an edge 'A B' or 'A B WEIGHT'");
    }
    std::size_t ends[2];
    for (int k = 0; k < 2; ++k) {
      const std::optional<std::size_t> index = parseWhole<std::size_t>(fields[k]);
      if (!index || *index >= list.nodes) {
        fail(source, lineNumber,
             fmt::format("node '{}' is not an index in 0..{}", fields[k], list.nodes - 1));
      }
      ends[k] = *index;
    }
    if (ends[0] == ends[1]) fail(source, lineNumber, fmt::format("self-loop at node {}", ends[0]));
    EdgeListEdge edge{std::min(ends[0], ends[1]), std::max(ends[0], ends[1]), {}, lineNumber};
    if (const auto [it, fresh] = seen.emplace(std::pair(edge.a, edge.b), lineNumber); !fresh) {
      fail(source, lineNumber,
           fmt::format("edge {} - {} repeats line {}", edge.a, edge.b, it->second));
    }
    if (fields.size() == 3) {
      edge.weight = parseWhole<double>(fields[2]);
      if (!edge.weight || !std::isfinite(*edge.weight) || *edge.weight <= 0 || *edge.weight > 1) {
        fail(source, lineNumber, fmt::format("weight '{}' is not a number in (0, 1]", fields[2]));
      }
      for (const std::size_t node : {edge.a, edge.b}) {
        weightSums[node] += *edge.weight;
        if (weightSums[node] > 1 + kWeightSumSlack) {
          fail(source, lineNumber,
               fmt::format("the weights of node {} now sum to {}, more than 1", node,
                           weightSums[node]));
        }
      }
    }
    if (list.edges.empty()) {
      list.weighted = edge.weight.has_value();
    } else if (list.weighted != edge.weight.has_value()) {
      fail(source, lineNumber,
           fmt::format("every edge must have a weight or none (line {} {} one)",
                       list.edges.front().line, list.weighted ? "has" : "does not have"));
    }
    list.edges.push_back(edge);
  }
  if (nodesLine == 0) fail(source, 0, "no 'nodes N' line");
  return list;
}

EdgeList loadEdgeList(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) GOSSAMER_THROW("cannot open the edge-list file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  GOSSAMER_ENFORCE(!in.bad(), "cannot read the edge-list file '{}'", path);
  return parseEdgeList(text.str(), path);
}

}  // namespace gossamer::topology
