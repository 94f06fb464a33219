// sparknet: decentralized synchronous model averaging through a master (Moritz, Nishihara, Stoica
// and Jordan, "SparkNet: Training Deep Networks in Spark", ICLR 2016). Langer et al. (seeds/003)
// figure 7 and section 3.3.2; the rule is algorithms/README.md's "sparknet".
//
//   communication    star: every tau steps, workers -> master (w_i), master -> workers (w~)
//   messages / step  1 sent and 1 received per tau steps at a worker; n-1 each way at the master
//   bytes on wire    |w| x 4 each way per tau steps at a worker, (n-1) x |w| x 4 at the master
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
// warning naming its sender, counted in "sparknet.refused") and treated as one that did not come.
// After a membership change the next round uses the new view's master. The run's last round is in
// finish() when the step count is not a multiple of tau.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/periodic_averaging.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct SparknetOptions : PeriodicAveragingOptions {
  template <typename Bind>
  void bind(Bind& b) {
    b("tau", tau, "local steps between averaging rounds (tau <= 10 converges best)");
    b("reset-optimizer", resetOptimizer,
      "zero the local optimizer's state (momentum) at every round instead of keeping it");
  }
  void validate() const { PeriodicAveragingOptions::validate("sparknet"); }
};

class Sparknet final : public PeriodicAveraging {
 public:
  explicit Sparknet(SparknetOptions options) : PeriodicAveraging(options) {}
  std::string name() const override { return "sparknet"; }
  void setup(engine::PeerContext& ctx) override;

  // Message kinds: a worker's model for the master, and the master's average.
  static constexpr std::uint32_t kModel = 1;
  static constexpr std::uint32_t kAverage = 2;

 protected:
  void average(engine::PeerContext& ctx, std::uint64_t round) override;

 private:
  void master(engine::PeerContext& ctx, std::uint64_t round);
  void worker(engine::PeerContext& ctx, std::uint64_t round);

  engine::PeerId master_ = 0;
};

}  // namespace gossamer::algorithms
