// dpsgd (algorithms/dpsgd.h): the conserved mean and consensus with learning rate 0 (ring,
// one-peer exponential, a degree above one fused pass), the rule step by step against a reference
// simulation (with every local optimizer, and dpsgd.plain), the convex optimum, learning, a
// killed neighbour, option validation, and the mixing matrix check (uniform mixing on an
// irregular graph refused at the start, a warning after a membership change).
#include "algorithms/dpsgd.h"

#include <algorithm>
#include <cmath>

#include <doctest/doctest.h>

#include "engine/data/sharding.h"
#include "engine/train/learner.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;
using engine::train::OptimizerKind;

engine::runtime::ClusterResult run(const engine::runtime::ClusterConfig& config) {
  return engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
}

// The final models of a run with learning rate 0 from distinctParams on `topology`.
engine::runtime::ClusterResult mixOnly(const std::string& topology, std::size_t peers,
                                       std::uint64_t steps, engine::OptionValues options = {}) {
  auto config = test::algorithmCluster("dpsgd", peers, steps, 0.0, std::move(options));
  config.peer.training.topology = topology;
  config.peer.training.initialParams = test::distinctParams;
  return run(config);
}

TEST_CASE("dpsgd: with learning rate 0 the mixing keeps the network mean and a ring reaches it") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 5;
  SUBCASE("after 3 steps the models differ but their mean is the initial one") {
    const auto result = mixOnly("ring", peers, 3);
    const std::vector<float> oracle =
        test::averageOfDistinct(peers, result.finals[0].params.size());
    CHECK(test::maxAbsDiff(test::meanOf(result.finals), oracle) < 1e-5);
    CHECK(test::maxAbsDiff(result.finals[0].params, oracle) > 0.1);
    for (const auto& p : result.peers) CHECK(p.metrics.count("dpsgd.missing") == 0);
  }
  SUBCASE("after 150 steps every model is the initial mean") {
    // Ring of 5 with W_ij = 1/3: the second eigenvalue is 1/3 + 2/3 cos(2 pi / 5) = 0.54.
    const auto result = mixOnly("ring", peers, 150);
    const std::vector<float> oracle =
        test::averageOfDistinct(peers, result.finals[0].params.size());
    CHECK(test::maxAbsDiff(test::meanOf(result.finals), oracle) < 1e-5);
    for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-5);
    CHECK(result.consensus.distance < 1e-9);
  }
}

TEST_CASE("dpsgd: the one-peer exponential graph averages exactly in log2(n) steps") {
  test::Watchdog watchdog(120s);
  // W_t = (I + P_t) / 2 with P_t the shift by 2^(t mod tau): the product of tau of them is
  // 11^T / n for n a power of two, so every model is the mean after tau steps, not before.
  for (const auto& [peers, tau] : {std::pair<std::size_t, std::uint64_t>{4, 2}, {8, 3}}) {
    CAPTURE(peers);
    const auto result = mixOnly("one-peer-exponential", peers, tau);
    const std::vector<float> oracle =
        test::averageOfDistinct(peers, result.finals[0].params.size());
    for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-5);
    const auto early = mixOnly("one-peer-exponential", peers, tau - 1);
    CHECK(test::maxAbsDiff(early.finals[0].params, oracle) > 0.1);
  }
}

TEST_CASE("dpsgd: a degree above one fused pass (17 peers on the full mesh) still mixes exactly") {
  test::Watchdog watchdog(120s);
  // 16 in-neighbours: self and 15 models in the first weightedSum, 1 more in a second pass; with
  // dpsgd.plain self, g and 14 models, then 2 more.
  const std::size_t peers = 17;
  engine::OptionValues options;
  SUBCASE("mixing, then the local optimizer") {}
  SUBCASE("dpsgd.plain") { options = {{"plain", "true"}}; }
  const auto result = mixOnly("mesh", peers, 1, options);
  const std::vector<float> oracle = test::averageOfDistinct(peers, result.finals[0].params.size());
  for (const auto& s : result.finals) CHECK(test::maxAbsDiff(s.params, oracle) < 1e-5);
}

