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
// Overlapped (dpsgd.overlap K >= 1): the exchange hides behind K steps of compute. Step t sends
// w_i,t and mixes, instead of round t's models, those of round t - K, which had K steps to
// arrive, as differences, so that w_i keeps its own progress since then:
//   send w_i,t to out(i);  g_i = grad on w_i,t;  await w_j,t-K from every j in in(i);
//   w_i,t+1/2 = w_i,t + gamma sum_{j in in(i)} W_ij (w_j,t-K - w_i,t-K)
//   w_i,t+1   = local optimizer step of w_i,t+1/2 with g_i
// With a symmetric doubly stochastic W and lr 0 the network mean never changes (the differences
// of one round cancel in the sum). The delayed consensus x_t+1 = x_t + gamma (W - I) x_t-K is
// stable when gamma |lambda| < 2 sin(pi / (2 (2K + 1))) for every eigenvalue lambda of W - I
// (Levin and May's bound), and |lambda| <= 2 (1 - min_i W_ii) (Gershgorin): gamma defaults to
// 0.9 of the largest stable value, min(1, 0.9 sin(pi / (2 (2K + 1))) / (1 - min_i W_ii)), and
// dpsgd.gamma sets it. A neighbour's missing model drops its term (the round then moves the mean
// by that term). The first K steps after the start only step locally. Every peer must use the
// same K, and an undirected topology (a symmetric W) is required; with --compress it is refused.
// Memory: K + 1 snapshots of w_i in the Compute, and up to K rounds of models in flight.
//
// The ring's order (dpsgd.ring-order network, the default): when the topology's graph is a ring
// of 4 or more members, the members are placed around it by the network, as allreduce-sgd's ring
// (network_ring.h: surveyed at steps 8, 16, ... 256 and every 256, the same order on every
// member, kept only when it shortens the estimated round), so that each peer's neighbours are
// near it; ctx.placeMembers() moves them on the same step everywhere. A new placement counts as
// a view change for the estimates (anchors first) and the overlapped rule (K local steps).
//
// Degree. weightedSum takes at most 16 inputs; a peer with more in-neighbours than fit in one
// pass (15, or 14 with dpsgd.plain) mixes in further passes of 15 models each, accumulating in
// w_i (any degree works; one pass per 15 extra neighbours).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/network_ring.h"
#include "algorithms/public_estimates.h"
#include "engine/algorithm.h"
#include "kernels/codec.h"
#include "kernels/compute.h"

namespace gossamer::algorithms {

// out = sum of `inputs`, any number of them: one weightedSum when they fit, else the first
// kMaxWeightedInputs, then further passes that add (1, out) and up to 15 more. `out` may alias
// an input of the first pass only (later passes read the inputs again).
void weightedSumAny(kernels::Compute& compute, std::span<float> out,
                    std::span<const kernels::WeightedInput> inputs);

// w_i += sum_j pulls_j - (sum_j weight_j) own (the pulls gamma W_ij x_j, gamma-weighted), then
// minus eta (g_i + wd w_i) in the same passes when `descent`: the difference rules (CHOCO-SGD's
// estimates, the overlapped rule's round t - K). Nothing to do without pulls or descent.
void mixDifferences(engine::PeerContext& ctx, std::span<const kernels::WeightedInput> pulls,
                    std::span<const float> own, bool descent);

inline constexpr std::uint64_t kMaxOverlap = 1024;

struct DpsgdOptions {
  bool plain = false;         // true: the paper's fused rule, ignoring --optimizer's rule and state
  double timeout = 0;         // seconds to wait for the neighbours' models; 0: --comm-timeout
  double gamma = 0;           // the consensus step size with --compress or overlap; 0: its default
  std::uint64_t overlap = 0;  // K: mix the models of K steps before (0: this step's, the paper's)
  std::string ringOrder = "network";  // a ring topology's order: network or id

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
      "fraction for random-k); with overlap K: of the delayed rule, in (0, 1] (0: 0.9 of the "
      "largest stable step)");
    b("ring-order", ringOrder,
      "on a ring topology, the members' order around it: network (neighbours near each other, "
      "from the round trips and bandwidths the members measured, agreed at survey steps) or id "
      "(sorted peer ids)");
    b("overlap", overlap,
      "K >= 1: mix the neighbours' models of K steps before while this step computes, so that "
      "an exchange has K steps to arrive (0: wait for this step's models, the paper's rule)");
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
  static constexpr std::uint32_t kRingSurvey = 2;  // the ring order's surveys

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
  // A ring topology placed by the network (see "The ring's order"): surveys at survey steps and
  // moves the members when the agreed order changed. Every member, every step.
  void placeRing(engine::PeerContext& ctx);
  // Refuses (at the start; warns later) what the overlapped rule cannot run on: --compress, a
  // directed or asymmetric W.
  void checkOverlap(engine::PeerContext& ctx, bool first);
  // The overlapped step (dpsgd.overlap K, dpsgd_overlap.cc).
  double stepOverlapped(engine::PeerContext& ctx);
  // w_i += gamma sum_j W_ij (w_j,t-K - w_i,t-K) over `models` (round t - K), minus eta (g_i +
  // wd w_i) in the same passes when `descent`.
  void mixDelayed(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models,
                  std::span<const float> ownThen, bool descent);
  // Whether this round compresses: a codec in the run and an undirected graph (see "Compressed").
  bool choco(engine::PeerContext& ctx);
  // Throws (first setup) or warns (later ones) when the mixing matrix is not doubly stochastic.
  void checkMixing(engine::PeerContext& ctx);

  DpsgdOptions options_;
  bool setUp_ = false;
  bool warnedPlain_ = false;
  bool warnedDirected_ = false;
  PublicEstimates estimates_;
  std::vector<kernels::Buffer<float>> history_;  // overlap: w_i,t at [t % (K + 1)]
  std::uint64_t historyFrom_ = 0;                // the first step history_ holds
  std::unique_ptr<NetworkRing> ring_;            // ring-order network on a ring graph
  std::vector<engine::PeerId> placed_;           // the placement asked for (empty: ids)
};

// The overlapped rule's default consensus step for delay `k` and the smallest self weight of W.
double overlapGamma(std::uint64_t k, double minSelfWeight);

}  // namespace gossamer::algorithms
