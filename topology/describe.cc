// describe / formatDescription (topology.h): the summary behind `--describe-topology`.
#include <numeric>

#include <fmt/format.h>

#include "engine/base/enforce.h"
#include "topology/topology.h"

namespace gossamer::topology {

Description describe(const Topology& topology, std::size_t peers, std::uint64_t step) {
  GOSSAMER_ENFORCE_GE(peers, std::size_t{1}, "describe: the number of peers must be at least 1");
  std::vector<PeerId> members(peers);
  std::iota(members.begin(), members.end(), PeerId{0});
  const Graph graph = topology.build(members, step);
  const DegreeStats degrees = graph.degreeStats();
  return Description{
      .peers = peers,
      .minDegree = degrees.min,
      .maxDegree = degrees.max,
      .meanDegree = degrees.mean,
      .diameter = graph.diameter(),
      .spectralGap = graph.spectralGap(),
      .connected = graph.connected(),
      .doublyStochastic = graph.doublyStochastic(),
      .step = step,
  };
}

std::string formatDescription(const Topology& topology, const Description& d) {
  std::string text;
  auto line = [&text](std::string_view key, const std::string& value) {
    text += fmt::format("{:<18} {}\n", fmt::format("{}:", key), value);
  };
  line("topology", topology.name());
  line("mixing", topology.mixingRule());
  line("peers", fmt::format("{}", d.peers));
  if (topology.timeVarying())
    line("step", fmt::format("{} (the graph changes with the step)", d.step));
  line("degree",
       fmt::format("min {}, max {}, mean {:.3g}", d.minDegree, d.maxDegree, d.meanDegree));
  line("diameter", d.diameter ? fmt::format("{}", *d.diameter) : "infinite (disconnected)");
  line("spectral gap", fmt::format("{:.6g}", d.spectralGap));
  line("connected", d.connected ? "yes" : "no");
  line("doubly stochastic", d.doublyStochastic ? "yes" : "no (the average is not preserved)");
  return text;
}

}  // namespace gossamer::topology
