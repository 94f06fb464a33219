#include "algorithms/network_ring.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "algorithms/network_survey.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "topology/ring_order.h"

namespace gossamer::algorithms {

NetworkRing::NetworkRing(std::uint32_t kind, std::uint64_t surveyEvery, std::string who)
    : kind_(kind), surveyEvery_(surveyEvery), who_(std::move(who)) {
  GOSSAMER_ENFORCE(surveyEvery_ > 0, "{}: the ring's survey period must be > 0", who_);
}

std::span<const engine::PeerId> NetworkRing::order(engine::PeerContext& ctx, double modelBytes) {
  if (surveys(ctx.step(), surveyEvery_) && ctx.members().size() >= 3)
    adopt(ctx, surveyNetwork(ctx, kind_, ctx.step(), who_), modelBytes);
  return current(ctx);
}

std::span<const engine::PeerId> NetworkRing::current(engine::PeerContext& ctx) {
  if (!order_.empty() && !std::is_permutation(order_.begin(), order_.end(), ctx.members().begin(),
                                              ctx.members().end())) {
    order_.clear();  // a view change: the id order until the next survey
  }
  return order_;
}

void NetworkRing::adopt(engine::PeerContext& ctx, const std::optional<Survey>& surveyed,
                        double modelBytes) {
  // Two or fewer members: every ring is the same. A survey of another view orders nothing here.
  if (!surveyed || surveyed->members.size() < 3 || surveyed->members != ctx.members()) {
    order_.clear();
    return;
  }
  const std::vector<engine::PeerId>& members = surveyed->members;
  double idSeconds = 0, orderedSeconds = 0;
  std::vector<engine::PeerId> order =
      ringOrderFromSurvey(members, surveyed->paths, modelBytes, &idSeconds, &orderedSeconds);
  // An order that gains little keeps the id order: on a LAN the measurements' noise would pick
  // the order, and two runs would sum in different orders for nothing.
  if (idSeconds - orderedSeconds < std::max(kMinGain * idSeconds, kMinGainSeconds)) order.clear();
  if (order != order_ && !order.empty()) {
    log::get("algorithms")
        ->info(
            "{}: ring ordered by the network at step {}: {:016x}; estimated round {:.3f} s "
            "against {:.3f} s in id order",
            who_, ctx.step(), fmt::join(order, " "), orderedSeconds, idSeconds);
  }
  order_ = std::move(order);
}

std::vector<engine::PeerId> ringOrderFromSurvey(std::span<const engine::PeerId> members,
                                                std::span<const float> matrix, double modelBytes,
                                                double* idRoundSeconds,
                                                double* orderedRoundSeconds) {
  const std::size_t n = members.size();
  GOSSAMER_ENFORCE_EQ(matrix.size(), 2 * n * n, "ring survey: the matrix holds n x n x 2 floats");
  topology::LinkCosts costs{n, std::vector<double>(n * n, 0.0), std::vector<double>(n * n, 0.0)};
  const auto roundTrip = [&](std::size_t i, std::size_t j) {
    return static_cast<double>(matrix[2 * (i * n + j)]);
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) {
        costs.bandwidthBytesPerSecond[i * n + j] = std::numeric_limits<double>::infinity();
        continue;
      }
      const double there = roundTrip(i, j), back = roundTrip(j, i);
      if (there < 0 && back < 0) return {};  // measured by neither
      costs.latencySeconds[i * n + j] = std::max(there, back) / 2;
      const double bandwidth = matrix[2 * (i * n + j) + 1];
      costs.bandwidthBytesPerSecond[i * n + j] =
          bandwidth > 0 ? bandwidth : std::numeric_limits<double>::infinity();
    }
  }
  const std::vector<std::size_t> positions = topology::orderRing(costs, modelBytes);
  std::vector<std::size_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  if (idRoundSeconds != nullptr)
    *idRoundSeconds = topology::estimateRingRoundSeconds(costs, identity, modelBytes);
  if (orderedRoundSeconds != nullptr)
    *orderedRoundSeconds = topology::estimateRingRoundSeconds(costs, positions, modelBytes);
  std::vector<engine::PeerId> order;
  order.reserve(n);
  for (const std::size_t position : positions) order.push_back(members[position]);
  return order;
}

}  // namespace gossamer::algorithms
