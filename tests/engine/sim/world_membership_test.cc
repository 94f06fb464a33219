// The simulated world's membership (engine/sim), which is the SWIM protocol of net/membership:
// a kill is detected by every survivor within its bounds, a partition splits the views, which
// merge again after it heals, and a joiner is admitted by a seed, then known to all.
#include <chrono>
#include <cstddef>
#include <map>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "algorithms/builtin.h"
#include "engine/sim/world.h"
#include "net/membership/membership.h"
#include "tests/engine/sim/sim_testing.h"

namespace gossamer::engine::sim::testing {
namespace {

// Who saw which membership event when: (observer, event kind, member) -> virtual seconds.
struct EventLog {
  std::map<std::tuple<PeerId, net::membership::EventKind, PeerId>, std::vector<double>> seen;
  void attach(SimConfig& c) {
    c.onMembership = [this](PeerId observer, double at, const net::membership::Event& e) {
      seen[{observer, e.kind, e.member.id}].push_back(at);
    };
  }
  std::vector<double> at(PeerId observer, net::membership::EventKind kind, PeerId member) const {
    const auto it = seen.find({observer, kind, member});
    return it == seen.end() ? std::vector<double>{} : it->second;
  }
  std::size_t count(net::membership::EventKind kind) const {
    std::size_t n = 0;
    for (const auto& [key, times] : seen) n += std::get<1>(key) == kind ? times.size() : 0;
    return n;
  }
};

TEST_CASE(
    "sim: membership is the SWIM protocol: a kill is detected by every survivor in its bounds") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(8, "gosgd", 200);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 10, .kind = FaultKind::kill, .pick = 3}};  // peer 4
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  CHECK(r.membershipMessages > 0);
  // The run's options (lan, T = 1 s, stretched for a 40 ms round trip: unchanged), N = 8.
  const net::membership::Options o = c.membership.forRoundTrip(40ms);
  const double period = std::chrono::duration<double>(o.probeInterval).count();
  const double minSuspicion = std::chrono::duration<double>(o.suspicionTimeout(8)).count();
  const double maxSuspicion = std::chrono::duration<double>(o.suspicionTimeout(8, 0)).count();
  for (PeerId observer = 1; observer <= 8; ++observer) {
    if (observer == 4) continue;
    CAPTURE(observer);
    const std::vector<double> failed = log.at(observer, EventKind::failed, 4);
    REQUIRE(failed.size() == 1);
    // Not before someone's probe failed and the shortest suspicion ran out; by the time every
    // member probed it (two rounds of the round-robin) and the longest one ran out.
    CHECK(failed[0] >= 10 + minSuspicion);
    CHECK(failed[0] <= 10 + 2 * 7 * period + period + maxSuspicion);
  }
  // Nobody else was declared failed on a lossless network, and every peer joined once.
  CHECK(log.count(EventKind::failed) == 7);
  CHECK(log.count(EventKind::joined) == 8);
}

TEST_CASE("sim: membership is the SWIM protocol: a partition splits the views, which merge again") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(6, "gosgd", 600);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 10, .kind = FaultKind::partition, .seconds = 30, .pick = 1}};  // peer 2
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  for (PeerId other = 1; other <= 6; ++other) {
    if (other == 2) continue;
    CAPTURE(other);
    // Each side declares the other failed during the partition ...
    const std::vector<double> failed = log.at(other, EventKind::failed, 2);
    const std::vector<double> failedThere = log.at(2, EventKind::failed, other);
    REQUIRE(failed.size() == 1);
    REQUIRE(failedThere.size() == 1);
    CHECK(failed[0] > 10);
    CHECK(failed[0] < 40);
    CHECK(failedThere[0] < 40);
    // ... and takes it back after it heals (push-pull's reconnect rounds), before the end.
    const std::vector<double> back = log.at(other, EventKind::rejoined, 2);
    const std::vector<double> backThere = log.at(2, EventKind::rejoined, other);
    REQUIRE(back.size() == 1);
    REQUIRE(backThere.size() == 1);
    CHECK(back[0] > 40);
    CHECK(backThere[0] > 40);
  }
  for (const SimPeerResult& p : r.peers) CHECK(p.finished);
}

TEST_CASE(
    "sim: membership is the SWIM protocol: a joiner is admitted by a seed, then known to all") {
  using net::membership::EventKind;
  const Registry registry = algorithms::makeRegistry();
  SimConfig c = baseConfig(6, "dpsgd", 100);
  c.network = uniform(20ms);
  c.faults = {Fault{.at = 1, .kind = FaultKind::kill, .pick = 0},  // peer 1, the first seed
              Fault{.at = 8, .kind = FaultKind::join}};            // peer 7
  EventLog log;
  log.attach(c);
  const SimResult r = simulate(c, registry, smallData(registry));
  CHECK(r.violations.empty());
  // Through the second seed (the first is dead: refused after a round trip).
  const std::vector<double> own = log.at(7, EventKind::joined, 7);
  REQUIRE(own.size() == 1);
  CHECK(own[0] >= 8 + 2 * 0.040);
  CHECK(own[0] < 8 + 1);
  for (PeerId other = 2; other <= 6; ++other) {
    CAPTURE(other);
    const std::vector<double> joined = log.at(other, EventKind::joined, 7);
    REQUIRE(joined.size() == 1);
    CHECK(joined[0] > own[0] - 0.1);
    CHECK(joined[0] < own[0] + 5);
    CHECK(log.at(7, EventKind::joined, other).size() == 1);
  }
  CHECK(log.at(7, EventKind::joined, 1).empty());  // it learns peer 1 only as dead
  REQUIRE(r.peers.size() == 7);
  CHECK(r.peers[6].finished);
  CHECK(r.peers[6].steps == 100);
}

}  // namespace
}  // namespace gossamer::engine::sim::testing
