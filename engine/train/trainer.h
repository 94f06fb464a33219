// The single-peer training loop: epochs of local steps on a Learner, periodic evaluation on a
// test set, a progress view, JSON-lines metrics and periodic atomic checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/train/learner.h"
#include "engine/train/schedule.h"

namespace gossamer::engine::train {

struct TrainOptions {
  std::size_t epochs = 3;
  ScheduleOptions schedule;          // the learning rate over the run (from the optimizer's lr)
  std::int64_t evalEvery = 0;        // steps between test evaluations; 0: at the end of each epoch
  std::size_t evalSamples = 0;       // test samples per periodic evaluation; 0: the whole test set
  std::string metricsPath;           // JSON lines; empty: none
  std::string checkpointPath;        // empty: no checkpoints
  std::int64_t checkpointEvery = 0;  // steps; 0: only at the end (when checkpointPath is set)
  bool resume = false;               // load checkpointPath first and continue from it
  bool progress = true;              // draw the progress view on stdout
  // Polled at every step boundary on the training thread; training ends early (and still
  // evaluates and checkpoints) once it returns true, e.g. after SIGINT or SIGTERM. Empty: never.
  std::function<bool()> stopRequested;
};

struct TrainResult {
  double testAccuracy = 0;  // final evaluation, whole test set
  double testLoss = 0;
  double trainLoss = 0;  // mean loss of the last epoch's steps
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double wallSeconds = 0;  // this run (not counting time before a resume)
  double samplesPerSecond = 0;
  double epochs = 0;  // passes over the shard completed
};

TrainResult train(Learner& learner, Evaluator& evaluator, const TrainOptions& options);

}  // namespace gossamer::engine::train
