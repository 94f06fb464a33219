#include "engine/runtime/speeds.h"

#include <algorithm>

namespace gossamer::engine::runtime {

void SpeedBoard::record(PeerId peer, const PeerSpeed& speed) {
  std::lock_guard lock(mutex_);
  speeds_[peer] = speed;
}

std::optional<PeerSpeed> SpeedBoard::of(PeerId peer) const {
  std::lock_guard lock(mutex_);
  const auto it = speeds_.find(peer);
  if (it == speeds_.end()) return std::nullopt;
  return it->second;
}

std::optional<PeerSpeed> speedBetween(const LoopReading& before, const LoopReading& after) {
  if (after.step <= before.step || after.loopSeconds <= before.loopSeconds) return std::nullopt;
  const auto steps = static_cast<double>(after.step - before.step);
  const double samples =
      after.samples >= before.samples ? static_cast<double>(after.samples - before.samples) : 0;
  return PeerSpeed{
      .stepSeconds = std::max(after.computeSeconds - before.computeSeconds, 0.0) / steps,
      .samplesPerSecond = samples / (after.loopSeconds - before.loopSeconds),
      .step = after.step};
}

LoopReading readLoop(const LoopStatus& status) {
  const StepFigures figures = status.lastStep();
  return LoopReading{.step = figures.step,
                     .samples = figures.samples,
                     .computeSeconds = figures.computeSeconds,
                     .loopSeconds = figures.trainSeconds};
}

SpeedReporter::SpeedReporter(const LoopStatus& status, Clock::duration period,
                             std::function<void(const PeerSpeed&)> report)
    : status_(status),
      period_(period),
      report_(std::move(report)),
      last_(readLoop(status)),
      thread_([this] { run(); }) {}

SpeedReporter::~SpeedReporter() { stop(); }

void SpeedReporter::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SpeedReporter::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    reportWindow();
    lock.lock();
  }
}

void SpeedReporter::reportWindow() {
  const LoopReading now = readLoop(status_);
  if (const std::optional<PeerSpeed> speed = speedBetween(last_, now)) {
    report_(*speed);
    last_ = now;
  }
}

}  // namespace gossamer::engine::runtime