// The rule run by hand for 3 peers on a ring (every W_ij = 1/3): each peer's gradients come from a
// Learner built like the runtime builds it (its shard, batch and seed), at that peer's w_i,t. By
// default the mixed model x_i = (w_0 + w_1 + w_2) / 3 then takes one step of the local optimizer
// with g_i (its weight decay on x_i); `plain` is the paper's fused rule, whatever the optimizer:
// w_i,t+1 = x_i - eta (g_i + wd w_i,t).
std::vector<std::vector<double>> simulate(const engine::train::OptimizerOptions& optimizer,
                                          std::size_t batch, std::uint64_t steps,
                                          bool plain = false) {
  const engine::DatasetPair& data = *test::smallData();
  const std::size_t peers = 3;
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  engine::models::SoftmaxRegression model(*compute, data.train.features, data.train.classes, batch);
  const auto shards = engine::data::shardIndices(data.train.labels, data.train.classes,
                                                 {.shards = peers, .seed = 1});
  std::vector<std::unique_ptr<engine::train::Learner>> learners;
  std::vector<std::vector<double>> w, v, m;
  for (std::size_t r = 0; r < peers; ++r) {
    learners.push_back(std::make_unique<engine::train::Learner>(*compute, model, optimizer,
                                                                data.train, shards[r], batch, 1));
    const std::vector<float> initial = test::distinctParams(r, model.parameterCount());
    w.emplace_back(initial.begin(), initial.end());
    v.emplace_back(initial.size(), 0.0);
    m.emplace_back(initial.size(), 0.0);
  }
  const double eta = optimizer.lr, wd = optimizer.weightDecay, mu = optimizer.momentum;
  const double b1 = optimizer.beta1, b2 = optimizer.beta2, eps = optimizer.epsilon;
  const std::size_t n = w[0].size();
  for (std::uint64_t t = 0; t < steps; ++t) {
    std::vector<std::vector<double>> next(peers, std::vector<double>(n, 0.0));
    for (std::size_t i = 0; i < peers; ++i) {
      std::vector<float> wi(w[i].begin(), w[i].end()), g(n);
      compute->upload(learners[i]->params(), std::span<const float>(wi));
      learners[i]->computeGradients();
      compute->download(std::span<float>(g), std::span<const float>(learners[i]->grads()));
      for (std::size_t k = 0; k < n; ++k) {
        const double x = (w[0][k] + w[1][k] + w[2][k]) / 3.0;
        if (plain) {
          next[i][k] = x - eta * (g[k] + wd * w[i][k]);
          continue;
        }
        const double gk = g[k] + wd * x;
        switch (optimizer.kind) {
          case OptimizerKind::kSgd:
            next[i][k] = x - eta * gk;
            break;
          case OptimizerKind::kMomentum:
            v[i][k] = mu * v[i][k] + gk;
            next[i][k] = x - eta * v[i][k];
            break;
          case OptimizerKind::kNesterov:
            v[i][k] = mu * v[i][k] + gk;
            next[i][k] = x - eta * (gk + mu * v[i][k]);
            break;
          case OptimizerKind::kAdam: {
            m[i][k] = b1 * m[i][k] + (1 - b1) * gk;
            v[i][k] = b2 * v[i][k] + (1 - b2) * gk * gk;
            const double hatM = m[i][k] / (1 - std::pow(b1, static_cast<double>(t + 1)));
            const double hatV = v[i][k] / (1 - std::pow(b2, static_cast<double>(t + 1)));
            next[i][k] = x - eta * hatM / (std::sqrt(hatV) + eps);
            break;
          }
        }
      }
    }
    w = std::move(next);
  }
  return w;
}

TEST_CASE("dpsgd: steps on a 3-peer ring are the mixing, then a step of --optimizer (any kind)") {
  test::Watchdog watchdog(120s);
  engine::train::OptimizerOptions optimizer{.lr = 0.1f, .momentum = 0.9f, .weightDecay = 0.01f};
  std::uint64_t steps = 1;
  SUBCASE("one step, plain SGD: w_i,1 = x_i - eta (g_i + wd x_i), x_i = (w_0 + w_1 + w_2) / 3") {
    optimizer.kind = OptimizerKind::kSgd;
  }
  SUBCASE("six steps, plain SGD") {
    optimizer.kind = OptimizerKind::kSgd;
    steps = 6;
  }
  SUBCASE("six steps, heavy-ball momentum") {
    optimizer.kind = OptimizerKind::kMomentum;
    steps = 6;
  }
  SUBCASE("six steps, Nesterov momentum") {
    optimizer.kind = OptimizerKind::kNesterov;
    steps = 6;
  }
  SUBCASE("six steps, Adam") {
    optimizer.kind = OptimizerKind::kAdam;
    optimizer.lr = 0.01f;
    steps = 6;
  }
  auto config = test::algorithmCluster("dpsgd", 3, steps, optimizer.lr);
  config.peer.training.optimizer = optimizer;
  config.peer.training.initialParams = test::distinctParams;
  const auto result = run(config);
  const auto oracle = simulate(optimizer, config.peer.training.batch, steps);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const std::vector<float> expected(oracle[i].begin(), oracle[i].end());
    CHECK(test::maxAbsDiff(result.finals[i].params, expected) < 1e-5);
  }
  if (optimizer.kind != OptimizerKind::kSgd) {
    // The optimizer's own rule really entered: plain SGD ends elsewhere.
    auto sgd = optimizer;
    sgd.kind = OptimizerKind::kSgd;
    const auto other = simulate(sgd, config.peer.training.batch, steps);
    const std::vector<float> elsewhere(other[0].begin(), other[0].end());
    CHECK(test::maxAbsDiff(result.finals[0].params, elsewhere) > 1e-3);
  }
}

