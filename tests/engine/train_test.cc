// The single-peer training path: optimizer, checkpoints (atomic, verified, never half-loaded),
// exact resume, and that training learns: a single peer is a cluster of one, trained by the
// runtime's one training loop.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <thread>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/builtin.h"
#include "engine/data/idx.h"
#include "engine/data/synthetic.h"
#include "engine/models/mlp.h"
#include "engine/runtime/peer.h"
#include "engine/train/checkpoint.h"
#include "engine/train/learner.h"
#include "kernels/cpu/cpu_compute.h"

namespace gossamer::engine::train {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("gossamer-train-test-" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::size_t> allIndices(const data::Dataset& d) {
  std::vector<std::size_t> v(d.count());
  std::iota(v.begin(), v.end(), std::size_t{0});
  return v;
}

data::Dataset smallSynthetic(std::uint64_t sampleSeed) {
  return data::makeSynthetic({.count = 600, .features = 12, .classes = 3, .separation = 3.0,
                              .noise = 1.0, .distributionSeed = 5, .sampleSeed = sampleSeed});
}

std::vector<float> hostCopy(std::span<const float> s) { return {s.begin(), s.end()}; }

// One peer training alone on smallSynthetic: an MLP 12-16-3 with momentum, batch 32.
runtime::PeerConfig singlePeer(double epochs) {
  runtime::PeerConfig c;
  c.network.transport = "inproc";
  runtime::TrainingConfig& t = c.training;
  t.algorithm = "none";
  t.model = "mlp";
  t.modelConfig.hidden = {16};
  t.optimizer = {.kind = OptimizerKind::kMomentum, .lr = 0.05f};
  t.batch = 32;
  t.epochs = epochs;
  t.seed = 3;
  return c;
}

std::shared_ptr<const DatasetPair> syntheticPair() {
  return std::make_shared<const DatasetPair>(DatasetPair{smallSynthetic(1), smallSynthetic(2)});
}

TEST_CASE("train: optimizer names parse and unknown names are refused") {
  CHECK(parseOptimizerKind("adam") == OptimizerKind::kAdam);
  CHECK(std::string(optimizerName(OptimizerKind::kNesterov)) == "nesterov");
  CHECK_THROWS_WITH_AS(parseOptimizerKind("lion"), doctest::Contains("unknown optimizer 'lion'"), Error);
}

TEST_CASE("train: checkpoint round trip and rejection of corrupt files") {
  TempDir dir;
  const std::string path = (dir.path / "peer.ckpt").string();
  Checkpoint c;
  c.fingerprint = 0x1234;
  c.tensors["params"] = {1.5f, -2.0f, 3.25f};
  c.tensors["optimizer.velocity"] = {0.0f, 1.0f, 2.0f};
  c.meta["step"] = "42";
  saveCheckpoint(path, c);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  const Checkpoint loaded = loadCheckpoint(path);
  CHECK(loaded.fingerprint == 0x1234);
  CHECK(loaded.tensor("params") == c.tensors["params"]);
  CHECK(loaded.metaInt("step") == 42);
  CHECK_THROWS_AS(loaded.metaInt("epoch"), Error);

  // Flip one byte in the middle: the CRC catches it and the message names the file.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto writeVariant = [&](const std::string& name, std::string content) {
    const std::string p = (dir.path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  CHECK_THROWS_WITH_AS(loadCheckpoint(writeVariant("flipped", flipped)), doctest::Contains("CRC-32 mismatch"), Error);
  CHECK_THROWS_WITH_AS(loadCheckpoint(writeVariant("short", bytes.substr(0, 10))), doctest::Contains("short"), Error);
  std::string badMagic = bytes;
  badMagic[0] = 'X';
  CHECK_THROWS_WITH_AS(loadCheckpoint(writeVariant("magic", badMagic)), doctest::Contains("not a gossamer checkpoint"), Error);
  CHECK_THROWS_WITH_AS(loadCheckpoint((dir.path / "missing").string()), doctest::Contains("missing"), Error);
}

TEST_CASE("train: resuming from a checkpoint continues exactly where training stopped") {
  TempDir dir;
  const std::string path = (dir.path / "peer.ckpt").string();
  const data::Dataset train = smallSynthetic(1);
  auto compute = kernels::cpu::makeCompute();
  models::Mlp model(*compute, {.inputs = 12, .hidden = {8}, .classes = 3, .maxBatch = 32});
  const OptimizerOptions adam{.kind = OptimizerKind::kAdam, .lr = 0.01f};

  Learner straight(*compute, model, adam, train, allIndices(train), 32, 9);
  for (int i = 0; i < 50; ++i) straight.step();  // crosses an epoch boundary (19 batches/epoch)

  Learner first(*compute, model, adam, train, allIndices(train), 32, 9);
  for (int i = 0; i < 23; ++i) first.step();
  saveCheckpoint(path, first.checkpoint());
  Learner resumed(*compute, model, adam, train, allIndices(train), 32, 9);
  resumed.restore(loadCheckpoint(path));
  CHECK(resumed.steps() == 23);
  for (int i = 0; i < 27; ++i) resumed.step();

  CHECK(hostCopy(resumed.params()) == hostCopy(straight.params()));  // bit-identical on the CPU
  CHECK(resumed.samples() == straight.samples());
}

TEST_CASE("train: a mismatched checkpoint is refused and nothing is loaded") {
  const data::Dataset train = smallSynthetic(1);
  auto compute = kernels::cpu::makeCompute();
  models::Mlp small(*compute, {.inputs = 12, .hidden = {8}, .classes = 3, .maxBatch = 32});
  models::Mlp wide(*compute, {.inputs = 12, .hidden = {9}, .classes = 3, .maxBatch = 32});
  Learner a(*compute, small, {.kind = OptimizerKind::kMomentum}, train, allIndices(train), 32, 1);
  Learner b(*compute, wide, {.kind = OptimizerKind::kMomentum}, train, allIndices(train), 32, 2);
  const std::vector<float> before = hostCopy(b.params());
  CHECK_THROWS_WITH_AS(b.restore(a.checkpoint()), doctest::Contains("different model layout"), Error);
  CHECK(hostCopy(b.params()) == before);

  Learner sgd(*compute, small, {.kind = OptimizerKind::kSgd}, train, allIndices(train), 32, 1);
  Checkpoint fromMomentum = a.checkpoint();
  CHECK_THROWS_WITH_AS(sgd.restore(fromMomentum), doctest::Contains("optimizer 'momentum'"), Error);

  Checkpoint truncated = a.checkpoint();
  truncated.tensors["params"].pop_back();
  const std::vector<float> aBefore = hostCopy(a.params());
  CHECK_THROWS_AS(a.restore(truncated), Error);
  CHECK(hostCopy(a.params()) == aBefore);
}

TEST_CASE("train: the training loop learns a synthetic problem and logs JSON lines") {
  TempDir dir;
  const Registry registry = algorithms::makeRegistry();
  const auto data = syntheticPair();
  runtime::PeerConfig config = singlePeer(5);
  config.training.evalEvery = 20;
  config.training.metricsPath = (dir.path / "metrics.jsonl").string();
  // The model before training: the same seed gives the same initial params.
  auto compute = kernels::cpu::makeCompute();
  models::Mlp model(*compute, {.inputs = 12, .hidden = {16}, .classes = 3, .maxBatch = 64});
  Learner initial(*compute, model, config.training.optimizer, data->train, allIndices(data->train),
                  32, 3);
  const EvalResult before = Evaluator(*compute, model, data->test).run(initial.params());

  runtime::Peer peer(config, registry, data);
  const runtime::PeerResult result = peer.run();
  CHECK(result.steps == 5 * 19);  // 600 samples in batches of 32: 19 a pass
  CHECK(result.epochs == doctest::Approx(5));
  CHECK(result.testLoss < before.meanLoss());
  CHECK(result.testAccuracy > 0.9);
  CHECK(result.bytesSent == 0);  // alone: nothing to exchange

  std::ifstream in(config.training.metricsPath);
  std::string line;
  int evals = 0, finals = 0;
  while (std::getline(in, line)) {
    CHECK(line.front() == '{');
    CHECK(line.back() == '}');
    evals += line.find("\"event\":\"eval\"") != std::string::npos;
    finals += line.find("\"event\":\"final\"") != std::string::npos;
  }
  CHECK(evals == 5);  // steps 20, 40, 60, 80 and the last
  CHECK(finals == 1);
}

TEST_CASE("train: a stop request ends training at the next step boundary, then it finishes") {
  const Registry registry = algorithms::makeRegistry();
  runtime::PeerConfig config = singlePeer(100);
  config.training.minStepTime = std::chrono::milliseconds(20);
  runtime::Peer peer(config, registry, syntheticPair());
  std::thread stopper([&] {
    while (peer.status().step < 7) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    peer.requestStop();
  });
  const runtime::PeerResult result = peer.run();
  stopper.join();
  CHECK(result.stopped);
  CHECK(result.steps >= 7);
  CHECK(result.steps < 100 * 19);
  CHECK(result.testAccuracy > 0);  // the final evaluation still ran
}

TEST_CASE("train: MLP loss decreases on a small Fashion-MNIST subset") {
  if (!fs::exists(data::kFashionMnistDir)) {
    MESSAGE("skipping: " << data::kFashionMnistDir << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  const Registry registry = makeBuiltinRegistry();
  const DatasetPair data = registry.datasets.get("fashion-mnist")({.trainSamples = 2048, .testSamples = 1000});
  auto compute = kernels::cpu::makeCompute();
  models::Mlp model(*compute, {.inputs = 784, .hidden = {64}, .classes = 10, .maxBatch = 256});
  Learner learner(*compute, model, {.kind = OptimizerKind::kMomentum, .lr = 0.05f}, data.train,
                  allIndices(data.train), 64, 1);
  Evaluator evaluator(*compute, model, data.test);
  const EvalResult before = evaluator.run(learner.params());
  double firstEpochLoss = 0, lastEpochLoss = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    double sum = 0;
    for (int i = 0; i < 32; ++i) sum += learner.step();
    (epoch == 0 ? firstEpochLoss : lastEpochLoss) = sum / 32;
  }
  const EvalResult after = evaluator.run(learner.params());
  CHECK(lastEpochLoss < 0.8 * firstEpochLoss);
  CHECK(after.lossSum < before.lossSum);
  CHECK(static_cast<double>(after.correct) / static_cast<double>(after.samples) > 0.6);
}

}  // namespace
}  // namespace gossamer::engine::train
