// Measurements every member holds bit for bit (algorithms/README.md, "Rings ordered by the
// network" and "Defaults that fit the network").
//
// A survey is a collective at a step every member of a lockstep algorithm agrees on: each member
// writes its own row into zeros, its seconds per step (PeerContext::speedOf, its own) and its
// measured paths (PeerContext::measuredPaths: the round trip, to the millisecond, and the
// bandwidth, to two significant digits, to each member; -1: not measured), and the members sum
// them with a ring all-reduce over the id order. Every member of a complete survey holds the same
// sums, so every rule computed from them gives the same result everywhere. Coarse values let
// links alike tie, so that two runs on the same network decide alike.
//
// Survey steps (surveys()): 8, 16, 32, ... below `every`, then every multiple of `every`: the first
// probes' round trips and the first speed reports come in over the first steps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/network_fit.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct Survey {
  std::vector<engine::PeerId> members;  // sorted ids: row i is members[i]
  std::vector<float> paths;             // n x n x 2: [round trip s, bandwidth B/s (0: unlimited)]
  std::vector<float> stepSeconds;       // n: each member's seconds per step (0: not known yet)
  std::vector<float> exchangeSeconds;   // n: what the caller's last exchange took each (0: none)

  // The exchange as the members waited for it: their mean (each member's wait, the skew of the
  // steps included, is its share of comm wait), 0 unless every member measured one.
  double measuredExchangeSeconds() const;
  // The facts the defaults are chosen from; none while a member's step or a pair is unmeasured.
  std::optional<NetworkFacts> facts() const;
};

// Whether step count `step` is a survey step.
bool surveys(std::uint64_t step, std::uint64_t every);

// One survey at step count `step` under message kind `kind` (the caller's, < kMaxAlgorithmKind);
// none when it failed (a member missing, views differ). Every member calls it at the same step.
// `who` names the caller in logs and metrics ("<who>.surveys"); `stepSeconds`: this member's
// (0: unknown); `exchangeSeconds`: what this member's last exchange took, of the kind and bytes
// the caller calibrates with (0: none).
std::optional<Survey> surveyNetwork(engine::PeerContext& ctx, std::uint32_t kind,
                                    std::uint64_t step, const std::string& who,
                                    double stepSeconds = 0, double exchangeSeconds = 0);

// This peer's own estimate of an exchange of `bytes` among the members, from its own paths only
// (the time-boxed rounds' tail averages the members' estimates); 0 when it measured none.
double ownExchangeSeconds(engine::PeerContext& ctx, Exchange kind, double bytes);

// This peer's step time before its first speed report (the first second of a run of fast steps):
// the median time between two ticks (one after each step) over the last kIntervals, which leaves
// out the steps that waited for a round.
class StepClock {
 public:
  static constexpr std::size_t kIntervals = 64;
  void tick(engine::Clock::time_point now);
  // A wait that is no step's time (a survey): the next interval starts at `now`.
  void restart(engine::Clock::time_point now) { last_ = now; }
  double medianSeconds() const;  // 0 before two ticks

 private:
  std::optional<engine::Clock::time_point> last_;
  std::vector<double> intervals_;  // a ring of the last kIntervals
  std::size_t next_ = 0;
};
// This peer's seconds per step: its speed report, else the clock's median (0: unknown).
double ownStepSeconds(engine::PeerContext& ctx, const StepClock& clock);

// The knobs of a lockstep algorithm chosen from the first complete survey of each view: the
// caller calls step() after every step (a survey at survey steps, on every member alike: every
// survey step until the view is fitted, then the multiples of kSurveyEvery only, fitted or not,
// so that the collectives match), reset() at every view change (setup()); until the view's first
// complete survey the caller runs on its provisional values.
class ViewFit {
 public:
  static constexpr std::uint64_t kSurveyEvery = 256;
  // The message kind every algorithm with auto knobs gives its surveys.
  static constexpr std::uint32_t kKind = 8;

  explicit ViewFit(std::string who) : who_(std::move(who)) {}
  void reset() { fitted_ = false; }
  bool fitted() const { return fitted_; }
  // After step count `done`: the facts when this step's survey is the view's first complete one.
  // `exchangeSeconds`: what this member's last exchange took (0: none yet), surveyed with it.
  std::optional<NetworkFacts> step(engine::PeerContext& ctx, std::uint64_t done,
                                   double exchangeSeconds = 0);
  // Whether step count `done` ran a survey, and its result (none: it failed), for a caller that
  // takes more from it (a ring's order, network_ring.h).
  bool surveyedAt(std::uint64_t done) const { return surveyed_ && surveyStep_ == done; }
  const std::optional<Survey>& lastSurvey() const { return last_; }

 private:
  std::string who_;
  bool fitted_ = false;
  StepClock clock_;
  bool surveyed_ = false;
  std::uint64_t surveyStep_ = 0;
  std::optional<Survey> last_;
};

// Records a chosen knob: the metric "chosen.<who>.<knob>" (--json's "chosen") and a log line
// with `why`.
void reportChosen(engine::PeerContext& ctx, const std::string& who, const std::string& knob,
                  double value, const std::string& why);

}  // namespace gossamer::algorithms
