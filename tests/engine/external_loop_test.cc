// The externally driven loop (engine/runtime/peer.h: Peer::start, step, finish): the caller's
// gradients and optimizer inside the same loop as run(), with the algorithms, membership and
// evaluation working as they do there.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "engine/base/enforce.h"
#include "engine/data/batches.h"
#include "engine/data/sharding.h"
#include "engine/models/softmax_regression.h"
#include "engine/runtime/cluster.h"
#include "engine/train/learner.h"
#include "tests/algorithms/algorithm_testing.h"
#include "tests/engine/external_cluster.h"
#include "tests/support/watchdog.h"

namespace gossamer::engine::runtime {
namespace {

using namespace std::chrono_literals;

// What the external caller of the equivalence test owns: a softmax model, its data sampler and
// the evaluator, the same as the built-in peer's.
struct OwnModel {
  std::unique_ptr<kernels::Compute> compute = kernels::cpu::makeCompute({.blasThreads = 1});
  models::SoftmaxRegression model{*compute, 16, 4, 32};
  data::BatchSampler sampler;
  std::vector<float> inputs = std::vector<float>(32 * 16);
  std::vector<std::int32_t> labels = std::vector<std::int32_t>(32);
  train::Evaluator evaluator{*compute, model, test::smallData()->test};

  explicit OwnModel(std::uint64_t seed)
      : sampler(test::smallData()->train,
                data::shardIndices(test::smallData()->train.labels, 4,
                                   {.shards = 1, .kind = data::SplitKind::kIid, .seed = seed})[0],
                32, seed) {}

