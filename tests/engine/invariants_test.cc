// engine/invariants.h: the rules an algorithm declares, checked over the peers that were not
// killed, against hand-computed sums and agreements.
#include "engine/invariants.h"

#include <doctest/doctest.h>

namespace gossamer::engine {
namespace {

Invariants weightLedger() {
  // gosgd's shape: weights plus the dead's at most 1, and the dead's agreed by the settled.
  Invariants i;
  i.rules.push_back({.name = "the dead's weight is agreed",
                     .rule = Invariant::Rule::agree,
                     .read = unless("unsettled", metricReading("dead"))});
  i.rules.push_back({.name = "weight is never created",
                     .rule = Invariant::Rule::sumAtMost,
                     .read = unless("unsettled", metricReading("alpha")),
                     .common = unless("unsettled", metricReading("dead")),
                     .bound = 1,
                     .tolerance = 1e-6});
  return i;
}

TEST_CASE("invariants: a sum with a common part, and agreement, among the peers that count") {
  const MetricValues a{{"alpha", 0.5}, {"dead", 0.25}};
  const MetricValues b{{"alpha", 0.25}, {"dead", 0.25}};
  const MetricValues other{{"alpha", 0.1}, {"dead", 0.1}};
  MetricValues unsettled = other;
  unsettled["unsettled"] = 1;
  const Invariants ledger = weightLedger();
  auto check = [&](std::vector<PeerOutcome> peers) {
    return invariantViolations(ledger, peers, 10);
  };
  // 0.5 + 0.25 + 0.25 (once) = 1: kept.
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}}).empty());
  const auto disagree =
      check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &other}});
  REQUIRE(disagree.size() == 2);  // 0.1 against 0.25, and 0.85 + 0.25 > 1
  CHECK(disagree[0] == "the dead's weight is agreed: peer 1 reads 0.25 and peer 3 reads 0.1");
  CHECK(disagree[1].find("weight is never created: the sum is 1.1") == 0);
  // A peer without the premise counts for neither rule.
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &b}, {"peer 3", "", 10, &unsettled}})
            .empty());
  // 0.5 + 0.5 + 0.25 = 1.25 > 1.
  const auto created = check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &a}});
  REQUIRE(created.size() == 1);
  CHECK(created[0].find("the sum is 1.25") != std::string::npos);
  CHECK(created[0].find("> 1") != std::string::npos);
  // Just inside the tolerance.
  const MetricValues edge{{"alpha", 0.25 + 5e-7}, {"dead", 0.25}};
  CHECK(check({{"peer 1", "", 10, &a}, {"peer 2", "", 10, &edge}}).empty());
}

TEST_CASE("invariants: errors and step counts come first, a peer without metrics counts for none") {
  const MetricValues a{{"alpha", 0.5}, {"dead", 0}};
  const Invariants ledger = weightLedger();
  CHECK(invariantViolations(ledger, std::vector<PeerOutcome>{{"peer 1", "a bug", 3, &a}}, 10) ==
        std::vector<std::string>{"peer 1 failed: a bug"});
  CHECK(invariantViolations(ledger, std::vector<PeerOutcome>{{"peer 1", "", 3, &a}}, 10) ==
        std::vector<std::string>{"peer 1 took 3 of the 10 steps"});
  Invariants anyCount = ledger;
  anyCount.sameStepCount = false;
  CHECK(invariantViolations(anyCount, std::vector<PeerOutcome>{{"peer 1", "", 3, &a}}, 10).empty());
  CHECK(invariantViolations(ledger, std::vector<PeerOutcome>{{"peer 1", "", 10, nullptr}}, 10)
            .empty());
}

TEST_CASE("invariants: a conserved sum holds within its tolerance, either way") {
  Invariants conserved;
  conserved.rules.push_back({.name = "mass is conserved",
                             .rule = Invariant::Rule::sumEquals,
                             .read = metricReading("mass"),
                             .bound = 2,
                             .tolerance = 1e-3});
  const MetricValues one{{"mass", 1}}, low{{"mass", 0.99}}, none{};
  auto check = [&](std::vector<PeerOutcome> peers) {
    return invariantViolations(conserved, peers, 1);
  };
  CHECK(check({{"peer 1", "", 1, &one}, {"peer 2", "", 1, &one}}).empty());
  const auto lost = check({{"peer 1", "", 1, &one}, {"peer 2", "", 1, &low}});
  REQUIRE(lost.size() == 1);
  CHECK(lost[0] == "mass is conserved: the sum is 1.99 (over 2 peers), not 2 (within 0.001)");
  // A peer that never set the metric does not count: one alone sums to 1.
  CHECK(check({{"peer 1", "", 1, &one}, {"peer 2", "", 1, &none}}).size() == 1);
  // No peer counts: nothing to hold.
  CHECK(check({{"peer 1", "", 1, &none}}).empty());
}

// Two sides of a partition that never found each other again: each took the other for dead, so
// each side's record of the dead holds the other's weight. The rules hold within each cluster;
// over both, the agreement and the sum would fail. Views link peers in either direction.
TEST_CASE("invariants: a run that ended as two clusters keeps its rules within each") {
  const MetricValues left{{"alpha", 0.25}, {"dead", 0.75}};
  const MetricValues right{{"alpha", 0.25}, {"dead", 0.5}};
  const MetricValues rightToo{{"alpha", 0.25}, {"dead", 0.5}};
  const Invariants ledger = weightLedger();
  const PeerOutcome p1{.name = "peer 1", .steps = 10, .metrics = &left, .id = 1, .view = {1}};
  const PeerOutcome p2{.name = "peer 2", .steps = 10, .metrics = &right, .id = 2, .view = {2, 3}};
  const PeerOutcome p3{.name = "peer 3", .steps = 10, .metrics = &rightToo, .id = 3, .view = {3}};
  const std::vector<PeerOutcome> split{p1, p2, p3};
  const auto clusters = finalClusters(split);
  REQUIRE(clusters.size() == 2);
  CHECK(clusters[0].size() == 1);
  CHECK(clusters[0][0].name == "peer 1");
  REQUIRE(clusters[1].size() == 2);
  CHECK(clusters[1][1].name == "peer 3");
  CHECK(invariantViolations(ledger, split, 10).empty());
  // The same peers with one view that spans the split: one cluster, and both rules break.
  PeerOutcome bridge = p1;
  bridge.view = {1, 2};
  CHECK(invariantViolations(ledger, std::vector<PeerOutcome>{bridge, p2, p3}, 10).size() == 2);
  // A view not known: one cluster with everyone.
  PeerOutcome unknown = p1;
  unknown.view.clear();
  CHECK(finalClusters(std::vector<PeerOutcome>{unknown, p2, p3}).size() == 1);
}

}  // namespace
}  // namespace gossamer::engine
