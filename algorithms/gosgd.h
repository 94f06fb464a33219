// gosgd: sum-weighted gossip SGD (Blot, Picard, Cord and Thome, "Gossip training for deep
// learning", 2016; the push-sum protocol of Kempe, Dobra and Gehrke, FOCS 2003). Langer et al.
// (seeds/003) figure 17; the rule is ALGORITHMS.md's "gosgd".
//
//   communication    push to one uniformly random peer of the topology, asynchronous
//   messages / step  p on average, each (w_i, alpha_i)
//   bytes on wire    p x |w| x 4 per step and peer
//   staleness        unbounded: whatever arrived is merged, weighted by its alpha
//   invariant        sum of alpha over peers and messages in flight = 1
//
// Every peer starts with alpha_i = 1/n and the same w~0. Before each local step it merges every
// received (w_j, alpha_j): w_i = (alpha_i w_i + sum_j alpha_j w_j) / (alpha_i + sum_j alpha_j) (one
// fused kernel), alpha_i += sum_j alpha_j. After the step, with probability p, it halves alpha_i
// and sends (w_i, alpha_i) to a random out-neighbour of the topology (the default topology is
// the full mesh: any peer, as in the paper).
#pragma once

#include <string>

#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct GosgdOptions {
  double p = 0.1;  // probability of gossiping after a step

  template <typename Bind>
  void bind(Bind& b) {
    b("p", p, "probability of sending (w, alpha/2) to a random peer after a step");
  }
  void validate() const;
};

class Gosgd final : public engine::Algorithm {
 public:
  explicit Gosgd(GosgdOptions options) : options_(options) {}
  std::string name() const override { return "gosgd"; }
  void setup(engine::PeerContext& ctx) override;
  void beforeStep(engine::PeerContext& ctx) override;
  void afterStep(engine::PeerContext& ctx) override;
  // Merges what is left, so that no weight is lost in the inbox.
  void finish(engine::PeerContext& ctx) override {
    beforeStep(ctx);
    ctx.metrics().set("gosgd.alpha", alpha_);
  }

  // This peer's share of the total weight.
  double alpha() const { return alpha_; }

  // Message kind: a model and its weight (scalars[0]).
  static constexpr std::uint32_t kModel = 1;

 private:
  GosgdOptions options_;
  double alpha_ = 0;
  bool started_ = false;
};

}  // namespace gossamer::algorithms
