#include "engine/life/start_rule.h"

#include <algorithm>

namespace gossamer::engine::life {
namespace {

std::uint64_t planned(const MemberStatus& status) {
  return status.runSteps > 0 ? status.runSteps : status.totalSteps;
}

}  // namespace

std::optional<StartPlan> planStart(const StartFacts& facts) {
  StartPlan plan;
  std::uint64_t expectedTotal = 0;  // the cluster's step count, when it counted on this peer
  std::uint64_t expectedRun = 0;    // and as planned
  std::size_t expectedView = 0;     // members the peers that counted on it see now
  if (facts.joined) {
    for (const MemberStatus& status : facts.statuses) {
      // Every peer trains the same steps: one that trained them all ends the run, for all but a
      // member it counted on from the start (that one's steps are still to come).
      if (status.done && !status.expected)
        return StartPlan{.totalSteps = status.totalSteps, .step = status.step, .clusterDone = true};
      if (!status.training) continue;
      // A peer resumed from its checkpoint was a member, but the others went on without it: it
      // catches up with their step like a newcomer.
      if (status.expected && !facts.resumed) {
        expectedTotal = status.totalSteps;
        expectedRun = planned(status);
        expectedView = std::max(expectedView, status.members);
        continue;
      }
      plan.late = true;
      plan.totalSteps = status.totalSteps;
      plan.runSteps = planned(status);
      plan.step = std::max(plan.step, status.step);
    }
    // Counted on from the start: go from step 0 to the cluster's step count once this peer sees
    // as many members as the others see now (then the peers it starts with count on it too).
    // Not the count the cluster started with: a member may have left since.
    if (expectedTotal > 0) {
      if (facts.members >= expectedView)
        return StartPlan{.totalSteps = expectedTotal, .runSteps = expectedRun};
      return std::nullopt;
    }
    if (plan.late) return plan;
    if (facts.members >= facts.minPeers) return StartPlan{};
  }
  return std::nullopt;
}

}  // namespace gossamer::engine::life
