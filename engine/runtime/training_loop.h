// The one training loop of every peer, training alone or in a cluster (a single peer is a
// cluster of one): per step the step itself (the peer's life, engine/life: the learning-rate
// schedule, the algorithm, the cluster's evaluation points, checkpoints), the emulated step time,
// the loss statistics and the status that any thread reads; every evalEvery steps (and at the
// last) an evaluation of this peer's model, written to the metrics log and the progress view.
// Compute thread.
//
// The loop's clock (trainSeconds, wallSeconds) is its wall time less what it spends evaluating
// (the samples of the evaluation points and its own evaluations): time to a target read at a step
// is the time training took to get there, whatever the evaluations cost.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "engine/model.h"
#include "engine/runtime/config.h"
#include "engine/runtime/peer_state.h"
#include "engine/train/learner.h"
#include "engine/train/metrics_log.h"
#include "engine/train/progress.h"

namespace gossamer::engine::runtime {

// Evaluates `params` (in the Compute's memory) on the first `samples` test samples (0: all).
using EvaluateFn = std::function<EvalResult(std::span<const float> params, std::size_t samples)>;

// What the loop asks of the peer around each step.
class LoopDriver {
 public:
  virtual ~LoopDriver() = default;
  // One step at a step boundary, counted in the status's step (the peer's life: adopt a changed
  // view, run the algorithm); returns the loss, or nullopt when no step was left to take (the
  // life took the model and step of a member that had trained them all).
  virtual std::optional<double> step() = 0;
  // After the loop took the step's figures (the life's evaluation point and checkpoint; publish a
  // snapshot someone waits for).
  virtual void afterStep() = 0;
  // Whether to stop before the next step (a stop or leave request, a kill).
  virtual bool stopping() const = 0;
  // Algorithm bytes this peer has sent, for the log.
  virtual std::uint64_t bytesSent() const = 0;
};

// What the loop measured.
struct LoopFigures {
  double wallSeconds = 0;  // the loop's clock: without waiting for others before or after, and
                           // without the time spent evaluating
  double trainLoss = 0;    // mean over the last pass over the shard (at most stepsPerEpoch steps)
  double samplesPerSecond = 0;
  bool stopped = false;  // ended before its last step
};

class TrainingLoop {
 public:
  // `stepsPerEpoch`: steps of one pass over this peer's shard (for epochs in the log).
  // `evaluate`: how this peer's model is evaluated (empty: it is not; evaluations are skipped).
  TrainingLoop(const TrainingConfig& config, PeerId self, train::Learner& learner,
               EvaluateFn evaluate, LoopStatus& status, std::uint64_t stepsPerEpoch);
  ~TrainingLoop();

  // Steps until status.totalSteps (from status.step, which a resumed or late peer set) or until
  // the driver says stop: begin(), then next() until it returns false, then end().
  LoopFigures run(LoopDriver& driver);

  // The same loop one step at a time, for a caller that owns the loop (Peer::step): begin() once,
  // next() per step (false, without stepping, once the last step is done or the driver says
  // stop), end() once.
  void begin();
  bool next(LoopDriver& driver);
  LoopFigures end();

  // This peer's model on the first `samples` test samples (0: all); no samples when the loop
  // has no evaluation.
  EvalResult evaluate(std::size_t samples);
  bool canEvaluate() const { return static_cast<bool>(evaluate_); }
  // Runs `work` off the loop's clock (an evaluation point's copy of the model).
  void offClock(const std::function<void()>& work);
  // The run's last record in the metrics log.
  void logFinal(std::uint64_t steps, double wallSeconds, const EvalResult& test,
                double samplesPerSecond, std::uint64_t bytesSent, double commWaitFraction);

 private:
  void evaluateAndLog(std::uint64_t step, std::uint64_t bytesSent);
  bool evalDue(std::uint64_t step) const;
  // The loop's time so far on its clock.
  double onClockSeconds() const;

  const TrainingConfig& config_;
  const PeerId self_;
  train::Learner& learner_;
  LoopStatus& status_;
  const std::uint64_t stepsPerEpoch_;
  EvaluateFn evaluate_;
  train::MetricsLog log_;
  std::unique_ptr<train::Progress> progress_;
  std::deque<double> recentLosses_;  // the last pass over the shard
  Clock::time_point start_;
  Clock::duration offClock_{};  // spent evaluating since start_
  std::int64_t startSamples_ = 0;
  double lastAccuracy_ = -1;
};

}  // namespace gossamer::engine::runtime
