// Learning-rate schedules, shared by every peer and algorithm of a run so that comparisons are
// fair: the rate at step t of T depends only on (base rate, schedule, t, T).
#pragma once

#include <cstdint>
#include <string>

namespace gossamer::engine::train {

enum class LrSchedule {
  kConstant,  // lr
  kCosine,    // lr x (1 + cos(pi t / T)) / 2, from lr down to 0 at the last step
};

struct ScheduleOptions {
  LrSchedule kind = LrSchedule::kConstant;
  // Linear warm-up from lr / warmupSteps to lr over the first warmupSteps steps (0: none); the
  // schedule proper then runs over the remaining steps.
  std::uint64_t warmupSteps = 0;
};

// "constant" or "cosine"; throws gossamer::Error listing them otherwise.
LrSchedule parseLrSchedule(const std::string& name);
const char* lrScheduleName(LrSchedule kind);

// The rate for (0-based) step `step` of `total`.
float scheduledRate(float lr, const ScheduleOptions& schedule, std::uint64_t step,
                    std::uint64_t total);

}  // namespace gossamer::engine::train
