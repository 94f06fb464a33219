// Rings ordered by the network (algorithms/network_ring.h): the order a survey's matrix gives, the
// survey steps, and allreduce-sgd on a simulated geo-cap cluster whose sites are listed
// scrambled: every member uses one order, the models stay bit-identical, and the rounds are
// faster than in id order.
#include "algorithms/network_ring.h"

#include <chrono>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "algorithms/network_survey.h"
#include "engine/sim/world.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// A survey's summed matrix for `n` members from round trips `rtt[i][j]` (seconds; < 0: not
// measured) and one bandwidth for every pair (bytes/s; 0: unlimited).
std::vector<float> matrixOf(const std::vector<std::vector<double>>& rtt, double bandwidth) {
  const std::size_t n = rtt.size();
  std::vector<float> matrix(2 * n * n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      matrix[2 * (i * n + j)] = static_cast<float>(rtt[i][j]);
      matrix[2 * (i * n + j) + 1] = static_cast<float>(bandwidth);
    }
  }
  return matrix;
}

TEST_CASE("network ring: the survey's matrix gives the ring with the fastest slowest hop") {
  const std::vector<engine::PeerId> members{11, 22, 33, 44};
  // Two sites, {11, 33} and {22, 44}: 2 ms within one, 200 ms between. The id order crosses
  // between the sites at every hop; the best ring crosses twice.
  const double near = 0.002, far = 0.2;
  std::vector<std::vector<double>> rtt{
      {0, far, near, far}, {far, 0, far, near}, {near, far, 0, far}, {far, near, far, 0}};
  double idSeconds = 0, orderedSeconds = 0;
  const std::vector<engine::PeerId> order =
      ringOrderFromSurvey(members, matrixOf(rtt, 0), 0, &idSeconds, &orderedSeconds);
  CHECK(order == std::vector<engine::PeerId>{11, 22, 44, 33});
  // Unlimited bandwidth: a round is 2 (n - 1) steps of the slowest hop's one-way latency.
  CHECK(idSeconds == doctest::Approx(6 * far / 2));
  CHECK(orderedSeconds == doctest::Approx(6 * far / 2));  // a cross-site hop is unavoidable
  // With a bandwidth, the chunk's time adds to each hop: 1 MB / 4 over 1 MB/s.
  double withBytes = 0;
  ringOrderFromSurvey(members, matrixOf(rtt, 1e6), 1e6, nullptr, &withBytes);
  CHECK(withBytes == doctest::Approx(6 * (far / 2 + 0.25)));
  // One direction measured is enough; a pair measured by neither keeps the id order.
  rtt[0][2] = -1;
  CHECK(ringOrderFromSurvey(members, matrixOf(rtt, 0), 0) == order);
  rtt[2][0] = -1;
  CHECK(ringOrderFromSurvey(members, matrixOf(rtt, 0), 0).empty());
}

TEST_CASE("network ring: surveys at steps 8, 16, 32, ... and then at every period") {
  std::vector<std::uint64_t> steps;
  for (std::uint64_t s = 0; s <= 1100; ++s)
    if (surveys(s, 256)) steps.push_back(s);
  CHECK(steps == std::vector<std::uint64_t>{8, 16, 32, 64, 128, 256, 512, 768, 1024});
  CHECK_FALSE(surveys(0, 1));
  CHECK(surveys(3, 1));
}

// allreduce-sgd over 8 simulated peers, two per geo-cap site, listed so that the id order crosses
// between sites at every hop (tokyo-london among them). Returns the run.
engine::sim::SimResult scrambledRun(const std::string& ringOrder) {
  const engine::Registry registry = makeRegistry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(8, "allreduce-sgd", 100);
  c.training.minStepTime = 0ms;
  c.training.algorithmOptions["ring-order"] = ringOrder;
  c.network = net::shaped::NetworkProfile::geoCap();
  const char* sites[] = {"tokyo", "ohio", "london", "tokyo", "oregon", "london", "ohio", "oregon"};
  for (std::size_t i = 0; i < 8; ++i) c.network.assignPeer(i, sites[i]);
  return engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
}

TEST_CASE("network ring: allreduce-sgd on scrambled geo-cap sites agrees on one faster ring") {
  const engine::sim::SimResult byId = scrambledRun("id");
  const engine::sim::SimResult byNetwork = scrambledRun("network");
  for (const engine::sim::SimResult* r : {&byId, &byNetwork}) {
    REQUIRE(r->violations.empty());
    REQUIRE(r->finals.size() == 8);
    for (const auto& peer : r->peers) {
      CHECK(peer.steps == 100);
      const auto fallbacks = peer.metrics.find("allreduce-sgd.fallbacks");
      CHECK((fallbacks == peer.metrics.end() || fallbacks->second == 0));
    }
    // One order everywhere: every round completed, so the models are the same bits.
    for (const auto& final : r->finals) CHECK(final.params == r->finals.front().params);
  }
  for (const auto& peer : byNetwork.peers) {
    CHECK(peer.metrics.at("allreduce-sgd.surveys") == 4);  // steps 8, 16, 32, 64
  }
  const double ratio = byId.virtualSeconds / byNetwork.virtualSeconds;
  MESSAGE("100 steps: " << byId.virtualSeconds << " s in id order, " << byNetwork.virtualSeconds
                        << " s ordered by the network (" << ratio << "x)");
  CHECK(ratio >= 1.3);
}

}  // namespace
}  // namespace gossamer::algorithms
