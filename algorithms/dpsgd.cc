#include "algorithms/dpsgd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "engine/base/enforce.h"
#include "engine/base/log.h"
#include "engine/train/optimizer.h"

namespace gossamer::algorithms {

using engine::train::OptimizerKind;

namespace {

// A cycle through every member, of 4 or more (on 3 every order is the same ring).
bool isRing(const topology::Graph& graph) {
  if (graph.size() < 4 || !graph.symmetric() || !graph.connected()) return false;
  for (engine::PeerId peer : graph.members())
    if (graph.inDegree(peer) != 2) return false;
  return true;
}

}  // namespace

void weightedSumAny(kernels::Compute& compute, std::span<float> out,
                    std::span<const kernels::WeightedInput> inputs) {
  constexpr std::size_t kMax = kernels::Compute::kMaxWeightedInputs;
  std::size_t done = std::min(inputs.size(), kMax);
  compute.weightedSum(out, inputs.first(done));
  std::vector<kernels::WeightedInput> pass;
  while (done < inputs.size()) {
    const std::size_t take = std::min(inputs.size() - done, kMax - 1);
    pass.assign({{1.0f, out}});
    pass.insert(pass.end(), inputs.begin() + done, inputs.begin() + done + take);
    compute.weightedSum(out, pass);
    done += take;
  }
}

void DpsgdOptions::validate() const {
  GOSSAMER_ENFORCE(std::isfinite(timeout) && timeout >= 0,
                   "dpsgd.timeout must be >= 0 seconds (0: --comm-timeout), not {}", timeout);
  GOSSAMER_ENFORCE(std::isfinite(gamma) && gamma >= 0 && gamma <= 1,
                   "dpsgd.gamma must be in (0, 1] (0: the default), not {}", gamma);
  GOSSAMER_ENFORCE(overlap <= kMaxOverlap,
                   "dpsgd.overlap must be in [0, {}] steps (each keeps a snapshot of the model), "
                   "not {}",
                   kMaxOverlap, overlap);
  GOSSAMER_ENFORCE(ringOrder == "network" || ringOrder == "id",
                   "dpsgd.ring-order is network or id, not '{}'", ringOrder);
}

double DpsgdOptions::gammaFor(const kernels::Codec& codec) const {
  return gamma > 0 ? gamma : chocoGamma(codec);
}

void Dpsgd::setup(engine::PeerContext& ctx) {
  const bool first = !setUp_ && ctx.step() == 0;
  checkMixing(ctx);
  if (options_.overlap > 0) checkOverlap(ctx, first);
  historyFrom_ = ctx.step();  // overlap: new neighbours sent nothing K steps ago
  ring_.reset();
  if (options_.ringOrder == "network" && isRing(ctx.graph()))
    ring_ = std::make_unique<NetworkRing>(kRingSurvey, ViewFit::kSurveyEvery, name());
  std::vector<engine::PeerId> neighbours;
  for (const topology::WeightedPeer& j : ctx.graph().inNeighbors(ctx.self()))
    neighbours.push_back(j.id);
  estimates_.reset(neighbours);  // the view changed: anchors first
  const OptimizerKind kind = ctx.optimizer().options().kind;
  if (options_.plain && kind != OptimizerKind::kSgd && !warnedPlain_) {
    log::get("algorithms")
        ->warn(
            "dpsgd.plain applies the paper's plain SGD rule: the {} state of --optimizer {} is not "
            "used, only its learning rate and weight decay (dpsgd.plain false steps with it)",
            kind == OptimizerKind::kAdam ? "moment" : "momentum",
            engine::train::optimizerName(kind));
    warnedPlain_ = true;
  }
}

void Dpsgd::checkMixing(engine::PeerContext& ctx) {
  // Peers that start together set up at step 0; a joiner or a restarted peer enters at a later
  // step, in a run that is already going: the membership changed, not the configuration.
  const bool first = !setUp_ && ctx.step() == 0;
  setUp_ = true;
  const topology::Graph& graph = ctx.graph();
  const bool doublyStochastic = graph.doublyStochastic(1e-9);
  ctx.metrics().set("dpsgd.not_doubly_stochastic", doublyStochastic ? 0 : 1);
  if (doublyStochastic) return;
  const std::size_t n = graph.size();
  const std::vector<double>& w = graph.mixingMatrix();
  double low = INFINITY, high = -INFINITY;
  for (std::size_t j = 0; j < n; ++j) {
    double column = 0;
    for (std::size_t i = 0; i < n; ++i) column += w[i * n + j];
    low = std::min(low, column);
    high = std::max(high, column);
  }
  const topology::DegreeStats degrees = graph.degreeStats();
  // An undirected graph (every edge both ways) of n - 1 edges that is connected is a tree; one
  // with a peer linked to every other one is a star.
  std::size_t edges = 0;
  bool undirected = true;
  for (engine::PeerId peer : graph.members()) {
    edges += graph.inDegree(peer);
    std::vector<engine::PeerId> in;
    for (const topology::WeightedPeer& j : graph.inNeighbors(peer)) in.push_back(j.id);
    undirected = undirected && in == graph.outNeighbors(peer);
  }
  const bool tree = undirected && graph.connected() && edges == 2 * (n - 1);
  const char* shape = degrees.min == degrees.max ? "a regular graph"
                      : !tree                    ? "an irregular graph"
                      : degrees.max + 1 == n     ? "a star"
                                                 : "a tree";
  const std::string problem = fmt::format(
      "dpsgd needs a doubly stochastic mixing matrix, and this topology's is not: the topology is "
      "{} of {} peers with {} to {} neighbours each, and its mixing weights (columns summing to "
      "{:.3g} to {:.3g}, as --mixing uniform gives on an irregular graph) would pull the "
      "consensus toward the best-connected peers instead of the average of the models. Use "
      "--mixing metropolis (Metropolis-Hastings weights, doubly stochastic on every graph), or a "
      "regular topology (ring, mesh, torus, exponential)",
      shape, n, degrees.min, degrees.max, low, high);
  if (first) GOSSAMER_THROW("{}", problem);
  log::get("algorithms")
      ->warn("peer {:016x} at step {}, after a membership change: {}", ctx.self(), ctx.step(),
             problem);
}

void Dpsgd::placeRing(engine::PeerContext& ctx) {
  if (!ring_) return;
  const double bytes = static_cast<double>(ctx.params().size() * sizeof(float));
  const std::span<const engine::PeerId> order = ring_->order(ctx, bytes);
  if (std::equal(order.begin(), order.end(), placed_.begin(), placed_.end())) return;
  placed_.assign(order.begin(), order.end());
  ctx.placeMembers(order);
  // New neighbours: as at a view change.
  std::vector<engine::PeerId> neighbours;
  for (const topology::WeightedPeer& j : ctx.graph().inNeighbors(ctx.self()))
    neighbours.push_back(j.id);
  estimates_.reset(neighbours);
  historyFrom_ = ctx.step();
}

double Dpsgd::step(engine::PeerContext& ctx) {
  placeRing(ctx);
  if (options_.overlap > 0) return stepOverlapped(ctx);
  const std::uint64_t t = ctx.step();
  const std::uint64_t tag = engine::Tags::forRound(kModel, t);
  if (const std::size_t late = ctx.inbox().discardBefore(t); late > 0)
    ctx.metrics().add("dpsgd.late", static_cast<double>(late));
  // Line 3: send w_i,t to the peers that mix it in (staged before send returns); compressed, the
  // difference from its public estimate.
  const bool compressed = choco(ctx);
  const std::vector<engine::PeerId> out = ctx.graph().outNeighbors(ctx.self());
  if (compressed) {
    estimates_.send(ctx, out, ctx.params(), {.kind = kModel, .step = t, .tag = tag});
  } else {
    ctx.send(out,
             engine::Message{.kind = kModel, .step = t, .tag = tag, .payloads = {ctx.params()}});
  }
  // Lines 4-5: g_i on w_i,t, while the sends fly.
  const double loss = ctx.computeGradients();
  // Line 6: await w_j,t from every in-neighbour, until the deadline.
  const std::vector<engine::Incoming> models = awaitModels(ctx, tag, compressed);
  // Line 7: w_i,t+1 = sum_j W_ij w_j,t - eta d_i (compressed: CHOCO-SGD's consensus step).
  if (compressed) {
    mixEstimates(ctx, models, options_.plain);
  } else {
    mix(ctx, models, options_.plain);
  }
  if (options_.plain) {
    ctx.optimizer().setSteps(ctx.optimizer().steps() + 1);
  } else {
    ctx.applyOptimizer();
  }
  return loss;
}

bool Dpsgd::choco(engine::PeerContext& ctx) {
  if (!ctx.compression().enabled()) return false;
  if (ctx.graph().symmetric()) return true;
  // A peer's request for an anchor travels in its own messages, which reach only the peers it
  // sends to: the estimates need every edge both ways.
  const std::string problem = fmt::format(
      "dpsgd compresses (--compress {}) with CHOCO-SGD's estimates, which need an undirected "
      "topology with a symmetric mixing matrix, and this one is not (a directed or time-varying "
      "graph, or --mixing uniform on an irregular one)",
      kernels::formatCodec(ctx.compression().codec));
  if (ctx.step() == 0)
    GOSSAMER_THROW("{}; use ring, torus, exponential, mesh or --mixing metropolis", problem);
  if (!warnedDirected_)
    log::get("algorithms")->warn("peer {:016x}: {}: sending float32 models", ctx.self(), problem);
  warnedDirected_ = true;
  return false;
}

std::vector<engine::Incoming> Dpsgd::awaitModels(engine::PeerContext& ctx, std::uint64_t tag,
                                                 bool compressed) {
  std::vector<engine::PeerId> from;
  for (const topology::WeightedPeer& j : ctx.graph().inNeighbors(ctx.self())) from.push_back(j.id);
  const engine::Clock::duration timeout = options_.timeout > 0
                                              ? std::chrono::duration_cast<engine::Clock::duration>(
                                                    std::chrono::duration<double>(options_.timeout))
                                              : ctx.commTimeout();
  engine::GatherResult got = ctx.gather(from, tag, timeout);
  const engine::Expected expected{.payloads = {ctx.params().size()}};
  std::vector<engine::Incoming> models;
  models.reserve(got.messages.size());
  for (engine::Incoming& m : got.messages) {
    if (!engine::acceptMessage(m, expected, ctx.metrics(), name())) continue;
    // A difference is no model: without estimates (a peer that compresses while this one does
    // not, during a change of view) it is left out like a missing one.
    const bool difference = !m.integers.empty() && m.integers[0] == PublicEstimates::kDifference;
    if (!compressed && difference) {
      ctx.metrics().add("dpsgd.unusable", 1);
      continue;
    }
    // Compressed, the estimate a message makes is bounded where it is made (PublicEstimates).
    // (The upload, a copy on CUDA, only when there is a bound to check.)
    if (!compressed && ctx.normBound().enabled() &&
        !engine::acceptNearOwn(ctx.compute(), m, ctx.upload(m.payload(0)), ctx.params(),
                               ctx.normBound(), ctx.metrics(), name()))
      continue;
    models.push_back(std::move(m));
  }
  if (!got.complete()) ctx.metrics().add("dpsgd.missing", static_cast<double>(got.missing.size()));
  if (models.size() < from.size()) ctx.metrics().add("dpsgd.partial_rounds", 1);
  return models;
}

void Dpsgd::mix(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models,
                bool descent) {
  const topology::Graph& graph = ctx.graph();
  const engine::PeerId self = ctx.self();
  // The row over the models present, renormalised to sum to 1 (a no-op when all arrived). W_ii
  // is 1 minus the others as floats, so that the row the kernel applies sums to 1 as closely as
  // float allows (the lr-0 mean is then conserved to rounding).
  double rowSum = graph.selfWeight(self);
  for (const engine::Incoming& m : models) rowSum += graph.weight(self, m.from);
  std::vector<engine::DeviceView> views;
  views.reserve(models.size());
  std::vector<kernels::WeightedInput> mixing;
  double others = 0;
  for (const engine::Incoming& m : models) {
    views.push_back(ctx.upload(m.payload(0)));
    mixing.push_back({static_cast<float>(graph.weight(self, m.from) / rowSum), views.back()});
    others += mixing.back().weight;
  }
  const float mine = static_cast<float>(1.0 - others);
  const std::span<float> w = ctx.params();
  std::vector<kernels::WeightedInput> inputs;
  if (descent) {
    // The paper's d_i = g_i + wd w_i,t, in the first pass (which reads w_i,t).
    const engine::train::OptimizerOptions& o = ctx.optimizer().options();
    inputs = {{mine - o.lr * o.weightDecay, w}, {-o.lr, ctx.grads()}};
  } else {
    if (mixing.empty()) return;  // w_i alone: nothing to mix
    inputs = {{mine, w}};
  }
  inputs.insert(inputs.end(), mixing.begin(), mixing.end());
  weightedSumAny(ctx.compute(), w, inputs);
}

void Dpsgd::mixEstimates(engine::PeerContext& ctx, const std::vector<engine::Incoming>& models,
                         bool descent) {
  const topology::Graph& graph = ctx.graph();
  const engine::PeerId self = ctx.self();
  // x^_j += q_j (or x^_j = w_j from an anchor) for the models that came; the others' estimates
  // are unknown until their anchors.
  for (const engine::Incoming& m : models) estimates_.receive(ctx, m);
  for (const topology::WeightedPeer& j : graph.inNeighbors(self))
    if (std::none_of(models.begin(), models.end(),
                     [&](const engine::Incoming& m) { return m.from == j.id; }))
      estimates_.missed(j.id);
  const float gamma = static_cast<float>(options_.gammaFor(ctx.compression().codec));
  // w_i += gamma sum_j W_ij (x^_j - x^_i) over the known estimates: a neighbour whose estimate is
  // unknown (its model missed the round) counts as W_ij = 0, its weight staying on w_i.
  std::vector<kernels::WeightedInput> pulls;
  for (const topology::WeightedPeer& j : graph.inNeighbors(self)) {
    const std::optional<std::span<const float>> x = estimates_.of(j.id);
    if (x) pulls.push_back({static_cast<float>(gamma * graph.weight(self, j.id)), *x});
  }
  mixDifferences(ctx, pulls, estimates_.own(), descent);
}

void mixDifferences(engine::PeerContext& ctx, std::span<const kernels::WeightedInput> pulls,
                    std::span<const float> own, bool descent) {
  const std::span<float> w = ctx.params();
  std::vector<kernels::WeightedInput> inputs;
  if (descent) {
    const engine::train::OptimizerOptions& o = ctx.optimizer().options();
    inputs = {{1.0f - o.lr * o.weightDecay, w}, {-o.lr, ctx.grads()}};
  } else {
    if (pulls.empty()) return;
    inputs = {{1.0f, w}};
  }
  float weights = 0;
  for (const kernels::WeightedInput& pull : pulls) weights += pull.weight;
  if (!pulls.empty()) inputs.push_back({-weights, own});
  inputs.insert(inputs.end(), pulls.begin(), pulls.end());
  weightedSumAny(ctx.compute(), w, inputs);
}

}  // namespace gossamer::algorithms
