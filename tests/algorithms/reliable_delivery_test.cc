// ReliableDelivery (algorithms/reliable_delivery.h) alone, with a fake clock: escrow until the ack,
// retransmission after exactly the timeout, the floor, the bound on bytes in flight, exactly-once
// merges on the receiver's side, and the escrow toward a partner whose life ended. Every oracle is
// closed form: weights are powers of 2, so sums are exact.
#include "algorithms/reliable_delivery.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/cpu_compute.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::Clock;
using engine::PeerId;
using Arrival = ReliableDelivery::Arrival;
using Ids = std::vector<std::uint64_t>;

const Clock::time_point t0{};
constexpr Clock::duration kAfter = 100ms;
constexpr std::size_t kSize = 8, kBytes = kSize * sizeof(float);

struct Fixture {
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute({.blasThreads = 1});
  ReliableDelivery delivery;
  explicit Fixture(std::int64_t maxInflightBytes = 0) : delivery(maxInflightBytes) {}
  std::uint64_t send(PeerId to, double weight, Clock::time_point at = t0) {
    return delivery.escrow(to, weight, *compute, kSize, kBytes, at, kAfter);
  }
  void ack(PeerId from, Ids ids, Clock::time_point at = t0 + 1ms) { delivery.acked(from, ids, at); }
};

TEST_CASE("reliable delivery: a transfer stays in escrow until its receiver's ack releases it") {
  Fixture f;
  const std::uint64_t id = f.send(2, 0.25);
  CHECK(id == 1);
  CHECK(f.delivery.escrowed() == 0.25);
  CHECK(f.delivery.escrowTo() == std::map<PeerId, double>{{2, 0.25}});
  CHECK(f.delivery.bytesInFlight() == kBytes);
  CHECK(f.delivery.owes(2));
  CHECK_FALSE(f.delivery.owes(3));
  CHECK(f.delivery.transfer(id).model->size() == kSize);
  // Acks from another peer, and of ids never sent, change nothing.
  f.ack(3, {id});
  f.ack(2, {7});
  CHECK(f.delivery.size() == 1);
  CHECK(f.delivery.ackedBy().empty());
  // The receiver's ack, 40 ms after the send: released, counted as acknowledged, and a round trip
  // for the bound (the transfer was sent once).
  f.ack(2, {id}, t0 + 40ms);
  CHECK(f.delivery.empty());
  CHECK(f.delivery.escrowed() == 0);
  CHECK_FALSE(f.delivery.owes(2));
  CHECK(f.delivery.ackedBy() == std::map<PeerId, double>{{2, 0.25}});
  CHECK(f.delivery.bound().rttSeconds() == doctest::Approx(0.04));
  // A duplicate ack (the receiver acknowledges every copy it gets) counts nothing twice.
  f.ack(2, {id}, t0 + 50ms);
  CHECK(f.delivery.ackedBy() == std::map<PeerId, double>{{2, 0.25}});
  CHECK(f.delivery.sends() == 1);
  CHECK(f.delivery.retransmits() == 0);
}

TEST_CASE("reliable delivery: an unacknowledged transfer is due after exactly the timeout") {
  Fixture f;
  const std::uint64_t first = f.send(2, 0.5);
  CHECK(f.delivery.due(t0 + kAfter - 1ns, kAfter).empty());
  CHECK_FALSE(f.delivery.overdue(2));
  CHECK(f.delivery.due(t0 + kAfter, kAfter) == Ids{first});
  CHECK(f.delivery.transfer(first).resent);
  CHECK(f.delivery.transfer(first).overdue);
  CHECK(f.delivery.overdue(2));
  CHECK(f.delivery.retransmits() == 1);
  // Due again `after` later, not before; a later transfer keeps its own schedule.
  const std::uint64_t second = f.send(3, 0.25, t0 + 50ms);
  CHECK(f.delivery.due(t0 + 150ms - 1ns, kAfter).empty());
  CHECK(f.delivery.due(t0 + 150ms, kAfter) == Ids{second});
  CHECK(f.delivery.due(t0 + 200ms - 1ns, kAfter).empty());
  CHECK(f.delivery.due(t0 + 250ms, kAfter) == (Ids{first, second}));
  CHECK(f.delivery.retransmits() == 4);
  // Every copy carries the same weight; the ack of a resent transfer gives no round trip (it
  // matches no single send), and releases it all the same.
  CHECK(f.delivery.transfer(first).weight == 0.5);
  f.ack(2, {first}, t0 + 260ms);
  CHECK(f.delivery.bound().rttSeconds() == 0);
  CHECK(f.delivery.escrowed() == 0.25);
  CHECK_FALSE(f.delivery.overdue(2));
}

