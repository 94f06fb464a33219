// dpsgd: decentralized parallel SGD (Lian, Zhang, Zhang, Hsieh, Zhang and Liu, "Can
// Decentralized Algorithms Outperform Centralized Algorithms? A Case Study for Decentralized
// Parallel Stochastic Gradient Descent", NeurIPS 2017, algorithm 1). Langer et al. (seeds/003)
// figure 15; the rule is algorithms/README.md's "dpsgd".
//
//   communication    synchronous neighbour exchange: every step, w_i to each out-neighbour of
//                    the topology (ring by default), then a wait for each in-neighbour's w_j
//   messages / step  out-degree (2 on the ring), each one model
//   bytes on wire    out-degree x |w| x 4 per step and peer, plus a small header per message;
//                    compressed, the codec's share of that (see "Compressed")
//   staleness        none: round t mixes round-t models only; a model that misses the deadline
//                    (--comm-timeout, or dpsgd.timeout) is left out of its round
//   invariant        with lr 0 and doubly stochastic W (checked), the network mean of w never
//                    changes
//   paper            Lian et al. 2017, algorithm 1 (figure 15 of Langer et al.)
//
// Step t of peer i (figure 15, lines 3-7):
//   send w_i,t to out(i);  g_i = grad on w_i,t;  await w_j,t from every j in in(i);
//   w_i,t+1/2 = sum_{j in in(i) + i} W_ij w_j,t          (one fused weightedSum)
//   w_i,t+1   = local optimizer step of w_i,t+1/2 with g_i   (ctx.applyOptimizer())
// W is the topology's mixing matrix for this step (ctx.graph(): any topology, directed and
// time-varying ones included). The local optimizer is the one the user chose (--optimizer sgd,
// momentum, nesterov or adam, with its learning rate, schedule and weight decay), each peer
// keeping its own state. With --optimizer sgd and no weight decay this is the paper's rule
// exactly; with momentum it is the DSGDm baseline of Lin et al. (ICML 2021) and the local
// momentum of SGP (Assran et al., ICML 2019); weight decay applies to w_i,t+1/2.
//
// dpsgd.plain true applies the paper's rule as written, whatever --optimizer says, as ONE fused
// weightedSum over (W_ii - eta wd, w_i), (W_ij, w_j)..., (-eta, g_i):
//   w_i,t+1 = sum_j W_ij w_j,t - eta (g_i + wd w_i,t)
// with eta the local optimizer's learning rate and wd its weight decay; its momentum or Adam
// state is not used (a warning in the log says so).
//
// Mixing weights. The mean of the models is conserved (and the consensus is the average) only
// when W is doubly stochastic, which every built-in topology is except --mixing uniform on an
// irregular graph (star, tree, a hypercube of n not a power of two, most edge lists): there the
// consensus drifts toward the high-degree peers. The first setup() refuses such a W, naming the
// fix (--mixing metropolis); a later one (the membership changed mid-run and the graph with it)
// warns and sets the metric "dpsgd.not_doubly_stochastic" to 1 instead of stopping the run.
//
// Received models are checked (engine::acceptMessage): a model of the wrong size or with a
// non-finite value is refused with a warning naming its sender ("dpsgd.refused") and left out
// of the round like a missing one; so is, under the run's NormBound (--max-norm-ratio), a model
// far from w_i ("dpsgd.outliers"; compressed: an estimate far from x^_i, public_estimates.h).
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
// Compressed (--compress): CHOCO-SGD (Koloskova, Stich and Jaggi, ICML 2019, algorithm 2) over
// the public estimates of public_estimates.h. Every peer keeps x^_i, the estimate of its model
// that its neighbours hold, and a copy of each in-neighbour's x^_j (the same bits as j's). Step t:
//   send q_i = C(w_i,t - x^_i) to out(i);  g_i = grad on w_i,t;  await q_j from every j in in(i);
//   x^_j += q_j for j in in(i) + i                            (the decoded q, the same bits)
//   w_i,t+1/2 = w_i,t + gamma sum_{j in in(i)} W_ij (x^_j - x^_i)   (one fused weightedSum)
//   w_i,t+1   = local optimizer step of w_i,t+1/2 with g_i
// as dpsgd's line order (the gradient at w_i,t, overlapped with the exchange; the paper steps
// before it compresses). With C the identity and gamma 1 it is the rule above. The first message
// after setup (the start, a membership change) is an anchor: w itself in float32, x^ = w on both
// sides ("dpsgd.anchors"); a model that misses a round (late, refused, lost) leaves its sender's
// estimate unknown here (counted as W_ij = 0, "dpsgd.estimate_misses") until the sender, asked
// in this peer's next messages, sends an anchor. The estimates carry what C drops to the next
// differences, so --error-feedback keeps no residual here. gamma (dpsgd.gamma) defaults to 1 for
// the dense codecs and to about the share a sparse codec sends (larger ones diverge: see
// gammaFor). A symmetric W (an undirected topology) is required, since requests for anchors
// travel back along the edges: a directed one is refused at the start (a later view that is one
// sends float32 models, with a warning). Memory: (2 + in-degree) x |w| in the Compute, plus the
// difference's scratch.
//
// Degree. weightedSum takes at most 16 inputs; a peer with more in-neighbours than fit in one
// pass (15, or 14 with dpsgd.plain) mixes in further passes of 15 models each, accumulating in
// w_i (any degree works; one pass per 15 extra neighbours).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/public_estimates.h"
#include "engine/algorithm.h"
#include "kernels/codec.h"

