// The end of an asynchronous algorithm's run at a budget the cluster shares (`end = budget`;
// algorithms/README.md, "A shared end for the asynchronous algorithms"), for peers of uneven
// speed: instead of every peer taking the run's E steps (the fast ones then idle at the end,
// waiting for the slow one), the cluster takes B = E x (members at the start) steps in all and
// every peer trains until about the same moment.
//
// Every second each peer estimates, from what the members report of themselves with their speeds
// (PeerContext::speedOf: their step at the end of the last second's window):
//   C = its own step + sum of the others' last reported steps      (the cluster's steps spent)
//   r_j = the steps member j took per second since this peer first heard from it
//   T = (B - C) / sum_j r_j                                         (the seconds the rest takes)
// and moves its own end to step + r_self x T (C >= B: this step is its last). No round agrees
// on any of it, as these algorithms have none: the peers end within about a report's age of each
// other, and the cluster's steps exceed B by about that much of its throughput. Their invariant
// is not a same step count.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "engine/algorithm.h"
#include "engine/invariants.h"

namespace gossamer::algorithms {

class SharedEnd {
 public:
  using Clock = engine::Clock;

  // `end`: "steps" (every peer the run's steps) or "budget"; throws gossamer::Error naming
  // `<algorithm>.end` for anything else.
  SharedEnd(const std::string& algorithm, const std::string& end);
  static void validate(const std::string& algorithm, const std::string& end);

  bool enabled() const { return enabled_; }
  // At setup (the first call; later ones do nothing): B, and this peer's cap at B until the
  // first estimate.
  void start(engine::PeerContext& ctx);
  // After each step: the estimate above, once a second.
  void update(engine::PeerContext& ctx);
  // The cluster's steps spent over B, as last estimated (nullopt before the first estimate).
  std::optional<double> progress() const;
  // The algorithm's invariants, with the same step count dropped when enabled.
  engine::Invariants adjust(engine::Invariants invariants) const;

 private:
  struct Heard {
    std::uint64_t firstStep = 0;
    Clock::time_point firstAt{};
    std::uint64_t step = 0;
  };
  // Steps per second of a member since it was first heard (0 before a second has passed).
  double rate(const Heard& heard, Clock::time_point now) const;

  std::string who_;
  bool enabled_ = false;
  bool started_ = false;
  double budget_ = 0;
  std::optional<double> spent_;  // the last estimate's C
  Clock::time_point next_{};
  std::map<engine::PeerId, Heard> heard_;
};

}  // namespace gossamer::algorithms