TEST_CASE("dpsgd.plain: the paper's fused rule, whatever --optimizer says") {
  test::Watchdog watchdog(120s);
  engine::train::OptimizerOptions optimizer{.lr = 0.1f, .momentum = 0.9f, .weightDecay = 0.01f};
  SUBCASE("--optimizer momentum") { optimizer.kind = OptimizerKind::kMomentum; }
  SUBCASE("--optimizer sgd") { optimizer.kind = OptimizerKind::kSgd; }
  SUBCASE("--optimizer adam") { optimizer.kind = OptimizerKind::kAdam; }
  auto config = test::algorithmCluster("dpsgd", 3, 6, 0.1, {{"plain", "true"}});
  config.peer.training.optimizer = optimizer;
  config.peer.training.initialParams = test::distinctParams;
  const auto result = run(config);
  const auto oracle = simulate(optimizer, config.peer.training.batch, 6, true);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const std::vector<float> expected(oracle[i].begin(), oracle[i].end());
    CHECK(test::maxAbsDiff(result.finals[i].params, expected) < 1e-5);
  }
}

TEST_CASE("dpsgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  auto config = test::algorithmCluster("dpsgd", 4, 1500, 0.05);
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.batch = 64;
  const auto result = run(config);
  const double error = test::relativeError(test::meanOf(result.finals), optimum);
  INFO("relative distance of the average model to the optimum: " << error);
  CHECK(error < 0.05);
  for (const auto& s : result.finals) CHECK(test::relativeError(s.params, optimum) < 0.1);
}

TEST_CASE("dpsgd: four peers on a ring learn the synthetic task") {
  test::Watchdog watchdog(120s);
  const std::uint64_t steps = 300;
  const auto result = run(test::algorithmCluster("dpsgd", 4, steps, 0.1));
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.minPeerAccuracy > 0.85);
  const std::size_t modelBytes = result.finals[0].params.size() * sizeof(float);
  for (const auto& p : result.peers) {
    CHECK(p.steps == steps);
    CHECK(p.topology == "ring");
    // Two ring neighbours per step, one model each (headers on top).
    CHECK(p.bytesSent >= steps * 2 * modelBytes);
    CHECK(p.bytesSent < steps * 2 * (modelBytes + 256));
    CHECK(p.metrics.count("dpsgd.missing") == 0);
  }
}

TEST_CASE("dpsgd: a peer killed mid-run does not stall its neighbours") {
  test::Watchdog watchdog(120s);
  const std::uint64_t steps = 1000;
  auto config = test::algorithmCluster("dpsgd", 4, steps, 0.05);
  config.peer.training.minStepTime = 1ms;  // the kill lands mid-run
  config.peer.training.commTimeout = 5s;
  // Killed from the cluster's monitoring thread (onEval, every ~20 ms), which also destroys the
  // peers at the end: a thread of its own could still be inside kill() then.
  engine::runtime::Peer* victim = nullptr;
  std::atomic<std::uint64_t> killedAt{0};
  config.onStart = [&](std::vector<engine::runtime::Peer*>& peers) {
    victim = peers.back();  // id 4: the ring neighbour of ids 1 and 3
  };
  config.evalEvery = 0;
  config.evalInterval = 20ms;
  config.evalSamples = 10;
  config.onEval = [&](const engine::runtime::EvalPoint&) {
    if (killedAt.load() > 0 || victim->status().step < 200) return;
    killedAt = victim->status().step;
    victim->kill();
  };
  const auto result = run(config);
  INFO("killed at step " << killedAt.load());
  CHECK(killedAt.load() >= 200);
  CHECK(result.peers[3].steps < steps);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == steps);
  }
  // Ids 1 and 3 mixed without it until the view dropped it, then the ring of 3 took over.
  for (std::size_t i : {0, 2}) {
    CAPTURE(i);
    CHECK(result.peers[i].metrics.count("dpsgd.missing") == 1);
    CHECK(result.peers[i].metrics.at("dpsgd.partial_rounds") <= 3);
  }
  CHECK(result.consensus.accuracy > 0.85);
}