namespace gossamer::algorithms {

struct DpsgdOptions {
  bool plain = false;  // true: the paper's fused rule, ignoring --optimizer's rule and state
  double timeout = 0;  // seconds to wait for the neighbours' models; 0: --comm-timeout
  double gamma = 0;    // CHOCO-SGD's consensus step size with --compress; 0: gammaFor(codec)

  template <typename Bind>
  void bind(Bind& b) {
    b("plain", plain,
      "true: the paper's plain rule w = sum_j W_ij w_j - lr (g + wd w) in one fused kernel, "
      "whatever --optimizer says (its momentum or Adam state unused); false: mix, then step with "
      "--optimizer (sgd, momentum, nesterov or adam)");
    b("timeout", timeout,
      "seconds to wait for the in-neighbours' models each step before mixing those present "
      "(0: --comm-timeout)");
    b("gamma", gamma,
      "with --compress: the consensus step size of CHOCO-SGD's rule w += gamma sum_j W_ij (x^_j - "
      "x^_i), in (0, 1] (0: 1 for fp16, bf16, int8 and int4, twice the fraction for top-k, the "
      "fraction for random-k)");
  }
  void validate() const;
  // gamma, or its default for `codec` when gamma is 0.
  double gammaFor(const kernels::Codec& codec) const;
};

class Dpsgd final : public engine::Algorithm {
 public:
  explicit Dpsgd(DpsgdOptions options) : options_(options), estimates_("dpsgd") {}
  std::string name() const override { return "dpsgd"; }
  bool lockstep() const override { return true; }  // rounds matched by step
  // Checks the mixing matrix (see the header comment) and, with dpsgd.plain, warns once when
  // --optimizer has state that the plain rule leaves unused.
  void setup(engine::PeerContext& ctx) override;
  // One round of figure 15: send, gradient, await, mixing and the local step.
  double step(engine::PeerContext& ctx) override;

  // Message kind: w_i,t, tagged Tags::forRound(kModel, t).
  static constexpr std::uint32_t kModel = 1;

 private:
  // Line 6: the in-neighbours' models of the round `tag` that came by the deadline and passed
  // acceptMessage (the others are counted and left out); differences only when `compressed`.
  std::vector<engine::Incoming> awaitModels(engine::PeerContext& ctx, std::uint64_t tag,
                                            bool compressed);
  // Line 7: w_i = sum_j W_ij w_j over self and `models` (rows renormalised over those present),
  // minus eta (g_i + wd w_i) in the same passes when `descent` (dpsgd.plain).
  void mix(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models, bool descent);
  // Compressed: the estimates take in `models` (and forget the in-neighbours missing from it),
  // then w_i += gamma sum_j W_ij (x^_j - x^_i) over
  // the in-neighbours whose estimate is known, minus eta (g_i + wd w_i) when `descent`.
  void mixEstimates(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models,
                    bool descent);
  // Whether this round compresses: a codec in the run and an undirected graph (see "Compressed").
  bool choco(engine::PeerContext& ctx);
  // Throws (first setup) or warns (later ones) when the mixing matrix is not doubly stochastic.
  void checkMixing(engine::PeerContext& ctx);

  DpsgdOptions options_;
  bool setUp_ = false;
  bool warnedPlain_ = false;
  bool warnedDirected_ = false;
  PublicEstimates estimates_;
};

}  // namespace gossamer::algorithms
