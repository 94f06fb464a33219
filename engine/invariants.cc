#include "engine/invariants.h"

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
  for (const Invariant& rule : invariants.rules) checkRule(rule, peers, out);
  return out;
}

}  // namespace gossamer::engine
