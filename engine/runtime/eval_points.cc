#include "engine/runtime/eval_points.h"

#include <algorithm>

#include <fmt/format.h>

namespace gossamer::engine::runtime {

std::optional<std::uint64_t> EvalSchedule::pointAfter(std::uint64_t step) const {
  if (everySteps == 0 || step == 0 || step % everySteps != 0) return std::nullopt;
  return step / everySteps;
}

std::string EvalSchedule::describe() const {
  if (everySteps == 0) return "no evaluation points";
  return everySteps == 1 ? "every step" : fmt::format("every {} steps", everySteps);
}

void EvalPointBoard::add(PointSample sample) {
  std::lock_guard lock(mutex_);
  std::vector<PointSample>& samples = points_[sample.point];
  // A peer that passes a point again (restarted from an earlier checkpoint) replaces its sample.
  std::erase_if(samples, [&](const PointSample& s) { return s.model.peer == sample.model.peer; });
  samples.push_back(std::move(sample));
}

std::vector<std::vector<PointSample>> EvalPointBoard::takeComplete(std::span<const PeerId> peers,
                                                                   const Owes& owes) {
  std::vector<std::vector<PointSample>> complete;
  std::lock_guard lock(mutex_);
  while (!points_.empty()) {
    auto& [point, samples] = *points_.begin();
    const std::uint64_t step = samples.front().model.step;
    const bool done = std::all_of(peers.begin(), peers.end(), [&](PeerId peer) {
      const bool sampled = std::any_of(samples.begin(), samples.end(),
                                       [&](const PointSample& s) { return s.model.peer == peer; });
      return sampled || !owes(peer, step);
    });
    if (!done) break;
    complete.push_back(std::move(samples));
    points_.erase(points_.begin());
  }
  return complete;
}

std::size_t EvalPointBoard::pending() const {
  std::lock_guard lock(mutex_);
  return points_.size();
}

AveragedPoint averagePoint(std::vector<PointSample> samples) {
  AveragedPoint averaged;
  EvalPoint& point = averaged.point;
  if (samples.empty()) return averaged;
  point.minStep = UINT64_MAX;
  const auto n = static_cast<double>(samples.size());
  std::vector<Snapshot> models;
  for (PointSample& s : samples) {
    const StepFigures& f = s.figures;
    point.wallSeconds = std::max(point.wallSeconds, f.trainSeconds);
    point.minStep = std::min(point.minStep, s.model.step);
    point.maxStep = std::max(point.maxStep, s.model.step);
    point.meanStep += static_cast<double>(s.model.step) / n;
    point.samples += s.samples;
    point.bytesSentPerPeer += static_cast<double>(s.bytesSent) / n;
    if (f.trainSeconds > 0) {
      point.commWaitFraction += f.commWaitSeconds / f.trainSeconds / n;
      point.utilization += f.computeSeconds / f.trainSeconds / n;
    }
    models.push_back(std::move(s.model));
  }
  point.consensus.peers = models.size();
  averaged.model = averageModels(models, &point.consensus.distance);
  return averaged;
}

EvalPoint evaluateAveraged(AveragedPoint averaged, ConsensusEvaluator& evaluator,
                           std::size_t evalSamples) {
  const EvalResult result = evaluator.evaluateModel(averaged.model, evalSamples);
  averaged.point.consensus.accuracy = result.accuracy();
  averaged.point.consensus.loss = result.meanLoss();
  return averaged.point;
}

}  // namespace gossamer::engine::runtime
