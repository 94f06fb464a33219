// Rings ordered by the network (algorithms/network_ring.h): the order a survey's matrix gives, the
// survey steps, and allreduce-sgd's and local-sgd's rings on a simulated geo-cap cluster whose
// sites are listed scrambled: every member uses one order, the models stay bit-identical, and the
// rounds are faster than in id order.
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

// `algorithm` over 8 simulated peers, two per geo-cap site, listed so that the id order crosses
// between sites at every hop (tokyo-london among them), with `options`, `steps` steps of
// `stepTime` each. Returns the run.
engine::sim::SimResult scrambledRun(const std::string& algorithm,
                                    const engine::OptionValues& options, std::uint64_t steps = 100,
                                    std::chrono::milliseconds stepTime = 0ms) {
  const engine::Registry registry = makeRegistry();
  engine::sim::SimConfig c = engine::sim::testing::baseConfig(8, algorithm, steps);
  c.training.minStepTime = stepTime;
  for (const auto& [key, value] : options) c.training.algorithmOptions[key] = value;
  c.network = net::shaped::NetworkProfile::geoCap();
  const char* sites[] = {"tokyo", "ohio", "london", "tokyo", "oregon", "london", "ohio", "oregon"};
  for (std::size_t i = 0; i < 8; ++i) c.network.assignPeer(i, sites[i]);
  return engine::sim::simulate(c, registry, engine::sim::testing::smallData(registry));
}

// Every round completed on one order: no fallback, and the models are the same bits.
void checkOneRing(const engine::sim::SimResult& r, const std::string& algorithm,
                  std::uint64_t steps = 100) {
  REQUIRE(r.violations.empty());
  REQUIRE(r.finals.size() == 8);
  for (const auto& peer : r.peers) {
    CHECK(peer.steps == steps);
    const auto fallbacks = peer.metrics.find(algorithm + ".fallbacks");
    CHECK((fallbacks == peer.metrics.end() || fallbacks->second == 0));
  }
  for (const auto& final : r.finals) CHECK(final.params == r.finals.front().params);
}

TEST_CASE("network ring: allreduce-sgd on scrambled geo-cap sites agrees on one faster ring") {
  const engine::sim::SimResult byId = scrambledRun("allreduce-sgd", {{"ring-order", "id"}});
  const engine::sim::SimResult byNetwork =
      scrambledRun("allreduce-sgd", {{"ring-order", "network"}});
  checkOneRing(byId, "allreduce-sgd");
  checkOneRing(byNetwork, "allreduce-sgd");
  for (const auto& peer : byNetwork.peers) {
    CHECK(peer.metrics.at("allreduce-sgd.surveys") == 4);  // steps 8, 16, 32, 64
  }
  const double ratio = byId.virtualSeconds / byNetwork.virtualSeconds;
  MESSAGE("100 steps: " << byId.virtualSeconds << " s in id order, " << byNetwork.virtualSeconds
                        << " s ordered by the network (" << ratio << "x)");
  CHECK(ratio >= 1.3);
}

TEST_CASE("network ring: local-sgd's rounds on scrambled geo-cap sites take one faster ring") {
  // A fixed tau: the ring's own surveys (steps 8, 16, 32, 64), as allreduce-sgd's.
  const engine::sim::SimResult byId =
      scrambledRun("local-sgd", {{"tau", "2"}, {"ring-order", "id"}});
  const engine::sim::SimResult byNetwork =
      scrambledRun("local-sgd", {{"tau", "2"}, {"ring-order", "network"}});
  checkOneRing(byId, "local-sgd");
  checkOneRing(byNetwork, "local-sgd");
  for (const auto& peer : byNetwork.peers) CHECK(peer.metrics.at("local-sgd.surveys") == 4);
  const double ratio = byId.virtualSeconds / byNetwork.virtualSeconds;
  MESSAGE("100 steps, tau 2: " << byId.virtualSeconds << " s in id order, "
                               << byNetwork.virtualSeconds << " s ordered by the network (" << ratio
                               << "x)");
  CHECK(ratio >= 1.3);
  // tau auto at 300 ms steps: the surveys that choose tau order the ring too, and no other runs
  // (step 8 lacks a pair's round trip, step 16 chooses, the next is at 256); every member still
  // takes the same ring.
  const engine::sim::SimResult automatic =
      scrambledRun("local-sgd", {{"ring-order", "network"}}, 100, 300ms);
  checkOneRing(automatic, "local-sgd");
  for (const auto& peer : automatic.peers) {
    CHECK(peer.metrics.at("local-sgd.surveys") == 2);
    CHECK(peer.metrics.count("chosen.local-sgd.tau") == 1);
  }
}

TEST_CASE("network ring: dpsgd's ring topology on scrambled geo-cap sites places near neighbours") {
  // Each step waits for the slowest neighbour's model: in id order a tokyo-london hop (106 ms
  // one way), placed by the network at most ohio-tokyo (66 ms), 1.6x, once every pair has been
  // measured (step 64 here); the surveys before cost 2 (n - 1) id-order hops each.
  const std::uint64_t steps = 1000;
  const engine::sim::SimResult byId = scrambledRun("dpsgd", {{"ring-order", "id"}}, steps);
  const engine::sim::SimResult byNetwork =
      scrambledRun("dpsgd", {{"ring-order", "network"}}, steps);
  for (const engine::sim::SimResult* r : {&byId, &byNetwork}) {
    REQUIRE(r->violations.empty());
    for (const auto& peer : r->peers) {
      CHECK(peer.steps == steps);
      CHECK(peer.metrics.count("dpsgd.missing") == 0);  // every member moved on the same step
    }
  }
  for (const auto& peer : byNetwork.peers) CHECK(peer.metrics.at("dpsgd.surveys") == 8);
  const double ratio = byId.virtualSeconds / byNetwork.virtualSeconds;
  MESSAGE("dpsgd, " << steps << " steps: " << byId.virtualSeconds << " s in id order, "
                    << byNetwork.virtualSeconds << " s placed by the network (" << ratio << "x)");
  CHECK(ratio >= 1.25);
  CHECK(byNetwork.consensus.accuracy >= byId.consensus.accuracy - 0.05);
}

}  // namespace
}  // namespace gossamer::algorithms
