// The one training loop of every peer, training alone or in a cluster (a single peer is a
// cluster of one): per step the learning-rate schedule, the step itself (the peer's driver runs
// the algorithm), the emulated step time, the loss statistics and the status that any thread
// reads; every evalEvery steps (and at the last) an evaluation of this peer's model, written to
// the metrics log and the progress view; checkpoints when due. Compute thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>

#include "engine/model.h"
#include "engine/runtime/config.h"
#include "engine/runtime/peer_state.h"
#include "engine/train/learner.h"
#include "engine/train/metrics_log.h"
#include "engine/train/progress.h"

namespace gossamer::engine::runtime {

// What the loop asks of the peer around each step.
class LoopDriver {
 public:
  virtual ~LoopDriver() = default;
  // One step at a step boundary (adopt a changed view, run the algorithm); returns the loss.
  virtual double step() = 0;
  // After the step is counted (publish a snapshot someone waits for).
  virtual void afterStep() = 0;
  // Whether to stop before the next step (a stop or leave request, a kill).
  virtual bool stopping() const = 0;
  virtual void checkpointIfDue(std::uint64_t step) = 0;
  // Algorithm bytes this peer has sent, for the log.
  virtual std::uint64_t bytesSent() const = 0;
};

// What the loop measured.
struct LoopFigures {
  double wallSeconds = 0;  // the loop itself, without waiting for others before or after
  double trainLoss = 0;    // mean over the last pass over the shard (at most stepsPerEpoch steps)
  double samplesPerSecond = 0;
  bool stopped = false;  // ended before its last step
};

class TrainingLoop {
 public:
  // `stepsPerEpoch`: steps of one pass over this peer's shard (for epochs in the log).
  TrainingLoop(const TrainingConfig& config, PeerId self, train::Learner& learner,
               kernels::Compute& compute, Model& model, const data::Dataset& test,
               LoopStatus& status, std::uint64_t stepsPerEpoch);
  ~TrainingLoop();

  // Steps until status.totalSteps (from status.step, which a resumed or late peer set) or until
  // the driver says stop.
  LoopFigures run(LoopDriver& driver);

  // This peer's model on the first `samples` test samples (0: all).
  EvalResult evaluate(std::size_t samples);
  // The run's last record in the metrics log.
  void logFinal(std::uint64_t steps, double wallSeconds, const EvalResult& test,
                double samplesPerSecond, std::uint64_t bytesSent, double commWaitFraction);

 private:
  void evaluateAndLog(std::uint64_t step, std::uint64_t bytesSent);
  bool evalDue(std::uint64_t step) const;

  const TrainingConfig& config_;
  const PeerId self_;
  train::Learner& learner_;
  LoopStatus& status_;
  const std::uint64_t stepsPerEpoch_;
  train::Evaluator evaluator_;
  train::MetricsLog log_;
  std::unique_ptr<train::Progress> progress_;
  std::deque<double> recentLosses_;  // the last pass over the shard
  Clock::time_point start_;
  double lastAccuracy_ = -1;
};

}  // namespace gossamer::engine::runtime
