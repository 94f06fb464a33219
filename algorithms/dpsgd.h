// dpsgd: decentralized parallel SGD (Lian, Zhang, Zhang, Hsieh, Zhang and Liu, "Can
// Decentralized Algorithms Outperform Centralized Algorithms? A Case Study for Decentralized
// Parallel Stochastic Gradient Descent", NeurIPS 2017, algorithm 1). Langer et al. (seeds/003)
// figure 15; the rule is algorithms/README.md's "dpsgd".
//
//   communication    synchronous neighbour exchange: every step, w_i to each out-neighbour of
//                    the topology (ring by default), then a wait for each in-neighbour's w_j
//   messages / step  out-degree (2 on the ring), each one model
//   bytes on wire    out-degree x |w| x 4 per step and peer, plus a small header per message
//   staleness        none: round t mixes round-t models only; a model that misses the deadline
//                    (--comm-timeout, or dpsgd.timeout) is left out of its round
//   invariant        with lr 0 and doubly stochastic W (checked), the network mean of w never
//                    changes
//   paper            Lian et al. 2017, algorithm 1 (figure 15 of Langer et al.)
//
// Step t of peer i (figure 15, lines 3-7):
//   send w_i,t to out(i);  g_i = grad on w_i,t;  await w_j,t from every j in in(i);
//   w_i,t+1 = sum_{j in in(i) + i} W_ij w_j,t - eta (g_i + wd w_i,t)
// as ONE fused weightedSum over (W_ii - eta wd, w_i), (W_ij, w_j)..., (-eta, g_i). W is the
// topology's mixing matrix for this step (ctx.graph(): any topology, directed and time-varying
// ones included), eta the local optimizer's learning rate and wd its weight decay (0 by default,
// and then this is the paper's rule exactly). Nothing else of the local optimizer is used.
//
// Momentum. D-PSGD is plain SGD, and that is the default: whatever --optimizer says (momentum
// is gossamer-peer's default), dpsgd applies the rule above and leaves the optimizer's velocity
// alone, with a warning in the log. dpsgd.momentum true selects the local-momentum variant (the
// DSGDm baseline of Lin et al., ICML 2021, and the local momentum of SGP, Assran et al., ICML
// 2019): with --optimizer momentum or nesterov each peer keeps its own velocity v_i (the local
// optimizer's "velocity" buffer) and steps along it:
//   v_i = mu v_i + g_i + wd w_i,t                                 (one weightedSum)
//   momentum:  w_i,t+1 = sum_j W_ij w_j,t - eta v_i                (one weightedSum)
//   nesterov:  w_i,t+1 = sum_j W_ij w_j,t - eta (g_i + wd w_i,t + mu v_i)
// The mixing part, and so the lr-0 invariant and the consensus, stay the paper's; on one peer the
// variant is exactly momentumStep. With --optimizer sgd the variant is the plain rule. Adam does
// not fuse into the mixing (a per-coordinate step with two state buffers): setup() rejects it.
//
// Mixing weights. The mean of the models is conserved (and the consensus is the average) only
// when W is doubly stochastic, which every built-in topology is except --mixing uniform on an
// irregular graph (star, tree, a hypercube of n not a power of two, most edge lists): there the
// consensus drifts toward the high-degree peers. The first setup() refuses such a W, naming the
// fix (--mixing metropolis); a later one (the membership changed mid-run and the graph with it)
// warns and sets the metric "dpsgd.not_doubly_stochastic" to 1 instead of stopping the run.
//
// Missing models. A neighbour whose model does not arrive by the deadline, or that leaves the
// view, is left out of the round, and the weights of the models present are renormalised so that
// the row still sums to 1 (counted in the metrics "dpsgd.missing" and "dpsgd.partial_rounds";
// such a round does not conserve the network mean). After a membership change the runtime
// rebuilds the graph and calls setup() at the next step boundary; peers that adopt the new view
// at different steps may miss one another's model in between, which costs at most one deadline.
// Late models of finished rounds are dropped from the inbox ("dpsgd.late"). Rounds are matched
// by step number, so dpsgd assumes the members start together: a peer that joins mid-run (its
// steps start at 0) or stops early stays out of step with its neighbours, each of whose rounds
// then costs one deadline.
//
// Degree. weightedSum takes at most 16 inputs; a peer with more in-neighbours than fit in one
// pass (13 with Nesterov, 14 otherwise) mixes in further passes of 15 models each, accumulating
// in w_i (any degree works; one pass per 15 extra neighbours).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct DpsgdOptions {
  bool momentum = false;  // false: the paper's rule; true: local momentum (see above)
  double timeout = 0;     // seconds to wait for the neighbours' models; 0: --comm-timeout

  template <typename Bind>
  void bind(Bind& b) {
    b("momentum", momentum,
      "false: the paper's plain rule w = sum_j W_ij w_j - lr g whatever --optimizer says; true: "
      "with --optimizer momentum or nesterov, step along a local velocity v = mu v + g instead");
    b("timeout", timeout,
      "seconds to wait for the in-neighbours' models each step before mixing those present "
      "(0: --comm-timeout)");
  }
  void validate() const;
};

class Dpsgd final : public engine::Algorithm {
 public:
  explicit Dpsgd(DpsgdOptions options) : options_(options) {}
  std::string name() const override { return "dpsgd"; }
  // Checks the mixing matrix (see the header comment) and the local optimizer, and picks the
  // rule (plain, heavy-ball or Nesterov).
  void setup(engine::PeerContext& ctx) override;
  // One round of figure 15: send, gradient, await, fused mixing and step.
  double step(engine::PeerContext& ctx) override;

  // Message kind: w_i,t, tagged Tags::forRound(kModel, t).
  static constexpr std::uint32_t kModel = 1;

 private:
  enum class Rule { kPlain, kMomentum, kNesterov };

  // Line 6: the in-neighbours' models of the round `tag`, or those that came by the deadline.
  engine::GatherResult awaitModels(engine::PeerContext& ctx, std::uint64_t tag);
  // Line 7: w_i = sum_j W_ij w_j - eta d_i over self and `models`, in one fused pass per 15
  // neighbours (d_i by the rule).
  void mixAndDescend(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models);
  // Throws (first setup) or warns (later ones) when the mixing matrix is not doubly stochastic.
  void checkMixing(engine::PeerContext& ctx);

  DpsgdOptions options_;
  Rule rule_ = Rule::kPlain;
  std::span<float> velocity_;  // the local optimizer's, when the rule uses one
  bool warned_ = false;
  bool setUp_ = false;
};

}  // namespace gossamer::algorithms