TEST_CASE("dpsgd: options are validated") {
  const engine::AlgorithmSpec& spec = test::registry().algorithms.get("dpsgd");
  CHECK(spec.defaultTopology == "ring");
  CHECK_THROWS_WITH_AS(spec.make({{"timeout", "-1"}}), doctest::Contains("dpsgd.timeout"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"plain", "maybe"}}), doctest::Contains("plain"),
                       gossamer::Error);
  // The plain rule is dpsgd.plain; there is no dpsgd.momentum (--optimizer says it).
  CHECK_THROWS_WITH_AS(spec.make({{"momentum", "true"}}),
                       doctest::Contains("unknown option 'momentum'"), gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"p", "0.1"}}), doctest::Contains("unknown option 'p'"),
                       gossamer::Error);
  CHECK(spec.make({{"timeout", "0.5"}, {"plain", "false"}})->name() == "dpsgd");
}

// A run with learning rate 0 from distinctParams on `topology` with `mixing`.
engine::runtime::ClusterConfig mixingCluster(const std::string& topology, topology::Mixing mixing,
                                             std::size_t peers, std::uint64_t steps) {
  auto config = test::algorithmCluster("dpsgd", peers, steps, 0.0);
  config.peer.training.topology = topology;
  config.peer.training.topologyOptions.mixing = mixing;
  config.peer.training.initialParams = test::distinctParams;
  config.peer.training.finishTimeout = 2s;
  return config;
}

TEST_CASE("dpsgd: uniform mixing on an irregular graph is refused, naming --mixing metropolis") {
  test::Watchdog watchdog(120s);
  for (const std::string topology : {"star", "tree"}) {
    CAPTURE(topology);
    // 5 peers: the star's center has 4 neighbours, the others 1; the binary tree's degrees are
    // 1 to 3. W = 1 / (degree + 1) per row is not doubly stochastic.
    auto config = mixingCluster(topology, topology::Mixing::kUniform, 5, 10);
    config.peer.training.finishTimeout = 500ms;  // per peer, for the snapshots that never come
    std::string refusal;
    try {
      run(config);
    } catch (const gossamer::Error& e) {
      refusal = e.what();
    }
    INFO(refusal);
    CHECK(refusal.find("--mixing metropolis") != std::string::npos);
    CHECK(refusal.find("doubly stochastic") != std::string::npos);
    CHECK(refusal.find(topology == "star" ? "a star of 5 peers" : "a tree of 5 peers") !=
          std::string::npos);
  }
}

TEST_CASE("dpsgd: uniform mixing on a regular graph and Metropolis on an irregular one are used") {
  test::Watchdog watchdog(120s);
  const std::size_t peers = 5;
  using topology::Mixing;
  for (const auto& [topology, mixing] :
       {std::pair{"ring", Mixing::kUniform}, std::pair{"mesh", Mixing::kUniform},
        std::pair{"star", Mixing::kMetropolisHastings},
        std::pair{"tree", Mixing::kMetropolisHastings}}) {
    CAPTURE(topology);
    const auto result = run(mixingCluster(topology, mixing, peers, 20));
    // Doubly stochastic: with learning rate 0 the mean of the models is the initial one.
    const std::vector<float> oracle =
        test::averageOfDistinct(peers, result.finals[0].params.size());
    CHECK(test::maxAbsDiff(test::meanOf(result.finals), oracle) < 1e-5);
    for (const auto& p : result.peers) {
      CHECK(p.steps == 20);
      CHECK(p.metrics.at("dpsgd.not_doubly_stochastic") == 0);
    }
  }
}

TEST_CASE("dpsgd: a membership change to an irregular graph under uniform mixing only warns") {
  test::Watchdog watchdog(120s);
  // The hypercube of 4 is a 4-cycle (regular); without peer 4 it is the path 2 - 1 - 3.
  auto config = mixingCluster("hypercube", topology::Mixing::kUniform, 4, 300);
  config.peer.training.minStepTime = 1ms;
  config.peer.training.commTimeout = 2s;
  config.peer.training.finishTimeout = 20s;
  test::killPeerAt(config, 3, 100);
  const auto result = run(config);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(result.peers[i].steps == 300);
    CHECK(result.peers[i].metrics.at("dpsgd.not_doubly_stochastic") == 1);
    const auto& w = result.finals[i].params;
    CHECK(std::all_of(w.begin(), w.end(), [](float v) { return std::isfinite(v); }));
  }
}

}  // namespace
}  // namespace gossamer::algorithms
