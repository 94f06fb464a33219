// tree-easgd: elastic averaging over a tree of workers (Zhang, "Distributed stochastic
// optimization for deep learning", 2016, EASGD Tree). Langer et al. (seeds/003) figure 16; the
// rule is algorithms/README.md's "tree-easgd".
//
//   communication    tree edges only (default topology "tree", k-ary, --tree-arity): a peer pushes
//                    its model to its parent and to its children, asynchronously
//   messages / step  1 / tau_up(depth) up, plus children / tau_down(depth) down
//   bytes on wire    (1 / tau_up + children / tau_down) x |w| x 4 per step and peer;
//                    compressed, the codec's share of that (see "Compressed")
//   staleness        bounded asynchronous (Langer et al.): nobody waits for anyone; a model is
//                    consumed at the receiver's next step boundary, and each neighbour sends a
//                    fresh one every tau_up or tau_down of its own steps
//   invariant        none exact: a model is pulled toward a neighbour's copy, and the neighbour is
//                    pulled back only when its own interval comes, by a different copy, so sum_i
//                    w_i drifts. Every update is a convex combination, so with lr 0 the models stay
//                    in the convex hull of the initial ones and contract to a consensus inside it.
//
// All peers are workers in the tree of ctx.graph() (parent, children, depth; the root keeps the
// global model). With t_i the local steps done:
//   before a step: for each model w_j received since the last step, in arrival order:
//                    w_i = w_i - alpha (w_i - w_j)
//                  applied as ONE weightedSum per 15 models with the weights of that sequence,
//                  (1 - alpha)^k on w_i and alpha (1 - alpha)^(k - j) on the j-th of k models;
//   after a step:  if t_i mod tau_up(depth) == 0, send w_i to the parent;
//                  if t_i mod tau_down(depth) == 0, send w_i to every child (staged once).
// The intervals are per depth: tau_up lists depths 1, 2, ... (the root has no parent), tau_down
// depths 0, 1, ...; the last value of a list repeats for deeper levels. algorithms/README.md:
// shallower nodes exchange more rarely upward, so tau_up may not grow with depth (validated).
// A received model of the wrong size or with a non-finite value is refused (engine::acceptMessage:
// a warning naming its sender, counted in "tree-easgd.refused") and the others are applied; so
// is, under the run's NormBound (--max-norm-ratio), a model far from w_i ("tree-easgd.outliers";
// compressed: an estimate far from x^_i, public_estimates.h).
//
// Compressed (--compress): models travel as CHOCO-SGD's compressed differences from public
// estimates (public_estimates.h), in two streams per peer: up (to the parent) and down (to every
// child, the same message). A received message updates its sender's estimate x^_j, and the pull
// is toward it: w_i = w_i - alpha (w_i - x^_j), one weightedSum per message. The first message of
// each stream after setup() is an anchor (the model in float32); a numbering gap (a lost message)
// makes the receiver ask for a new anchor in its next message the other way (a child asks in its
// stream up, the parent in its stream down), and the pull waits until it comes. A model from a
// peer that is no tree neighbour now (the tree changed) is merged if it is a whole model and
// dropped if it is a difference ("tree-easgd.unusable"). Memory: 3 + 1 (parent) + children
// model-sized buffers in the Compute.
//
// Models are consumed at step boundaries only: finish() drops what arrived after this peer's last
// step ("tree-easgd.dropped"). A peer that finishes early would otherwise take in, at once, every
// model a slower neighbour sent while it waited, and end up as a copy of that neighbour.
//
// Elastic membership: setup() runs again after every change and re-reads parent, children and
// depth from the rebuilt tree (positions in the sorted members), so a killed or departed inner
// node's subtree hangs from the new tree at once; models still queued from old neighbours are
// consumed as usual. Nobody waits for anyone, so a dead neighbour costs nothing but its models.
// A joiner receives a tree neighbour's model and step (Algorithm::join's default: every peer is a
// worker, there is no state but the model); leave() hands nothing over, for the same reason.
//
// The fixed point is weighted: along an edge, the child is pulled alpha / tau_down(parent) per
// step and the parent alpha / tau_up(child), so on a convex problem the models settle near the
// minimiser of sum_i pi_i f_i with pi_child / pi_parent = tau_down(parent) / tau_up(child) (to
// first order in alpha, for peers stepping at the same speed; a peer that takes in several models
// at one boundary discounts the earlier ones by (1 - alpha) each). Equal intervals both ways
// and a small alpha give the plain average of the losses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/public_estimates.h"
#include "algorithms/shared_end.h"
#include "engine/algorithm.h"

namespace gossamer::algorithms {

struct TreeEasgdOptions {
  double alpha = 0.5;
  std::vector<std::uint64_t> tauUp = {8, 2};
  std::vector<std::uint64_t> tauDown = {4};
  std::string end = "steps";  // or "budget": algorithms/shared_end.h

  template <typename Bind>
  void bind(Bind& b) {
    b("alpha", alpha, "elastic moving rate toward each received model, in (0, 1]");
    b("tau_up", tauUp,
      "steps between sends to the parent, by depth from 1 (the root's children); the last value "
      "repeats deeper; may not increase with depth (shallower nodes send up more rarely)");
    b("tau_down", tauDown,
      "steps between sends to the children, by depth from 0 (the root); the last value repeats "
      "deeper");
    b("end", end,
      "steps (every peer takes the run's steps) or budget (the cluster takes the run's steps x "
      "the members, each peer training until about the same moment: peers of uneven speed)");
  }
  void validate() const;
};

class TreeEasgd final : public engine::Algorithm {
 public:
  explicit TreeEasgd(TreeEasgdOptions options)
      : options_(std::move(options)),
        up_("tree-easgd"),
        down_("tree-easgd"),
        end_("tree-easgd", options_.end) {}
  std::string name() const override { return "tree-easgd"; }
  void setup(engine::PeerContext& ctx) override;
  void beforeStep(engine::PeerContext& ctx) override { consume(ctx); }
  void afterStep(engine::PeerContext& ctx) override;
  engine::Invariants invariants() const override { return end_.adjust({}); }
  std::optional<double> runProgress() const override { return end_.progress(); }
  // Drops (and counts) the models that came after the last step: see the header comment.
  void finish(engine::PeerContext& ctx) override;

  // Message kind: a tree neighbour's model (payload 0).
  static constexpr std::uint32_t kModel = 1;

 private:
  // Applies every received model (see the header comment).
  void consume(engine::PeerContext& ctx);
  // Compressed: each message updates its sender's estimate, and w_i moves toward the estimate.
  void consumeEstimates(engine::PeerContext& ctx, std::vector<engine::Incoming> received);

  TreeEasgdOptions options_;
  std::optional<engine::PeerId> parent_;
  std::vector<engine::PeerId> children_;
  std::uint64_t tauUp_ = 0;  // of this peer's depth
  std::uint64_t tauDown_ = 0;
  // Compressed: the stream to the parent (with the parent's estimate, from its stream down), and
  // the stream to the children (with each child's estimate, from its stream up).
  PublicEstimates up_, down_;
  SharedEnd end_;
};

}  // namespace gossamer::algorithms
