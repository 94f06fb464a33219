// What sparknet and local-sgd share (algorithms/README.md, "sparknet"): tau local steps of
// exploration, then one synchronous round that replaces every w_i by the average of the models,
// after which every worker restarts from that average. The subclasses say how the round computes
// the average (through a master, or by ring all-reduce).
//
// Round r ends local step r x tau (tags use the step count r x tau, the same on every peer). When
// the run's last step is not a round boundary, finish() runs one more round, so that every run
// ends on an average; a run stopped early (requestStop) does not, since its peers stopped at
// different steps.
//
// The optimizer state (momentum velocity, Adam's moments) is NOT reset when a worker adopts the
// average: each worker keeps its own, as SparkNet's Caffe solvers, which live across rounds, do
// (they restart from w~'s weights, not from a fresh solver). `reset-optimizer=true` zeroes it at
// every round instead; on Fashion-MNIST (MLP, 4 peers, 3 epochs, momentum 0.9) that cost about 2
// points of accuracy at tau = 4 (82.4% against 84.8%), since momentum never builds up.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "algorithms/async_allreduce.h"
#include "algorithms/network_fit.h"
#include "algorithms/network_survey.h"
#include "algorithms/time_box.h"
#include "engine/algorithm.h"
#include "engine/options.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

struct PeriodicAveragingOptions {
  // Local steps between averaging rounds; auto (the default): the fewest that keep the blocking
  // round's exchange within kBlockingShare of the time (network_fit.h), from the view's first
  // complete survey (network_survey.h: ViewFit), tau = kProvisionalTau until then. On
  // Fashion-MNIST (MLP, 4 peers, 3 epochs) tau from 2 to 10 gave 84.7-85.8%, within the noise of
  // seeds.
  engine::Auto<std::uint64_t> tau = engine::Auto<std::uint64_t>::automatic();
  bool resetOptimizer = false;  // zero the optimizer state when adopting the average
  // Rounds bounded by time instead of tau steps (algorithms/time_box.h): off, auto or seconds.
  std::string roundSeconds = "off";
  // The minimum quorum of time-boxed rounds (round_quorum.h): all, a member count or a fraction.
  std::string quorum = "all";

  // Validates, naming the option as `--<algorithm>.<option>` in messages.
  void validate(const char* algorithm) const;
};

// How auto tau is chosen: the subclass's exchange, the bounds, and the knob's name (logs,
// "chosen").
struct AutoRounds {
  Exchange exchange = Exchange::kRing;
  std::uint64_t low = 4, high = 64;
  std::string knob = "tau";
};

class PeriodicAveraging : public engine::Algorithm {
 public:
  // Rounds every this many steps (anchored at step 0) until auto has chosen.
  static constexpr std::uint64_t kProvisionalTau = 8;

  // `who`: the algorithm's name (messages and metrics of the time-boxed rounds); `timedPieces`:
  // the pieces of the time-boxed rounds' all-reduce (async_allreduce.h).
  PeriodicAveraging(PeriodicAveragingOptions options, std::string who, AutoRounds rule,
                    std::size_t timedPieces = 4);
  ~PeriodicAveraging() override;

  // Rounds matched by step; time-boxed rounds by their number instead.
  bool lockstep() const override { return timed() == nullptr; }
  // Time-boxed: the budget and the first round start (the first call); the subclass's setup()
  // calls it.
  void setup(engine::PeerContext& ctx) override;
  // Time-boxed: a joiner learns its round number and the spend from the members' messages.
  void join(engine::PeerContext& ctx) override;
  // Time-boxed: the budget and the spend.
  void saveState(engine::AlgorithmState& state) const override;
  void loadState(const engine::AlgorithmState& state) override;

  // The message kind of the default time-boxed round's all-reduce (a subclass that keeps it
  // gives kind 3 nothing else).
  static constexpr std::uint32_t kWeighted = 3;

  // Runs the round after every tau-th local step since the anchor (rounds by steps; then, with
  // auto tau, the survey of the step), or when a time-boxed round is due.
  void afterStep(engine::PeerContext& ctx) override;
  // The last round when the run did not end on one (rounds by steps).
  void finish(engine::PeerContext& ctx) override;
  // Time-boxed: a peer back in a cluster that went on without it learns the spend anew.
  void resumedLate(engine::PeerContext& ctx) override;
  engine::Invariants invariants() const override;
  std::optional<double> runProgress() const override {
    return timed_ ? timed_->progress() : std::nullopt;
  }

 protected:
  // The time-boxed rounds (round-seconds), or null: rounds every tau steps.
  TimedRounds* timed() const { return timed_.get(); }
  // One time-boxed round (when timed()): w_i = sum n_i w_i / sum n_i over the direct all-reduce
  // of [n_i w_i, tail] (no master), numbered by the rounds attempted; or a subclass's own round
  // (diloco's outer step). Compute thread.
  virtual void timedRound(engine::PeerContext& ctx);
  // The number of this peer's next time-boxed round.
  virtual std::uint64_t nextTimedRound() const { return timedRounds_ + 1; }
  // One averaging round at step count `round`: replaces params by the average (through
  // adopt()) or, when it failed, keeps them. Compute thread.
  virtual void average(engine::PeerContext& ctx, std::uint64_t round) = 0;
  // After each survey of the auto tau's (none: it failed), at a step every member shares: a
  // subclass may take more from it (local-sgd's ring order).
  virtual void surveyed(engine::PeerContext& /*ctx*/, const std::optional<Survey>& /*survey*/) {}
  // params = `average` (device memory, or host memory when `fromHost`), optimizer state reset
  // as configured, round counted.
  void adopt(engine::PeerContext& ctx, std::span<const float> average, bool fromHost);
  // Counts `name` in the metrics, prefixed by the algorithm's name.
  void count(engine::PeerContext& ctx, const std::string& name, double value = 1);

  const PeriodicAveragingOptions& options() const { return options_; }
  // The rounds' period now (rounds by steps), and whether step count `done` ends a round.
  std::uint64_t tau() const { return tau_; }
  bool roundEnds(std::uint64_t done) const { return (done - anchor_) % tau_ == 0; }

 private:
  // Auto tau from the view's first complete survey, anchored at step count `done`.
  void fit(engine::PeerContext& ctx, std::uint64_t done);

  PeriodicAveragingOptions options_;
  AutoRounds rule_;
  std::uint64_t tau_ = kProvisionalTau;  // rounds by steps: every tau_ steps after anchor_
  std::uint64_t anchor_ = 0;
  std::uint64_t lastRoundStep_ = 0;  // the step count of the last round by steps
  double lastRoundSeconds_ = 0;      // what it took (calibrates the auto tau's survey)
  ViewFit fit_;
  std::unique_ptr<TimedRounds> timed_;
  // The default time-boxed round's exchange, its output and the rounds attempted.
  std::size_t timedPieces_;
  std::unique_ptr<AsyncAllReduce> weighted_;
  kernels::Buffer<float> merged_;
  // With a quorum: the merged model this peer started from (what a member left out of a round
  // rebases its change from).
  kernels::Buffer<float> base_;
  std::uint64_t timedRounds_ = 0;
};

}  // namespace gossamer::algorithms
