// Reliable delivery of weighted transfers: what makes a push of mass (gosgd.h) land exactly once
// over links that lose, repeat and delay messages, between peers that may die or restart. It
// keeps the state and says what is due; the caller composes and sends the messages (the ids,
// floors and acks are integers of its own wire format) and gives the weights their meaning.
//
// The contract. Sender side:
//   escrow      escrow() numbers a transfer (1, 2, ... over the life of this object, whatever the
//               receiver) and keeps it, weight and model, in ESCROW until its receiver acknowledges
//               the id: the weight is still the sender's mass, not given away. The caller writes
//               the model before it first sends it from the escrow, and never again, so every
//               copy of a transfer carries the same model and weight (a receiver that merged the
//               first copy and lost only the ack merges nothing new).
//   retransmit  a transfer not acknowledged `after` since it was last sent is due: due() returns
//               it once, marks it resent and overdue (its receiver may be dead), and it is due
//               again `after` later. resend() makes the transfers to one receiver due at once
//               (it asked for them: they are resent, not overdue).
//   ack         acked() releases the escrow of each id acknowledged by its own receiver (to
//               ackedBy); an ack of an id released or unknown, or from another peer, changes
//               nothing.
//   floor       floor(to, id): the smallest unacknowledged id toward `to`, at most `id`. Sent with
//               a transfer, it lets the receiver forget every id below it (they are never sent
//               again).
//   in flight   allows(bytes): a new transfer of `bytes` fits the bound on the bytes in escrow
//               (InflightBound, below), always when nothing is in escrow. The bound is fed by the
//               acks' round trips (escrow() and acked(); a resent transfer gives no sample).
//   life ends   lose(to) (a peer that left the view) moves the escrow toward it to the lost weight
//               (lostTo): never reclaimed, since the receiver may have merged it before it went.
//               restarted(peer) (a later life of it spoke) loses the escrow toward it the same
//               way and forgets what the previous life merged (the new life numbers from 1: its
//               ids are not duplicates) and the weights merged from it and acknowledged by it.
// Receiver side:
//   exactly once  arrived(from, id, floor) says what to do with a transfer: kNew (merge it, then
//               merged(), and acknowledge it), kDuplicate (acknowledge it again, do not merge:
//               the first copy was merged and its ack lost; every id below the sender's floor is
//               one), or kJudged (judged() before: refused for good, dropped unseen, no ack).
//               A transfer neither merged nor judged (say, not decodable) stays new.
// So, under lost transfers and lost acks, a receiver that lives merges every transfer exactly
// once, and the weight is the sender's (escrow) until the ack, the receiver's after the merge:
// both are counted only between the merge and the ack's arrival (mergedFrom against ackedBy tells
// an observer of both sides). Compute thread only; times are passed in (tests use a fake clock).
//
// Bytes in flight. Every unacknowledged transfer holds a model copy in escrow and, while it is
// queued, a share of the link. How many may be outstanding depends on the link and the model
// together: on `geo` (212 ms round trip at 300 Mbit/s) the link holds about 8 MB in flight, 20
// transfers of a 100k-parameter MLP, but less than one of an 11M-parameter ResNet. A fixed count is
// therefore either too few (a small model on a long fat link: draws skipped while the link idles)
// or too many (a large model: transfers queue behind each other, every one of them staler on
// arrival, and their copies pile up in memory). So a transfer goes ahead only when the bytes in
// escrow plus its own fit the bound (always when nothing is in flight: the floor is one transfer).
// A fixed bound (maxInflightBytes > 0) is taken as such; 0 estimates it as the bandwidth-delay
// product, the way BBR does (Cardwell et al., "BBR: congestion-based congestion control", ACM
// Queue 2016), from the acks:
//   rtt    the shortest ack round trip of the last 10 s (a transfer sent once: the ack of a resent
//          one matches no single send); the minimum, not an average, so that transfers queued
//          behind each other do not inflate it and, with it, the bound;
//   rate   the highest delivery rate of the last 10 s: the bytes acknowledged while a transfer was
//          in flight, over its round trip. The maximum, not an average: the rate is measured
//          through the bound itself (a sender limited to one transfer delivers one per round
//          trip), and an average of the slower samples (acks that waited for the receiver's step
//          boundary, or for jitter) times the minimum round trip stays below one transfer, so the
//          bound would never grow (on `geo`, an EWMA held it at 1.1-1.4 transfers and skipped
//          half of gosgd's draws);
//   bound  2 x rate x rtt (the gain of 2 lets the estimate grow while more is sent: k transfers
//          in flight measure k per round trip and allow 2k), at most 256 MiB; 4 transfers until
//          the first sample. At least one transfer, and for small models as many as fit in 1 MiB
//          up to 4: on a loaded host their acks' round trips are mostly scheduling delays, so the
//          estimate is noise, and a bound of one or two transfers of a few hundred kB would skip
//          draws (mixing) to save a link nothing.
// The round trip includes the receiver's wait for its next step boundary (acks go out there): that
// is part of the pipe a transfer occupies.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "algorithms/spare_buffers.h"
#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

