#include "engine/runtime/training_loop.h"

#include <fmt/format.h>

#include "engine/base/json.h"

namespace gossamer::engine::runtime {
namespace {

using Seconds = std::chrono::duration<double>;

}  // namespace

TrainingLoop::TrainingLoop(const TrainingConfig& config, PeerId self, train::Learner& learner,
                           EvaluateFn evaluate, LoopStatus& status, std::uint64_t stepsPerEpoch)
    : config_(config),
      self_(self),
      learner_(learner),
      status_(status),
      stepsPerEpoch_(std::max<std::uint64_t>(stepsPerEpoch, 1)),
      evaluate_(std::move(evaluate)),
      log_(config.metricsPath) {}

TrainingLoop::~TrainingLoop() = default;

bool TrainingLoop::evalDue(std::uint64_t step) const {
  if (config_.evalEvery == 0 || !evaluate_) return false;
  const std::uint64_t every = config_.evalEvery == TrainingConfig::kEachEpoch
                                  ? stepsPerEpoch_
                                  : static_cast<std::uint64_t>(config_.evalEvery);
  return step % every == 0 || step == status_.totalSteps;
}

double TrainingLoop::onClockSeconds() const {
  return Seconds(Clock::now() - start_ - offClock_).count();
}

void TrainingLoop::offClock(const std::function<void()>& work) {
  const Clock::time_point begin = Clock::now();
  work();
  offClock_ += Clock::now() - begin;
}

LoopFigures TrainingLoop::run(LoopDriver& driver) {
  begin();
  while (next(driver)) {
  }
  return end();
}

void TrainingLoop::begin() {
  progress_ = std::make_unique<train::Progress>(static_cast<std::int64_t>(status_.totalSteps),
                                                config_.progress);
  start_ = Clock::now();
  offClock_ = {};
  startSamples_ = learner_.samples();
  status_.recordStep(0, 0);
  status_.training = true;
}

bool TrainingLoop::next(LoopDriver& driver) {
  const std::uint64_t total = status_.totalSteps;
  if (status_.step >= total || driver.stopping()) return false;
  const std::optional<double> taken = driver.step();
  if (!taken) return true;  // the step count is at the total now: the loop ends
  const double loss = *taken;
  const std::uint64_t step = status_.step;
  recentLosses_.push_back(loss);
  if (recentLosses_.size() > stepsPerEpoch_) recentLosses_.pop_front();
  status_.loss = recentLosses_.size() == 1 ? loss : 0.95 * status_.loss + 0.05 * loss;
  status_.recordStep(onClockSeconds(),
                     static_cast<std::uint64_t>(learner_.samples() - startSamples_));
  driver.afterStep();
  if (evalDue(step)) offClock([&] { evaluateAndLog(step, driver.bytesSent()); });
  const double seconds = std::max(status_.trainSeconds.load(), 1e-9);
  const std::uint64_t sent = driver.bytesSent();
  progress_->update(
      static_cast<std::int64_t>(step),
      fmt::format("loss {:.4f}{} {:.0f} samples/s{}", status_.loss.load(),
                  lastAccuracy_ >= 0 ? fmt::format(" acc {:.1f}%", 100 * lastAccuracy_) : "",
                  static_cast<double>(learner_.samples() - startSamples_) / seconds,
                  sent > 0 ? fmt::format(" {:.1f} MB sent", static_cast<double>(sent) / 1e6) : ""));
  return true;
}

LoopFigures TrainingLoop::end() {
  progress_->finish();
  status_.training = false;
  status_.loopEnded = true;
  LoopFigures figures;
  figures.stopped = status_.step < status_.totalSteps;
  figures.wallSeconds = onClockSeconds();
  for (double l : recentLosses_) figures.trainLoss += l / static_cast<double>(recentLosses_.size());
  figures.samplesPerSecond =
      static_cast<double>(learner_.samples() - startSamples_) / std::max(figures.wallSeconds, 1e-9);
  return figures;
}

EvalResult TrainingLoop::evaluate(std::size_t samples) {
  return evaluate_ ? evaluate_(learner_.params(), samples) : EvalResult{};
}

void TrainingLoop::evaluateAndLog(std::uint64_t step, std::uint64_t bytesSent) {
  const EvalResult eval = evaluate(config_.evalSamples);
  lastAccuracy_ = eval.accuracy();
  const double epoch = static_cast<double>(step) / static_cast<double>(stepsPerEpoch_);
  log_.write(JsonObject()
                 .add("event", "eval")
                 .add("peer", fmt::format("{:016x}", self_))
                 .add("step", step)
                 .add("epoch", epoch)
                 .add("wall_s", status_.trainSeconds.load())
                 .add("train_loss", status_.loss.load())
                 .add("test_loss", eval.meanLoss())
                 .add("test_accuracy", eval.accuracy())
                 .add("test_samples", eval.samples)
                 .add("bytes_sent", bytesSent)
                 .add("comm_wait_s", status_.commWaitSeconds()));
  progress_->message(fmt::format("step {:>6}  epoch {:5.2f}  loss {:.4f}  test acc {:.2f}%", step,
                                 epoch, status_.loss.load(), 100 * eval.accuracy()));
}

void TrainingLoop::logFinal(std::uint64_t steps, double wallSeconds, const EvalResult& test,
                            double samplesPerSecond, std::uint64_t bytesSent,
                            double commWaitFraction) {
  JsonObject record;
  record.add("event", "final")
      .add("peer", fmt::format("{:016x}", self_))
      .add("steps", steps)
      .add("wall_s", wallSeconds);
  if (test.samples > 0)
    record.add("test_loss", test.meanLoss()).add("test_accuracy", test.accuracy());
  record.add("samples_per_s", samplesPerSecond)
      .add("bytes_sent", bytesSent)
      .add("comm_wait_fraction", commWaitFraction);
  log_.write(record);
}

}  // namespace gossamer::engine::runtime
