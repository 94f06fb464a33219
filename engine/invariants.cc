#include "engine/invariants.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace gossamer::engine {

InvariantReading metricReading(std::string name) {
  return [name = std::move(name)](const MetricValues& metrics) -> std::optional<double> {
    const auto it = metrics.find(name);
    if (it == metrics.end()) return std::nullopt;
    return it->second;
  };
}

InvariantReading unless(std::string flag, InvariantReading reading) {
  return [flag = std::move(flag),
          reading = std::move(reading)](const MetricValues& metrics) -> std::optional<double> {
    if (const auto it = metrics.find(flag); it != metrics.end() && it->second > 0)
      return std::nullopt;
    return reading(metrics);
  };
}

namespace {

struct Counted {
  const PeerOutcome* peer;
  double value;
};

void checkRule(const Invariant& rule, std::span<const PeerOutcome> peers,
               std::vector<std::string>& out) {
  std::vector<Counted> counted;
  std::optional<double> common;
  for (const PeerOutcome& p : peers) {
    if (!p.error.empty() || p.metrics == nullptr) continue;
    const std::optional<double> value = rule.read(*p.metrics);
    if (!value) continue;
    counted.push_back({&p, *value});
    if (rule.common && !common) common = rule.common(*p.metrics);
  }
  if (counted.empty()) return;
  switch (rule.rule) {
    case Invariant::Rule::agree:
      for (const Counted& c : counted) {
        if (std::abs(c.value - counted[0].value) > rule.tolerance) {
          out.push_back(fmt::format("{}: {} reads {} and {} reads {}", rule.name,
                                    counted[0].peer->name, counted[0].value, c.peer->name,
                                    c.value));
          return;
        }
      }
      return;
    case Invariant::Rule::sumAtMost:
    case Invariant::Rule::sumEquals: {
      double sum = 0;
      for (const Counted& c : counted) sum += c.value;
      const double total = sum + common.value_or(0);
      const std::string parts =
          common ? fmt::format("{} over {} peers, plus {} in common", sum, counted.size(), *common)
                 : fmt::format("over {} peers", counted.size());
      if (rule.rule == Invariant::Rule::sumAtMost && total > rule.bound + rule.tolerance)
        out.push_back(
            fmt::format("{}: the sum is {} ({}) > {}", rule.name, total, parts, rule.bound));
      if (rule.rule == Invariant::Rule::sumEquals && std::abs(total - rule.bound) > rule.tolerance)
        out.push_back(fmt::format("{}: the sum is {} ({}), not {} (within {})", rule.name, total,
                                  parts, rule.bound, rule.tolerance));
      return;
    }
  }
}

}  // namespace

std::vector<std::string> invariantViolations(const Invariants& invariants,
                                             std::span<const PeerOutcome> peers,
                                             std::uint64_t totalSteps) {
  std::vector<std::string> out;
  for (const PeerOutcome& p : peers) {
    if (!p.error.empty())
      out.push_back(fmt::format("{} failed: {}", p.name, p.error));
    else if (invariants.sameStepCount && p.steps != totalSteps)
      out.push_back(fmt::format("{} took {} of the {} steps", p.name, p.steps, totalSteps));
  }
  for (const std::vector<PeerOutcome>& cluster : finalClusters(peers))
    for (const Invariant& rule : invariants.rules) checkRule(rule, cluster, out);
  return out;
}

std::vector<std::vector<PeerOutcome>> finalClusters(std::span<const PeerOutcome> peers) {
  const bool known =
      std::all_of(peers.begin(), peers.end(), [](const PeerOutcome& p) { return !p.view.empty(); });
  if (!known) return {std::vector<PeerOutcome>(peers.begin(), peers.end())};
  // Union-find over the peers: i and j linked when one has the other in its view.
  std::vector<std::size_t> root(peers.size());
  for (std::size_t i = 0; i < root.size(); ++i) root[i] = i;
  const auto find = [&](std::size_t i) {
    while (root[i] != i) i = root[i] = root[root[i]];
    return i;
  };
  const auto sees = [](const PeerOutcome& a, const PeerOutcome& b) {
    return std::find(a.view.begin(), a.view.end(), b.id) != a.view.end();
  };
  for (std::size_t i = 0; i < peers.size(); ++i)
    for (std::size_t j = i + 1; j < peers.size(); ++j)
      if (sees(peers[i], peers[j]) || sees(peers[j], peers[i])) root[find(i)] = find(j);
  std::vector<std::vector<PeerOutcome>> out;
  std::vector<std::size_t> clusterOf(peers.size(), peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) {
    std::size_t& index = clusterOf[find(i)];
    if (index == peers.size()) {
      index = out.size();
      out.emplace_back();
    }
    out[index].push_back(peers[i]);
  }
  return out;
}

}  // namespace gossamer::engine
