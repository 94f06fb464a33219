// sparknet: decentralized synchronous model averaging through a master (Moritz, Nishihara, Stoica
// and Jordan, "SparkNet: Training Deep Networks in Spark", ICLR 2016). Langer et al. (seeds/003)
// figure 7 and section 3.3.2; the rule is algorithms/README.md's "sparknet".
//
//   communication    star: every tau steps, workers -> master (w_i), master -> workers (w~);
//                    compressed, the changes d_i and their mean instead (see below)
//   messages / step  1 sent and 1 received per tau steps at a worker; n-1 each way at the master
//                    (compressed, plus one to itself that stays in the process)
//   bytes on wire    |w| x 4 each way per tau steps at a worker, (n-1) x |w| x 4 at the master;
//                    compressed, the codec's share of that (int8: about a quarter)
//   staleness        none: a round waits for its models, up to a deadline, and averages those
//                    that came
//
// The master is the root of the graph's tree: with the default topology "star", its center (the
// smallest member id unless --star-center says otherwise); it is also a worker. Round r (after
// local step r tau):
//   worker i:  send w_i to the master; wait (2 x comm timeout) for w~; w_i = w~
//   master:    wait (comm timeout) for the round's models; w~ = mean of those that came, its own
//              included (one fused weightedSum per 15 models); send w~ to every worker; w = w~
// Every worker restarts from w~ and keeps its own optimizer state (periodic_averaging.h). A worker
// that gets no w~ in time keeps its own model for that round; a model that misses the master's
// deadline is left out of that round's average (its worker still adopts w~ if it comes). A model
// or an average of the wrong size or with a non-finite value is refused (engine::acceptMessage: a
// warning naming its sender, counted in "sparknet.refused") and treated as one that did not come;
// so is, under the run's NormBound (--max-norm-ratio), one whose model (a - d for a change d) is
// far from w_i ("sparknet.outliers").
// After a membership change the next round uses the new view's master. The run's last round is in
// finish() when the step count is not a multiple of tau.
//
// Time-boxed (round-seconds, algorithms/time_box.h): a round lasts a time instead of tau steps,
// each peer taking the steps that fit, and w_i = sum n_i w_i / sum n_i, the run ending at the
// cluster's step budget: local-sgd's time-boxed round (periodic_averaging.h). It goes without the
// master, by the direct all-reduce of [n_i w_i, tail]: every member must agree on the round's
// steps, spend and length, which the all-reduce gives each bit for bit, where a master's reply
// would be one more message to agree on and a round's wait for the slowest hop through it.
//
// Compressed (--compress): a round sends the model's change since the last average,
// d_i = a - w_i with a the average every peer adopted last (its anchor), and the master answers
// with the mean change, both ways through the codec with error feedback, as DoubleSqueeze does
// (async_allreduce.h, "Compression"): each worker keeps a residual for its changes, the master one
// for its means. The master sums in float32 (its own d exactly, the decoded d_j of the workers
// that came), sends the mean to every worker and to itself, and every peer, the master included,
// sets w = a - decode(mean) and a = w from the same bits. That needs the same a on every peer, so
// the first round after setup() (the start, a membership change) and a peer's round after one that
// failed for it (no usable average) send the models in float32, and their average becomes a.
// Each message says which it carries (its integers[0]: kModelForm or kChangeForm). When any
// contribution is a model, or the master has no anchor, the master averages models (a change d_j
// counts as the model a - d_j when the master has an anchor, else it is left out, counted in
// "sparknet.ignored") and answers with that average in float32, so every peer re-anchors
// ("sparknet.anchors"). A worker without an anchor that gets a mean change (its model missed the
// master's deadline) keeps w_i ("sparknet.unanchored").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/periodic_averaging.h"
#include "engine/algorithm.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

