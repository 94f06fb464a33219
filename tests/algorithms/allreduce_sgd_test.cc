// allreduce-sgd (algorithms/allreduce_sgd.h): step-for-step equality with one SGD on the peers'
// combined batches, the convex optimum, training, options and a peer killed mid-run.
#include "algorithms/allreduce_sgd.h"

#include <vector>

#include <doctest/doctest.h>

#include "engine/data/sharding.h"
#include "engine/train/learner.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/support/watchdog.h"

namespace gossamer::algorithms {
namespace {

using namespace std::chrono_literals;

// The oracle: one model stepped by the optimizer of `t` with the mean of the gradients that the
// `peers` peers of a run compute at it, each on its own next batch. Each peer's batches are
// replayed by a Learner built as engine/runtime/peer.cc builds it: the same shard (rank r of
// shardIndices with `peers` shards), the same batch size and sampler seed, the same initial model.
std::vector<float> combinedSgd(const engine::runtime::TrainingConfig& t, std::size_t peers,
                               std::uint64_t steps) {
  const engine::DatasetPair& data = *test::smallData();
  auto compute = kernels::cpu::makeCompute({.blasThreads = 1});
  engine::ModelConfig modelConfig = t.modelConfig;
  modelConfig.inputs = data.train.features;
  modelConfig.classes = data.train.classes;
  modelConfig.maxBatch = std::max(modelConfig.maxBatch, t.batch);
  auto model = test::registry().models.get(t.model)(*compute, modelConfig);
  const auto shards = engine::data::shardIndices(
      data.train.labels, data.train.classes,
      {.shards = peers, .kind = t.split, .dirichletAlpha = t.dirichletAlpha, .seed = t.seed});
  std::vector<std::unique_ptr<engine::train::Learner>> learners;
  for (std::size_t r = 0; r < peers; ++r)
    learners.push_back(std::make_unique<engine::train::Learner>(
        *compute, *model, t.optimizer, data.train, shards[r], t.batch, t.seed));
  engine::train::Learner& combined = *learners.front();
  const std::size_t n = combined.params().size();
  for (std::uint64_t step = 0; step < steps; ++step) {
    std::vector<double> sum(n, 0.0);
    for (auto& learner : learners) {
      compute->copy(learner->params(), combined.params());
      learner->computeGradients();
      for (std::size_t i = 0; i < n; ++i) sum[i] += learner->grads()[i];
    }
    for (std::size_t i = 0; i < n; ++i)
      combined.grads()[i] = static_cast<float>(sum[i] / static_cast<double>(peers));
    combined.applyUpdate();
  }
  return std::vector<float>(combined.params().begin(), combined.params().end());
}

TEST_CASE("allreduce-sgd: n peers take the steps of one SGD on their combined batches") {
  test::Watchdog watchdog(120s);
  // 3 peers: the 68 parameters and the 4000 samples split unevenly; 40 steps of momentum SGD.
  const std::size_t peers = 3;
  const std::uint64_t steps = 40;
  auto config = test::algorithmCluster("allreduce-sgd", peers, steps, 0.1, {{"pipeline", "3"}});
  config.peer.training.optimizer.kind = engine::train::OptimizerKind::kMomentum;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const std::vector<float> oracle = combinedSgd(config.peer.training, peers, steps);
  for (const auto& s : result.finals) {
    CHECK(s.params == result.finals.front().params);  // bit-identical replicas
    const double error = test::relativeError(s.params, oracle);
    INFO("relative distance to the combined-batch SGD: " << error);
    CHECK(error < 1e-5);
  }
  for (const auto& p : result.peers) {
    CHECK(p.metrics.at("allreduce-sgd.rounds") == steps);
    CHECK(p.metrics.count("allreduce-sgd.fallbacks") == 0);
  }
}

TEST_CASE("allreduce-sgd: on a strongly convex problem the peers converge to the known optimum") {
  test::Watchdog watchdog(120s);
  const float weightDecay = 0.05f;
  const std::vector<float> optimum = test::convexOptimum(weightDecay);
  auto config = test::algorithmCluster("allreduce-sgd", 4, 600, 0.1);
  config.peer.training.optimizer.weightDecay = weightDecay;
  config.peer.training.batch = 64;
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  const double error = test::relativeError(result.finals.front().params, optimum);
  INFO("relative distance to the optimum: " << error);
  CHECK(error < 0.02);
  CHECK(result.consensus.distance == 0);
}

TEST_CASE("allreduce-sgd: four peers learn the synthetic task and stay identical") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("allreduce-sgd", 4, 200, 0.1);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.consensus.accuracy > 0.9);
  CHECK(result.consensus.distance == 0);
  for (const auto& p : result.peers) {
    CHECK(p.steps == 200);
    CHECK(p.bytesSent > 0);
    CHECK(p.metrics.at("allreduce-sgd.rounds") == 200);  // no step fell back
  }
}

TEST_CASE("allreduce-sgd: options are validated") {
  const auto& spec = test::registry().algorithms.get("allreduce-sgd");
  CHECK(spec.defaultTopology == "ring");
  CHECK_THROWS_WITH_AS(spec.make({{"pipeline", "0"}}),
                       doctest::Contains("allreduce-sgd.pipeline must be in [1, 16]"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"pipeline", "17"}}), doctest::Contains("allreduce-sgd.pipeline"),
                       gossamer::Error);
  CHECK_THROWS_WITH_AS(spec.make({{"tau", "2"}}), doctest::Contains("unknown option 'tau'"),
                       gossamer::Error);
}

TEST_CASE("allreduce-sgd: a peer killed mid-run does not stop the others") {
  test::Watchdog watchdog(120s);
  auto config = test::algorithmCluster("allreduce-sgd", 4, 150, 0.1);
  config.peer.training.commTimeout = 1s;
  config.peer.training.minStepTime = 5ms;  // the kill comes mid-run
  test::killPeerAt(config, 2, 30);
  const auto result = engine::runtime::runLocalCluster(config, test::registry(), test::smallData());
  CHECK(result.peers[2].steps < 150);
  for (std::size_t i : {0, 1, 3}) {
    CAPTURE(i);
    const auto& p = result.peers[i];
    CHECK(p.steps == 150);
    // The rounds around the kill fell back to the local gradient; the rest averaged over the
    // survivors.
    CHECK(p.metrics.at("allreduce-sgd.fallbacks") >= 1);
    CHECK(p.metrics.at("allreduce-sgd.rounds") >= 100);
  }
}

}  // namespace
}  // namespace gossamer::algorithms
