#include "engine/train/trainer.h"

#include <chrono>

#include <fmt/format.h>

#include "engine/base/log.h"
#include "engine/train/metrics_log.h"
#include "engine/train/progress.h"

namespace gossamer::engine::train {

TrainResult train(Learner& learner, Evaluator& evaluator, const TrainOptions& options) {
  auto logger = log::get("train");
  if (options.resume) {
    learner.restore(loadCheckpoint(options.checkpointPath));
    logger->info("resumed from {} at step {}", options.checkpointPath, learner.steps());
  }
  const std::int64_t stepsPerEpoch = static_cast<std::int64_t>(learner.sampler().batchesPerEpoch());
  const std::int64_t totalSteps = stepsPerEpoch * static_cast<std::int64_t>(options.epochs);
  const std::int64_t evalEvery = options.evalEvery > 0 ? options.evalEvery : stepsPerEpoch;

  MetricsLog metrics(options.metricsPath);
  Progress progress(totalSteps, options.progress);
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t startSamples = learner.samples();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto saveIfAsked = [&] {
    if (options.checkpointPath.empty()) return;
    saveCheckpoint(options.checkpointPath, learner.checkpoint());
    logger->debug("checkpoint written to {} at step {}", options.checkpointPath, learner.steps());
  };

  double epochLossSum = 0;
  std::int64_t epochLossSteps = 0;
  double lastAccuracy = 0;
  const auto stopRequested = [&] { return options.stopRequested && options.stopRequested(); };
  const float baseLr = learner.optimizer().options().lr;
  while (learner.steps() < totalSteps && !stopRequested()) {
    learner.optimizer().setLearningRate(scheduledRate(baseLr, options.schedule,
                                                      static_cast<std::uint64_t>(learner.steps()),
                                                      static_cast<std::uint64_t>(totalSteps)));
    const double loss = learner.step();
    const std::int64_t step = learner.steps();
    if ((step - 1) % stepsPerEpoch == 0) {
      epochLossSum = 0;
      epochLossSteps = 0;
    }
    epochLossSum += loss;
    ++epochLossSteps;

    if (step % evalEvery == 0 || step == totalSteps) {
      const EvalResult eval = evaluator.run(learner.params(), options.evalSamples);
      lastAccuracy = static_cast<double>(eval.correct) / static_cast<double>(eval.samples);
      const double seconds = elapsed();
      metrics.write(
          JsonObject()
              .add("event", "eval")
              .add("step", step)
              .add("epoch", static_cast<double>(step) / static_cast<double>(stepsPerEpoch))
              .add("wall_s", seconds)
              .add("train_loss", epochLossSum / static_cast<double>(epochLossSteps))
              .add("test_loss", eval.lossSum / static_cast<double>(eval.samples))
              .add("test_accuracy", lastAccuracy)
              .add("test_samples", eval.samples));
      progress.message(
          fmt::format("step {:>6}  epoch {:5.2f}  train loss {:.4f}  test acc {:.2f}%", step,
                      static_cast<double>(step) / static_cast<double>(stepsPerEpoch),
                      epochLossSum / static_cast<double>(epochLossSteps), 100 * lastAccuracy));
    }
    if (options.checkpointEvery > 0 && step % options.checkpointEvery == 0) saveIfAsked();
    const double seconds = elapsed();
    progress.update(
        step, fmt::format(
                  "loss {:.4f} acc {:.1f}% {:.0f} samples/s", loss, 100 * lastAccuracy,
                  static_cast<double>(learner.samples() - startSamples) / std::max(seconds, 1e-9)));
  }
  progress.finish();
  saveIfAsked();

  TrainResult result;
  const EvalResult eval = evaluator.run(learner.params());
  result.testAccuracy = static_cast<double>(eval.correct) / static_cast<double>(eval.samples);
  result.testLoss = eval.lossSum / static_cast<double>(eval.samples);
  result.trainLoss = epochLossSteps > 0 ? epochLossSum / static_cast<double>(epochLossSteps) : 0;
  result.steps = learner.steps();
  result.samples = learner.samples();
  result.wallSeconds = elapsed();
  result.samplesPerSecond =
      static_cast<double>(learner.samples() - startSamples) / std::max(result.wallSeconds, 1e-9);
  result.epochs = static_cast<double>(learner.steps()) / static_cast<double>(stepsPerEpoch);
  metrics.write(JsonObject()
                    .add("event", "final")
                    .add("step", result.steps)
                    .add("wall_s", result.wallSeconds)
                    .add("test_loss", result.testLoss)
                    .add("test_accuracy", result.testAccuracy)
                    .add("samples_per_s", result.samplesPerSecond));
  return result;
}

}  // namespace gossamer::engine::train