TEST_CASE("reliable delivery: a receiver's request resends its transfers at once, not overdue") {
  Fixture f;
  const std::uint64_t a = f.send(2, 0.5), b = f.send(2, 0.25), c = f.send(2, 0.125);
  const std::uint64_t d = f.send(3, 0.0625);
  CHECK(f.delivery.resend(2, b, t0 + 10ms, kAfter) == (Ids{a, b}));
  CHECK(f.delivery.transfer(a).resent);
  CHECK_FALSE(f.delivery.transfer(a).overdue);
  CHECK_FALSE(f.delivery.overdue(2));
  CHECK(f.delivery.retransmits() == 0);
  // Those two are due `after` from the request, the others from their send.
  CHECK(f.delivery.due(t0 + kAfter, kAfter) == (Ids{c, d}));
  CHECK(f.delivery.due(t0 + 10ms + kAfter, kAfter) == (Ids{a, b}));
}

TEST_CASE("reliable delivery: the floor is the smallest unacknowledged id toward the receiver") {
  Fixture f;
  const std::uint64_t a = f.send(2, 0.5), b = f.send(3, 0.25), c = f.send(2, 0.125);
  CHECK(f.delivery.floor(2, c) == a);
  CHECK(f.delivery.floor(3, b) == b);
  CHECK(f.delivery.floor(4, 9) == 9);
  f.ack(2, {a});
  CHECK(f.delivery.floor(2, c) == c);
  CHECK(f.delivery.floor(2, 9) == c);
}

TEST_CASE("reliable delivery: the bound on bytes in flight refuses a transfer that does not fit") {
  SUBCASE("a bound below one transfer: one at a time") {
    Fixture f(1);
    CHECK(f.delivery.allows(kBytes));  // nothing in flight: one transfer always may go
    const std::uint64_t id = f.send(2, 0.5);
    CHECK_FALSE(f.delivery.allows(kBytes));
    f.ack(2, {id});
    CHECK(f.delivery.allows(kBytes));
  }
  SUBCASE("a fixed bound of two and a half transfers: two") {
    Fixture f(5 * kBytes / 2);
    f.send(2, 0.5);
    CHECK(f.delivery.allows(kBytes));
    f.send(3, 0.25);
    CHECK_FALSE(f.delivery.allows(kBytes));
  }
  SUBCASE("estimated: four transfers before the first ack") {
    Fixture f;
    for (PeerId to : {2, 3, 4}) f.send(to, 0.125);
    CHECK(f.delivery.allows(kBytes));
    f.send(5, 0.125);
    CHECK_FALSE(f.delivery.allows(kBytes));
  }
  SUBCASE("the escrow lost with a partner no longer counts") {
    Fixture f(1);
    f.send(2, 0.5);
    CHECK_FALSE(f.delivery.allows(kBytes));
    f.delivery.lose(2);
    CHECK(f.delivery.allows(kBytes));
  }
}