// The bound on the bytes of unacknowledged transfers (see "Bytes in flight" above). Times are
// passed in, so that tests drive it with a fake clock. Compute thread.
class InflightBound {
 public:
  // `fixedBytes` > 0: that bound (still at least one transfer); 0: the estimate.
  explicit InflightBound(std::int64_t fixedBytes = 0) : fixed_(fixedBytes) {}

  // Transfer `id` of `bytes` left at `now` (its first send).
  void sent(std::uint64_t id, std::size_t bytes, engine::Clock::time_point now);
  // Its ack came at `now`. `resent`: it was sent more than once, so the round trip is unknown
  // (the bytes count as delivered, without a sample).
  void acked(std::uint64_t id, engine::Clock::time_point now, bool resent);
  // No ack will come (the receiver left the view).
  void forget(std::uint64_t id) { flights_.erase(id); }

  // The bound in bytes, for transfers of `transferBytes` each: at least one transfer (up to 4
  // while they fit in kSmallFloorBytes).
  std::size_t limit(std::size_t transferBytes) const;
  // Whether another transfer fits with `inflight` bytes unacknowledged.
  bool allows(std::size_t inflight, std::size_t transferBytes) const {
    return inflight == 0 || inflight + transferBytes <= limit(transferBytes);
  }
  // The estimates (0 before the first sample).
  double rttSeconds() const { return minRtt_; }
  double rateBytesPerSecond() const { return rate_; }

  static constexpr double kGain = 2;
  static constexpr std::size_t kInitialTransfers = 4;
  static constexpr std::size_t kCapBytes = std::size_t{256} << 20;
  static constexpr std::size_t kSmallFloorBytes = std::size_t{1} << 20;
  static constexpr engine::Clock::duration kWindow = std::chrono::seconds(10);

 private:
  struct Flight {
    std::size_t bytes = 0;
    engine::Clock::time_point sentAt;
    std::uint64_t deliveredAtSend = 0;
  };
  std::int64_t fixed_;
  std::map<std::uint64_t, Flight> flights_;
  std::uint64_t delivered_ = 0;  // bytes acknowledged in all
  bool sampled_ = false;
  double rate_ = 0;    // bytes per second, maximum over the window
  double minRtt_ = 0;  // seconds, minimum over the window
  engine::Clock::time_point rateAt_{}, minRttAt_{};
};

// See "The contract" above. Compute thread only.
class ReliableDelivery {
 public:
  using Clock = engine::Clock;
  using PeerId = engine::PeerId;

  // A transfer in escrow.
  struct Transfer {
    PeerId to = 0;
    double weight = 0;
    // Written by the caller before it is first sent from here, never after; shared with the
    // transport while a send of it is in flight; null after release().
    std::shared_ptr<kernels::Buffer<float>> model;
    std::uint64_t number = 0;  // the caller's: its number on a stream of estimates (0: none)
    std::size_t bytes = 0;     // what it counts against the bound
    Clock::time_point due;     // resent when no ack came by then
    bool resent = false;       // sent more than once (its ack gives no round trip)
    bool overdue = false;      // due() resent it: no ack came in time (the receiver may be dead)
  };

  // What a receiver does with a transfer that arrived (see "exactly once").
  enum class Arrival { kNew, kDuplicate, kJudged };

  // `maxInflightBytes`: the bound on the bytes in escrow (0: estimated from the acks).
  explicit ReliableDelivery(std::int64_t maxInflightBytes = 0) : bound_(maxInflightBytes) {}

