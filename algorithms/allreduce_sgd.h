// allreduce-sgd: synchronous data-parallel SGD with the gradient averaged by a ring all-reduce,
// the centralized synchronous baseline (Langer et al. (seeds/003) sections 3.3.1 and 3.4.1,
// figure 13 right and footnote 3; algorithms/README.md, "allreduce-sgd").
//
//   communication    ring all-reduce of g every step (ring_allreduce.h), synchronous
//   messages / step  2 (n-1) x pipeline per peer
//   bytes on wire    2 (n-1)/n x |w| x 4 per step and peer
//   staleness        none: every step waits for every peer's gradient, up to a deadline
//
// Every step, on every peer:
//   g_i = gradient of this peer's next mini-batch at w
//   g   = (1/n) sum_i g_i     (ring all-reduce into a scratch buffer, then copied into grads)
//   w   = optimizer step of w with g (the peer's local optimizer, the same on every peer)
// The all-reduce hands every peer the same bits, so with the same initial w and optimizer state
// (the run seed gives both) the peers stay bit-identical, and the run is one SGD on the
// concatenation of the n mini-batches (exactly, when they are equally sized). When the all-reduce
// fails (a neighbour missing or gone), the peer applies its own g_i for that step and the next
// step uses the new view; the peers then differ by that step's update, and nothing
// re-synchronises them: with plain SGD the difference stays as it is; with momentum the
// velocities differ too, and while that difference decays (by mu a step) it goes on moving the
// models apart, to 1 / (1 - mu) times the first step's difference; Adam's moments differ for
// good. A chunk of the wrong size or with a non-finite value is refused (ring_allreduce.h,
// "allreduce-sgd.refused") and fails the round the same way.
//
// Backup workers (--allreduce-sgd.backups k; Chen et al. 2016): a step goes on with the first
// n - k gradients that reach each chunk's owner (async_allreduce.h, "Backup workers"), the late
// ones dropped, so one slow peer no longer sets everyone's pace. Every member still applies the
// same bits: the mean travels with a tail of one flag per member, 1 from each contributor, so
// that the members of a complete round read the same list of who made it in; they own the next
// round's chunks (after a failed round or at the start, every member does). A member that finds
// the others already a round ahead of its step (it took longer) does not compute a gradient that
// would come too late: it takes that round's result as it is, with this step's learning rate,
// and so stays bit-identical; once level with them it computes again. A member more than the
// kept rounds behind waits out the comm timeout and realigns like any lockstep peer.
//
// The ring's order (--allreduce-sgd.ring-order network, the default): the members are placed
// around the ring so that its slowest hop is as fast as it can be, from the round trips and
// bandwidths they measured, surveyed at agreed steps so that every member uses the same order
// (network_ring.h); `id` keeps the sorted ids. A failed round returns to the id order until the
// next survey.
//
// Compressed (--compress): the gradients go through the direct all-reduce instead of the ring
// (async_allreduce.h), whose contributions carry error feedback and whose reduced pieces reach
// every member, the owner included, as the same decoded bits; a ring would re-encode what it
// forwards, and the members' copies would drift apart in the last bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/async_allreduce.h"
#include "algorithms/network_ring.h"
#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

inline constexpr std::size_t kMaxBackups = 1024;

struct AllreduceSgdOptions {
  std::size_t pipeline = 4;           // sub-chunks per ring chunk
  std::size_t backups = 0;            // backup workers: gradients a step may go without
  std::string ringOrder = "network";  // the ring's order: network or id
  std::uint64_t ringSurvey = 256;     // steps between surveys of the network (network_ring.h)

  template <typename Bind>
  void bind(Bind& b) {
    b("pipeline", pipeline,
      "sub-chunks per ring all-reduce chunk, sent back to back so transfer and reduction overlap "
      "(1-16)");
    b("backups", backups,
      "backup workers: each step goes on with the first n - backups gradients, the late ones "
      "dropped (0: every step waits for every peer; at most n - 1 are used)");
    b("ring-order", ringOrder,
      "the ring's order: network (the members placed so that its slowest hop is as fast as it "
      "can be, from the round trips and bandwidths they measured) or id");
    b("ring-survey", ringSurvey,
      "steps between the members' surveys of the network for the ring's order (also at steps 8, "
      "16, 32, ... before the first)");
  }
  void validate() const;
};

class AllreduceSgd final : public engine::Algorithm {
 public:
  explicit AllreduceSgd(AllreduceSgdOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "allreduce-sgd"; }
  bool lockstep() const override { return true; }  // rounds matched by step
  void setup(engine::PeerContext& ctx) override;
  double step(engine::PeerContext& ctx) override;

  // Message kinds of the all-reduce: the ring's, and the direct one's when compressing.
  static constexpr std::uint32_t kGradient = 1;
  static constexpr std::uint32_t kCompressedGradient = 2;
  static constexpr std::uint32_t kBackupGradient = 3;
  static constexpr std::uint32_t kRingSurvey = 4;
  // Rounds a member that fell behind keeps the others' results of (each the gradient's size).
  static constexpr std::size_t kBackupRoundsKept = 8;

 private:
  // The gradients' mean by the direct all-reduce with compressed pieces (async_allreduce.h,
  // "Compression"), started and awaited at once, into mean_.
  RingOutcome averageCompressed(engine::PeerContext& ctx);
  // A step with backup workers (see above).
  double stepWithBackups(engine::PeerContext& ctx);

  AllreduceSgdOptions options_;
  kernels::Buffer<float> mean_;  // the all-reduce's output
  std::unique_ptr<AsyncAllReduce> compressed_;
  std::unique_ptr<AsyncAllReduce> backup_;
  std::unique_ptr<NetworkRing> ring_;   // ring-order network
  std::vector<engine::PeerId> owners_;  // the last complete round's contributors
  double lastLoss_ = 0;                 // what a step without a gradient reports
};

}  // namespace gossamer::algorithms
