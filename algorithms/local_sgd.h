// local-sgd: periodic model averaging without a master (algorithms/README.md, "sparknet":
// "local-sgd is the same rule with the average computed by the ring all-reduce, no master"; Langer
// et al. (seeds/003) section 3.3.2; Stich, "Local SGD converges fast and communicates little", ICLR
// 2019).
//
//   communication    ring all-reduce of w every tau steps (ring_allreduce.h), synchronous
//   messages / step  2 (n-1) x pipeline / tau per peer
//   bytes on wire    2 (n-1)/n x |w| x 4 per tau steps and peer
//   staleness        none: a round waits for its data, up to a deadline
//
// Round r (after local step r tau), on every peer:
//   w~ = (1/n) sum_i w_i   (ring all-reduce into a scratch buffer; every peer gets the same bits)
//   w_i = w~               (each peer keeps its own optimizer state; periodic_averaging.h)
// When the all-reduce fails (a neighbour missing or gone, or a chunk refused: ring_allreduce.h,
// "local-sgd.refused"), the peer keeps its own w_i for that round; the next round uses the new
// view. The run's last round is in finish() when the step count is not a multiple of tau
// (periodic_averaging.h).
//
// Time-boxed (round-seconds, algorithms/time_box.h): a round lasts a time instead of tau steps,
// each peer taking the steps that fit, and w_i = sum n_i w_i / sum n_i over the direct
// all-reduce (async_allreduce.h) of [n_i w_i, tail]; the run ends at the cluster's step budget.
//
// Compressed (--compress): a round sends the model's change since the last average,
// d_i = a - w_i with a the average every peer adopted last, through the direct all-reduce with
// error feedback (async_allreduce.h, "Compression"); the mean is w~ = a - mean(d). That needs the
// same a on every peer, so the first round after setup (the start, a membership change) and the
// round after a failed one send the models as above and set a = w~.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "algorithms/async_allreduce.h"
#include "algorithms/network_ring.h"
#include "algorithms/periodic_averaging.h"
#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

struct LocalSgdOptions : PeriodicAveragingOptions {
  std::size_t pipeline = 4;           // sub-chunks per ring chunk
  std::string ringOrder = "network";  // the ring's order: network or id

  template <typename Bind>
  void bind(Bind& b) {
    b("tau", tau,
      "local steps between averaging rounds, or auto: the fewest (4-64) that keep the round's "
      "exchange within 5% of the time, from what the peers measure (tau <= 10 converges best)");
    b("pipeline", pipeline,
      "sub-chunks per ring all-reduce chunk, sent back to back so transfer and reduction overlap "
      "(1-16)");
    b("ring-order", ringOrder,
      "the ring all-reduce's order: network (by the members' measured round trips and bandwidth, "
      "agreed at survey steps) or id (sorted peer ids)");
    b("reset-optimizer", resetOptimizer,
      "zero the local optimizer's state (momentum) at every round instead of keeping it");
    b("round-seconds", roundSeconds,
      "bound each round by time instead of tau steps: seconds, auto (tau x the members' mean "
      "step time; with tau auto, 19 x the round's measured exchange) or off; each peer takes the "
      "steps that fit, the average weights each model by "
      "its steps, and the run ends when the cluster has taken the steps of an even run");
    b("quorum", quorum,
      "time-boxed rounds: the fewest members a round merges (all, a count, or a fraction in "
      "(0, 1)); a member not ready when the round's time is up joins the next round instead of "
      "holding the others");
  }
  void validate() const;
};

class LocalSgd final : public PeriodicAveraging {
 public:
  explicit LocalSgd(LocalSgdOptions options)
      : PeriodicAveraging(options, "local-sgd",
                          {.exchange = Exchange::kRing, .low = 4, .high = 64, .knob = "tau"},
                          options.pipeline),
        pipeline_(options.pipeline),
        ringOrder_(options.ringOrder) {}
  std::string name() const override { return "local-sgd"; }
  void setup(engine::PeerContext& ctx) override;
  // With a fixed tau, the ring's own surveys (network_ring.h); then PeriodicAveraging's.
  void afterStep(engine::PeerContext& ctx) override;

  // Message kinds of the all-reduce: the ring's (models), the direct one's (compressed changes);
  // the time-boxed rounds' is PeriodicAveraging::kWeighted; the ring's surveys with a fixed tau
  // (an auto tau's surveys order the ring too).
  static constexpr std::uint32_t kAverage = 1;
  static constexpr std::uint32_t kCompressedChange = 2;
  static constexpr std::uint32_t kRingSurvey = 4;

 protected:
  void average(engine::PeerContext& ctx, std::uint64_t round) override;
  void surveyed(engine::PeerContext& ctx, const std::optional<Survey>& survey) override;

 private:
  // The round by the compressed change from the anchor; false when it failed.
  bool averageChange(engine::PeerContext& ctx, std::uint64_t round);

  std::size_t pipeline_;
  std::string ringOrder_;
  std::unique_ptr<NetworkRing> ring_;  // rounds by steps, ring-order network
  kernels::Buffer<float> mean_;        // the all-reduce's output (rounds by steps)
  kernels::Buffer<float> anchor_;      // compressed: the average every peer adopted last
  bool anchored_ = false;              // anchor_ is the same on every peer
  std::unique_ptr<AsyncAllReduce> changes_;
};

}  // namespace gossamer::algorithms
