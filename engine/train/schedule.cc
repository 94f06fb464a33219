#include "engine/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/base/enforce.h"

namespace gossamer::engine::train {

LrSchedule parseLrSchedule(const std::string& name) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "cosine") return LrSchedule::kCosine;
  GOSSAMER_THROW("unknown learning-rate schedule '{}' (use constant or cosine)", name);
}

const char* lrScheduleName(LrSchedule kind) {
  return kind == LrSchedule::kCosine ? "cosine" : "constant";
}

float scheduledRate(float lr, const ScheduleOptions& schedule, std::uint64_t step,
                    std::uint64_t total) {
  if (step < schedule.warmupSteps)
    return lr * static_cast<float>(step + 1) / static_cast<float>(schedule.warmupSteps);
  if (schedule.kind == LrSchedule::kConstant) return lr;
  const std::uint64_t span = total > schedule.warmupSteps ? total - schedule.warmupSteps : 1;
  const double progress =
      std::min(1.0, static_cast<double>(step - schedule.warmupSteps) / static_cast<double>(span));
  return static_cast<float>(lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

}  // namespace gossamer::engine::train
