// The order of a ring all-reduce by the network, the same on every member (algorithms/README.md,
// "Rings ordered by the network").
//
// A ring's step lasts as long as its slowest hop, so the members are placed where each hop is
// fast: topology::orderRing over cost(i -> j) = latency(i, j) + (model / n) / bandwidth(i, j),
// exact up to 12 members, a heuristic above. The order must be the same everywhere, so it is
// computed from measurements every member holds bit for bit:
//   survey   network_survey.h, at its steps for surveyEvery: every member of a complete survey
//            holds the same matrix of measured paths, and computes the same order from it
//   costs    latency(i, j) = half the larger of the two directions' round trips (either one when
//            only one is measured); bandwidth(i -> j) as i measured it (0 in the matrix:
//            unlimited); the survey's coarse values make links alike tie and keep the id order
//   unknown  while some pair is measured by neither member, the order stays the id order
//   gain     an order whose estimated round is not shorter than the id order's by 10% and 20 ms
//            is not taken: on a LAN it would only follow the measurements' noise
//   effect   from the survey's step on, while the members stay those it surveyed; a failed
//            survey, a view change, or reset() after the caller's failed round (members whose
//            orders differ fail it: the order is in its fingerprint) return to the id order until
//            the next survey
// Each new order is logged with its estimated round time against the id order's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/network_survey.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

class NetworkRing {
 public:
  // A new order is taken when its estimated round is shorter than the id order's by at least
  // this fraction of it and these seconds; else the id order stays.
  static constexpr double kMinGain = 0.1;
  static constexpr double kMinGainSeconds = 0.02;

  // `kind`: the survey's message kind (the caller's own, < kMaxAlgorithmKind); `surveyEvery` > 0;
  // `who` names the caller in logs and metrics ("<who>.surveys").
  NetworkRing(std::uint32_t kind, std::uint64_t surveyEvery, std::string who);

  // The ring for this step's all-reduce of `modelBytes`: surveys first when the step is a survey
  // step (a collective: every member calls it at every step). Empty: the id order.
  std::span<const engine::PeerId> order(engine::PeerContext& ctx, double modelBytes);
  // The order the last survey left, surveying nothing (the id order after a view change).
  std::span<const engine::PeerId> current(engine::PeerContext& ctx);
  // Takes the order from a survey the caller made at an agreed step (ViewFit's; none: it failed,
  // the id order until the next).
  void adopt(engine::PeerContext& ctx, const std::optional<Survey>& surveyed, double modelBytes);
  // Back to the id order (after a failed round).
  void reset() { order_.clear(); }

 private:
  std::uint32_t kind_;
  std::uint64_t surveyEvery_;
  std::string who_;
  std::vector<engine::PeerId> order_;  // empty: id order
};

// The order the survey's summed matrix gives (see above): positions into `members` (sorted ids)
// mapped back to ids; empty when some pair is unmeasured. `matrix` holds n x n x 2 floats.
std::vector<engine::PeerId> ringOrderFromSurvey(std::span<const engine::PeerId> members,
                                                std::span<const float> matrix, double modelBytes,
                                                double* idRoundSeconds = nullptr,
                                                double* orderedRoundSeconds = nullptr);

}  // namespace gossamer::algorithms