  // ---- Sender side

  // Escrows a new transfer of `weight` to `to` and returns its id, for the caller to send now. Its
  // model is a buffer of `size` floats of `compute` (a spare the transport no longer holds, or a
  // new one), `bytes` count against the bound, and it is due `after` from `now`.
  std::uint64_t escrow(PeerId to, double weight, kernels::Compute& compute, std::size_t size,
                       std::size_t bytes, Clock::time_point now, Clock::duration after);
  Transfer& transfer(std::uint64_t id) { return escrow_.at(id); }
  const Transfer& transfer(std::uint64_t id) const { return escrow_.at(id); }
  // The transfers due at `now`, in id order: each marked resent and overdue, due again `after`
  // from `now`. The caller sends each again (from its model, unless released).
  std::vector<std::uint64_t> due(Clock::time_point now, Clock::duration after);
  // The transfers to `to` up to id `upTo`, in id order, to send again now (their receiver asked):
  // marked resent, not overdue, due again `after` from `now`.
  std::vector<std::uint64_t> resend(PeerId to, std::uint64_t upTo, Clock::time_point now,
                                    Clock::duration after);
  // `from` acknowledged `ids` at `now`: their escrow is released (see "ack").
  void acked(PeerId from, std::span<const std::uint64_t> ids, Clock::time_point now);
  // The smallest unacknowledged id toward `to`, `id` included.
  std::uint64_t floor(PeerId to, std::uint64_t id) const;
  // Whether a new transfer of `bytes` fits the bound on bytes in flight.
  bool allows(std::size_t bytes) const { return bound_.allows(bytesInFlight(), bytes); }
  // Whether anything is in escrow toward `to`; whether a transfer to it is overdue.
  bool owes(PeerId to) const;
  bool overdue(PeerId to) const;

  // ---- Receiver side

  // A transfer `id` from `from`, which says every id of its below `floor` was acknowledged.
  Arrival arrived(PeerId from, std::uint64_t id, std::uint64_t floor);
  // Merged (to be acknowledged): its copies are duplicates from now on.
  void merged(PeerId from, std::uint64_t id, double weight);
  // Refused for good: its copies are dropped unseen.
  void judged(PeerId from, std::uint64_t id);

  // ---- Lives

  // The escrow toward `to` (toward every peer not in `members`) is lost with it.
  void lose(PeerId to);
  void loseAllBut(std::span<const PeerId> members);
  // A later life of `peer` spoke: see "life ends".
  void restarted(PeerId peer);
  // Drops every buffer (spares and escrowed models) once nothing more is sent (finish, leave).
  void release();

  // ---- The ledger

  double escrowed() const;  // the weight in escrow
  double lost() const { return lost_; }
  std::size_t size() const { return escrow_.size(); }
  bool empty() const { return escrow_.empty(); }
  std::size_t bytesInFlight() const;
  std::map<PeerId, double> escrowTo() const;
  // Cumulative weights merged from each peer and acknowledged by it (its current life), and
  // lost toward it.
  const std::map<PeerId, double>& mergedFrom() const { return mergedFrom_; }
  const std::map<PeerId, double>& ackedBy() const { return ackedBy_; }
  const std::map<PeerId, double>& lostTo() const { return lostTo_; }
  const InflightBound& bound() const { return bound_; }
  // Transfers sent (new ones) and resent by due() since the start.
  std::uint64_t sends() const { return sends_; }
  std::uint64_t retransmits() const { return retransmits_; }

 private:
  // What was merged from one sender: every id below `floor`, and those in `ids`.
  struct Merged {
    std::uint64_t floor = 0;
    std::set<std::uint64_t> ids;
    std::set<std::uint64_t> judged;  // refused for good
  };
  // Moves the escrow toward the peers `which` picks to the lost weight.
  template <typename Which>
  void loseIf(Which which);

  InflightBound bound_;
  std::uint64_t nextId_ = 1;
  std::map<std::uint64_t, Transfer> escrow_;
  SpareBuffers spare_{4};  // escrow buffers to reuse
  std::map<PeerId, Merged> merged_;
  double lost_ = 0;
  std::map<PeerId, double> mergedFrom_, ackedBy_, lostTo_;
  std::uint64_t sends_ = 0, retransmits_ = 0;
};

}  // namespace gossamer::algorithms
