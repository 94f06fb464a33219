// What an algorithm promises to keep at the end of a run, whatever faults it met (kills, restarts
// with and without a checkpoint, joins, partitions, loss): it declares them
// (Algorithm::invariants), and the simulator, the chaos benchmark and the tests check them over
// the peers that were not killed, reading each peer's final metrics. Those checkers know no
// algorithm by name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gossamer::engine {

// A peer's final metrics (Metrics::add/set), by name.
using MetricValues = std::map<std::string, double>;

// One peer's reading for an invariant: nullopt when the peer does not count for it (it lacks
// the premise, e.g. gosgd's peer that did not settle).
using InvariantReading = std::function<std::optional<double>(const MetricValues&)>;

struct Invariant {
  enum class Rule {
    agree,      // every counted peer reads the same value, within `tolerance`
    sumAtMost,  // the counted readings, plus `common` once, sum to at most `bound` + `tolerance`
    sumEquals,  // ... to `bound`, within `tolerance`
  };
  std::string name;  // what it states; a violation starts with it
  Rule rule = Rule::agree;
  InvariantReading read;
  // Sum rules: a quantity the counted peers hold in common rather than each its share (gosgd's
  // record of the weight the dead took), added once: the first counted peer's reading. Declare
  // an agree rule on it too, or the sum takes whichever record came first.
  InvariantReading common;
  double bound = 0;
  double tolerance = 0;
};

// A peer's metric `name` (nullopt when it never set it).
InvariantReading metricReading(std::string name);
// `reading`, but nullopt where the peer's metric `flag` is positive (the peer lacks a premise).
InvariantReading unless(std::string flag, InvariantReading reading);

struct Invariants {
  std::vector<Invariant> rules;
  // Every peer that was not killed ends at the run's last step. Every built-in keeps it: a peer
  // joining late adopts the cluster's step, one that restarts catches up from its checkpoint.
  bool sameStepCount = true;
};

// A peer that was not killed, as the invariants see it at the end of a run.
struct PeerOutcome {
  std::string name;   // how a violation names it: "peer 3"
  std::string error;  // what it threw, if anything (then nothing else is read of it)
  std::uint64_t steps = 0;
  const MetricValues* metrics = nullptr;  // its algorithm's; null: it counts for no rule
  // Its id and the membership view it ended with (itself included); an empty view: not known.
  std::uint64_t id = 0;
  std::vector<std::uint64_t> view;
};

// The violations (empty: all kept): each peer ended without an error; with sameStepCount, each
// took `totalSteps` steps; each declared rule holds over the peers that count for it, within
// each cluster the run ended as. A partition that heals after each side took the other for
// failed ends as two clusters when no reconnect of the membership found the other side before
// the end: each holds its rules, and each took the other's weight for the dead's (so a sum over
// both would count it twice). Peers are in one cluster when a chain of final views links them;
// all are, when a view is not known.
std::vector<std::string> invariantViolations(const Invariants& invariants,
                                             std::span<const PeerOutcome> peers,
                                             std::uint64_t totalSteps);
// The clusters `peers` ended as (by their final views, as above), each in the order of `peers`.
std::vector<std::vector<PeerOutcome>> finalClusters(std::span<const PeerOutcome> peers);

}  // namespace gossamer::engine