TEST_CASE("reliable delivery: a receiver merges every transfer exactly once") {
  Fixture f;
  CHECK(f.delivery.arrived(5, 1, 1) == Arrival::kNew);
  // Neither merged nor judged (say, it could not be decoded): still new when it comes again.
  CHECK(f.delivery.arrived(5, 1, 1) == Arrival::kNew);
  f.delivery.merged(5, 1, 0.25);
  CHECK(f.delivery.arrived(5, 1, 1) == Arrival::kDuplicate);
  CHECK(f.delivery.mergedFrom() == std::map<PeerId, double>{{5, 0.25}});
  // Refused for good (an outlier): its copies are dropped unseen.
  CHECK(f.delivery.arrived(5, 2, 1) == Arrival::kNew);
  f.delivery.judged(5, 2);
  CHECK(f.delivery.arrived(5, 2, 1) == Arrival::kJudged);
  // Another sender numbers its own transfers.
  CHECK(f.delivery.arrived(6, 1, 1) == Arrival::kNew);
  // The sender's floor: every id below it was acknowledged, so a copy of one is a duplicate; a
  // lower floor later does not move it back.
  CHECK(f.delivery.arrived(5, 4, 4) == Arrival::kNew);
  CHECK(f.delivery.arrived(5, 3, 4) == Arrival::kDuplicate);
  CHECK(f.delivery.arrived(5, 2, 4) == Arrival::kDuplicate);
  CHECK(f.delivery.arrived(5, 4, 1) == Arrival::kNew);
}

TEST_CASE(
    "reliable delivery: the escrow toward a partner whose life ended is lost, not reclaimed") {
  Fixture f;
  f.send(2, 0.25);
  f.send(3, 0.125);
  f.send(2, 0.0625);
  const std::uint64_t toFour = f.send(4, 0.03125);
  f.ack(4, {toFour});
  f.delivery.merged(3, 1, 0.5);
  // Peer 2 left the view: its escrow is lost (it may have merged it), and a late ack from it
  // changes nothing.
  const std::vector<PeerId> members{1, 3, 4};
  f.delivery.loseAllBut(members);
  CHECK(f.delivery.lost() == 0.3125);
  CHECK(f.delivery.lostTo() == std::map<PeerId, double>{{2, 0.3125}});
  CHECK(f.delivery.escrowTo() == std::map<PeerId, double>{{3, 0.125}});
  f.ack(2, {1, 3});
  CHECK(f.delivery.ackedBy() == std::map<PeerId, double>{{4, 0.03125}});
  // Peer 3 restarted: the escrow toward its previous life is lost too, what that life merged and
  // acknowledged is forgotten, and the new life's transfer 1 is new (not a duplicate of the old
  // one's); what was lost toward it stays counted.
  f.delivery.restarted(3);
  CHECK(f.delivery.empty());
  CHECK(f.delivery.lost() == 0.4375);
  CHECK(f.delivery.lostTo() == std::map<PeerId, double>{{2, 0.3125}, {3, 0.125}});
  CHECK(f.delivery.mergedFrom().empty());
  CHECK(f.delivery.arrived(3, 1, 1) == Arrival::kNew);
  // The ledger: everything sent is acknowledged or lost.
  CHECK(f.delivery.lost() + f.delivery.ackedBy().at(4) == 0.46875);
}

TEST_CASE(
    "reliable delivery: escrow buffers are reused once nothing holds them, dropped at the end") {
  Fixture f;
  const std::uint64_t a = f.send(2, 0.5);
  const kernels::Buffer<float>* buffer = f.delivery.transfer(a).model.get();
  f.ack(2, {a});
  const std::uint64_t b = f.send(2, 0.25);
  CHECK(f.delivery.transfer(b).model.get() == buffer);
  // A buffer the transport still holds (a send in flight) is not written again.
  const auto held = f.delivery.transfer(b).model;
  f.ack(2, {b});
  const std::uint64_t c = f.send(2, 0.125);
  CHECK(f.delivery.transfer(c).model.get() != held.get());
  // release(): no model left to send, the transfer still in escrow (and still due).
  f.delivery.release();
  CHECK(f.delivery.transfer(c).model == nullptr);
  CHECK(f.delivery.escrowed() == 0.125);
  CHECK(f.delivery.due(t0 + kAfter, kAfter) == Ids{c});
}

}  // namespace
}  // namespace gossamer::algorithms