  // Forward and backward on the next batch at `params`, into `grads`.
  double gradients(std::span<const float> params, std::span<float> grads) {
    const std::size_t rows = sampler.next(inputs, labels);
    const DeviceBatch batch{std::span<const float>(inputs).first(rows * 16),
                            std::span<const std::int32_t>(labels).first(rows), rows};
    return model.forwardBackward(batch, params, grads);
  }
};

PeerConfig singlePeer() {
  PeerConfig config;
  config.network.transport = "inproc";
  TrainingConfig& t = config.training;
  t.model = "softmax";
  t.algorithm = "none";
  t.optimizer = {.kind = train::OptimizerKind::kMomentum, .lr = 0.1f, .momentum = 0.9f};
  t.schedule.kind = train::LrSchedule::kCosine;
  t.batch = 32;
  t.maxSteps = 60;
  t.seed = 7;
  return config;
}

std::vector<float> finalParams(Peer& peer) {
  std::optional<Snapshot> snapshot = peer.snapshot(5s);
  REQUIRE(snapshot.has_value());
  return snapshot->params;
}

TEST_CASE("external loop: the caller's gradients take the same steps as the built-in loop") {
  test::Watchdog watchdog(60s);
  const Registry& registry = test::registry();
  Peer builtIn(singlePeer(), registry, test::smallData());
  const PeerResult expected = builtIn.run();
  const std::vector<float> expectedParams = finalParams(builtIn);

  // Gradients computed before each step (LocalStep::loss), or when the algorithm asks for them
  // (LocalStep::gradients): the same params, schedule, loss and accuracy to the last bit.
  for (const bool callback : {false, true}) {
    INFO("gradients " << (callback ? "in the callback" : "before the step"));
    OwnModel own(7);
    ExternalModel external{flatLayout(own.model.parameterCount()),
                           [&](std::span<const float> params, std::size_t samples) {
                             return own.evaluator.run(params, samples);
                           }};
    Peer peer(singlePeer(), registry, std::move(external));
    own.model.initialize(peer.params(), 7);  // the built-in learner's initial model
    REQUIRE(peer.start());
    std::uint64_t steps = 0;
    while (true) {
      LocalStep local{.samples = 32};
      if (callback) {
        local.gradients = [&] { return own.gradients(peer.params(), peer.grads()); };
        if (!peer.step(local)) break;
      } else {
        if (peer.status().step >= peer.status().totalSteps) {
          CHECK_FALSE(peer.step(local));
          break;
        }
        local.loss = own.gradients(peer.params(), peer.grads());
        REQUIRE(peer.step(local));
      }
      ++steps;
    }
    CHECK(steps == 60);
    const PeerResult result = peer.finish();
    CHECK(result.steps == expected.steps);
    CHECK(result.samples == expected.samples);
    CHECK(result.trainLoss == expected.trainLoss);
    CHECK(result.testAccuracy == expected.testAccuracy);
    CHECK(result.testAccuracy > 0.9);
    CHECK(test::maxAbsDiff(finalParams(peer), expectedParams) == 0);
  }
}

TEST_CASE("external loop: allreduce-sgd averages the callers' gradients before their optimizer") {
  test::Watchdog watchdog(60s);
  const PeerConfig base = clusterPeer("allreduce-sgd", 20);
  constexpr std::size_t kPeers = 3, kCount = 1000;
  std::atomic<int> updates{0};
  std::atomic<int> wrongMean{0};
  const auto results = runExternalCluster(base, kPeers, kCount, [&](Peer& peer, std::size_t rank) {
    REQUIRE(peer.start());
    const DataShard shard = peer.shard();
    CHECK(shard.count == kPeers);
    CHECK(shard.index == rank);
    LocalStep local{.loss = static_cast<double>(rank), .samples = 8};
    // The caller's optimizer: plain SGD of rate 0.5 on the averaged gradient.
    local.update = [&] {
      ++updates;
      const std::span<float> g = peer.grads();
      if (g[0] != 2.0f || g[kCount - 1] != 2.0f) ++wrongMean;
      const std::span<float> w = peer.params();
      for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.5f * g[i];
    };
    while (true) {
      // Rank r's gradient is r + 1 everywhere: their mean is 2.
      std::fill(peer.grads().begin(), peer.grads().end(), static_cast<float>(rank + 1));
      if (!peer.step(local)) break;
    }
    const std::vector<float> params(peer.params().begin(), peer.params().end());
    PeerResult result = peer.finish();
    for (float w : params) CHECK(w == doctest::Approx(-0.5 * 2.0 * 20));
    return result;
  });
  CHECK(updates == static_cast<int>(kPeers * 20));
  CHECK(wrongMean == 0);
  for (const PeerResult& r : results) {
    CHECK(r.steps == 20);
    CHECK(r.samples == 8 * 20);
    CHECK(r.trainLoss == doctest::Approx(static_cast<double>(&r - results.data())));
    CHECK(r.bytesSent > 0);
  }
}

TEST_CASE(
    "external loop: a peer killed mid-run leaves, the others finish and their shards change") {
  test::Watchdog watchdog(90s);
  PeerConfig base = clusterPeer("gosgd", 400);
  base.training.minStepTime = 5ms;
  base.training.finishTimeout = 20s;
  constexpr std::size_t kPeers = 3, kCount = 64;
  std::atomic<bool> killed{false};
  const auto results = runExternalCluster(base, kPeers, kCount, [&](Peer& peer, std::size_t rank) {
    REQUIRE(peer.start());
    std::vector<float> initial(kCount, static_cast<float>(rank));  // distinct models
    std::copy(initial.begin(), initial.end(), peer.params().begin());
    std::size_t lastCount = peer.shard().count;
    while (peer.step({.loss = 1.0, .samples = 1})) {
      if (rank == 2 && peer.status().step == 20) {
        peer.kill();
        killed = true;
      }
      lastCount = peer.shard().count;
    }
    PeerResult result = peer.finish();
    if (rank != 2) {
      CHECK(lastCount == 2);
      const auto events = peer.takeEvents();
      CHECK(std::any_of(events.begin(), events.end(), [](const net::membership::Event& e) {
        return e.kind == net::membership::EventKind::failed && e.member.id == 3;
      }));
      CHECK(peer.takeEvents().empty());  // taken
    }
    return result;
  });
  CHECK(killed);
  CHECK(results[2].steps == 20);
  for (std::size_t i : {0, 1}) {
    CHECK(results[i].steps == 400);
    CHECK(results[i].bytesSent > 0);
  }
}

TEST_CASE("external loop: a checkpoint of the caller's run resumes where it stopped") {
  test::Watchdog watchdog(30s);
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("gossamer-external-" + std::to_string(std::random_device{}()) + ".ckpt");
  auto config = [&](std::uint64_t steps, bool resume) {
    PeerConfig c = clusterPeer("none", steps);
    c.training.optimizer = {.kind = train::OptimizerKind::kSgd, .lr = 0.1f};
    c.training.checkpointFile = file.string();
    c.training.checkpointEvery = 5;
    c.training.resume = resume;
    return c;
  };
  auto train = [](Peer& peer) {
    REQUIRE(peer.start());
    while (true) {
      std::fill(peer.grads().begin(), peer.grads().end(), 1.0f);
      if (!peer.step({.loss = 1.0, .samples = 2})) break;
    }
    return peer.finish();
  };
  {
    Peer first(config(10, false), test::registry(), ExternalModel{flatLayout(8), {}});
    CHECK(train(first).steps == 10);
    for (float w : first.params()) CHECK(w == doctest::Approx(-1.0));
  }
  Peer resumed(config(20, true), test::registry(), ExternalModel{flatLayout(8), {}});
  for (float w : resumed.params()) CHECK(w == 0.0f);  // restored by start()
  const PeerResult result = train(resumed);
  CHECK(result.steps == 20);
  CHECK(result.samples == 40);  // the first run's 20 samples came back with the checkpoint
  for (float w : resumed.params()) CHECK(w == doctest::Approx(-2.0));
  CHECK_THROWS_WITH_AS(Peer(config(20, true), test::registry(), ExternalModel{flatLayout(9), {}}),
                       doctest::Contains("is for a different model"), Error);
  std::filesystem::remove(file);
}

TEST_CASE("external loop: misuse is refused with a sentence") {
  test::Watchdog watchdog(30s);
  const Registry& registry = test::registry();
  PeerConfig config = singlePeer();
  config.training.maxSteps = 0;
  CHECK_THROWS_WITH_AS(Peer(config, registry, ExternalModel{flatLayout(4), {}}),
                       doctest::Contains("needs the number of steps of its run"), Error);
  CHECK_THROWS_WITH_AS(Peer(singlePeer(), registry, ExternalModel{ParamLayout{}, {}}),
                       doctest::Contains("needs a model with parameters"), Error);

  Peer external(singlePeer(), registry, ExternalModel{flatLayout(4), {}});
  CHECK(external.params().size() == 4);
  CHECK(external.grads().size() == 4);
  CHECK(external.parameterCount() == 4);
  CHECK_THROWS_WITH_AS(external.step({}), doctest::Contains("Peer::step() before start()"), Error);
  CHECK_THROWS_WITH_AS(external.finish(), doctest::Contains("before start()"), Error);
  CHECK_THROWS_WITH_AS(external.run(), doctest::Contains("use start(), step() and finish()"),
                       Error);
  REQUIRE(external.start());
  CHECK_THROWS_WITH_AS(external.start(), doctest::Contains("called once"), Error);
  CHECK(external.step({.loss = 0.5, .samples = 1}));
  const PeerResult result = external.finish();
  CHECK(result.steps == 1);
  CHECK(result.testAccuracy == 0);  // no evaluation given: none made
  CHECK_THROWS_WITH_AS(external.step({}), doctest::Contains("after finish()"), Error);
  CHECK_THROWS_WITH_AS(external.finish(), doctest::Contains("called once"), Error);

  Peer builtIn(singlePeer(), registry, test::smallData());
  CHECK_THROWS_WITH_AS(builtIn.start(), doctest::Contains("trains its own model with run()"),
                       Error);
}

}  // namespace
}  // namespace gossamer::engine::runtime