struct SparknetOptions : PeriodicAveragingOptions {
  template <typename Bind>
  void bind(Bind& b) {
    b("tau", tau,
      "local steps between averaging rounds, or auto: the fewest (4-64) that keep the round's "
      "exchange within 5% of the time, from what the peers measure (tau <= 10 converges best)");
    b("reset-optimizer", resetOptimizer,
      "zero the local optimizer's state (momentum) at every round instead of keeping it");
    b("round-seconds", roundSeconds,
      "bound each round by time instead of tau steps: seconds, auto (tau x the members' mean "
      "step time; with tau auto, 19 x the round's measured exchange) or off; each peer takes the "
      "steps that fit, the average weights each model by "
      "its steps (through an all-reduce, not the master), and the run ends when the cluster has "
      "taken the steps of an even run");
    b("quorum", quorum,
      "time-boxed rounds: the fewest members a round merges (all, a count, or a fraction in "
      "(0, 1)); a member not ready when the round's time is up joins the next round instead of "
      "holding the others");
  }
  void validate() const { PeriodicAveragingOptions::validate("sparknet"); }
};

class Sparknet final : public PeriodicAveraging {
 public:
  explicit Sparknet(SparknetOptions options)
      : PeriodicAveraging(options, "sparknet",
                          {.exchange = Exchange::kMaster, .low = 4, .high = 64, .knob = "tau"}) {}
  std::string name() const override { return "sparknet"; }
  void setup(engine::PeerContext& ctx) override;

  // Message kinds: a worker's model (or change) for the master, and the master's average (or mean
  // change).
  static constexpr std::uint32_t kModel = 1;
  static constexpr std::uint32_t kAverage = 2;
  // Compressed runs: what a message of either kind carries, in its integers[0].
  static constexpr std::uint64_t kModelForm = 0;   // a model, float32
  static constexpr std::uint64_t kChangeForm = 1;  // a change from the anchor, through the codec

 protected:
  void average(engine::PeerContext& ctx, std::uint64_t round) override;

 private:
  void master(engine::PeerContext& ctx, std::uint64_t round);
  void worker(engine::PeerContext& ctx, std::uint64_t round);
  // Compressed, at the master when every contribution is a change: sends the mean change (the
  // master's own `change_` and the workers' `changes`) to every worker and to itself.
  void sendMeanChange(engine::PeerContext& ctx, std::uint64_t round,
                      std::span<const engine::PeerId> workers,
                      const std::vector<engine::DeviceView>& changes);
  // Applies the master's answer to this round (nothing when none came): adopts an average, or
  // w = a - mean change; un-anchors when there is nothing it can use.
  void receive(engine::PeerContext& ctx, const engine::GatherResult& got);
  // The form of a contribution or answer that acceptMessage passed; nullopt (refused, counted)
  // when it is neither form.
  std::optional<std::uint64_t> formOf(engine::PeerContext& ctx,
                                      const engine::Incoming& message) const;
  // change_ = anchor_ - params.
  void computeChange(engine::PeerContext& ctx);
  // Under the run's NormBound: whether the model `message` stands for (in `form`) is near w_i;
  // else it is refused as an outlier (engine/algorithm.h).
  bool withinBound(engine::PeerContext& ctx, const engine::Incoming& message, std::uint64_t form);
  // anchor_ = params, after adopting a float32 average.
  void anchor(engine::PeerContext& ctx);
  // A residual of the model's size for error feedback (allocated zero the first time), or an
  // empty span when the run has none.
  std::span<float> feedback(engine::PeerContext& ctx, kernels::Buffer<float>& residual);

  engine::PeerId master_ = 0;
  // Compressed: the average every peer adopted last, whether this peer holds it, this peer's
  // change from it (at the master: the mean change), and the error feedback of the changes this
  // peer sends and of the mean changes it sends as the master.
  kernels::Buffer<float> anchor_, change_, residual_, meanResidual_;
  bool anchored_ = false;
};

}  // namespace gossamer::algorithms
