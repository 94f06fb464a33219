// gossamer-peer: one peer process. For now it trains a single peer on its data shard; the
// peer-runtime issue adds the seed list, the network and the decentralized algorithms.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/builtin.h"
#include "engine/data/sharding.h"
#include "engine/train/trainer.h"

namespace {

using namespace gossamer;

struct PeerOptions {
  std::string model = "mlp";
  std::vector<std::size_t> hidden = {256, 256};
  std::string dataset = "fashion-mnist";
  std::string dataDir;
  std::size_t trainSamples = 0;
  std::size_t testSamples = 0;
  std::size_t shards = 1;
  std::size_t shardIndex = 0;
  std::string split = "iid";
  double dirichletAlpha = 0.5;
  std::string device = "cpu";
  std::string optimizer = "momentum";
  engine::train::OptimizerOptions optimizerOptions;
  std::size_t batch = 64;
  std::uint64_t seed = 1;
  engine::train::TrainOptions train;
  std::string logLevel = "info";
  bool json = false;
};

void addOptions(CLI::App& app, PeerOptions& o, const engine::Registry& registry) {
  app.set_config("--config", "", "read flags from a TOML/INI config file (CLI11 format)");
  app.add_option("--model", o.model, "model:\n" + registry.models.describe())
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden layer widths of the MLP, e.g. 256,256")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--dataset", o.dataset, "dataset:\n" + registry.datasets.describe())
      ->capture_default_str();
  app.add_option("--data-dir", o.dataDir, "directory of the dataset files (default: the "
                                          "dataset's install location)");
  app.add_option("--train-samples", o.trainSamples, "use only the first N training samples (0: all)");
  app.add_option("--test-samples", o.testSamples, "use only the first N test samples (0: all)");
  app.add_option("--shards", o.shards, "split the training set into this many shards")
      ->check(CLI::PositiveNumber);
  app.add_option("--shard-index", o.shardIndex, "train on this shard (0-based)");
  app.add_option("--split", o.split, "how shards are drawn: iid or dirichlet")
      ->check(CLI::IsMember({"iid", "dirichlet"}))
      ->capture_default_str();
  app.add_option("--dirichlet-alpha", o.dirichletAlpha, "label skew of the dirichlet split "
                                                        "(smaller: more skewed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", o.device, "compute device: cpu or cuda (falls back to cpu, with a "
                                       "warning, when no CUDA device is usable)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "local optimizer: sgd, momentum, nesterov or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "nesterov", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", o.optimizerOptions.lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", o.optimizerOptions.momentum, "momentum coefficient")
      ->capture_default_str();
  app.add_option("--weight-decay", o.optimizerOptions.weightDecay, "L2 weight decay")
      ->capture_default_str();
  app.add_option("--epochs", o.train.epochs, "passes over this peer's shard")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "mini-batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, sharding and shuffling")
      ->capture_default_str();
  app.add_option("--eval-every", o.train.evalEvery, "steps between test evaluations (0: each epoch)");
  app.add_option("--eval-samples", o.train.evalSamples,
                 "test samples per periodic evaluation (0: all; the final one uses all)");
  app.add_option("--metrics", o.train.metricsPath, "append JSON-lines metrics to this file");
  app.add_option("--checkpoint", o.train.checkpointPath, "checkpoint file (written atomically)");
  app.add_option("--checkpoint-every", o.train.checkpointEvery,
                 "steps between checkpoints (0: only at the end)");
  app.add_flag("--resume", o.train.resume, "continue from --checkpoint");
  app.add_option("--log-level", o.logLevel, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object with the results as the last stdout line "
                                 "(and no progress view)");
}

int run(const PeerOptions& o, const engine::Registry& registry) {
  log::setLevel(o.logLevel);
  auto logger = log::get("engine");
  GOSSAMER_ENFORCE(o.shardIndex < o.shards, "--shard-index {} must be below --shards {}",
                   o.shardIndex, o.shards);
  GOSSAMER_ENFORCE(!o.train.resume || !o.train.checkpointPath.empty(),
                   "--resume needs --checkpoint FILE");

  const engine::DatasetPair data = registry.datasets.get(o.dataset)(
      {.dataDir = o.dataDir, .trainSamples = o.trainSamples, .testSamples = o.testSamples, .seed = o.seed});
  auto compute = engine::makeCompute(engine::parseDevice(o.device));
  auto model = registry.models.get(o.model)(
      *compute, {.inputs = data.train.features,
                 .classes = data.train.classes,
                 .hidden = o.hidden,
                 .maxBatch = std::max<std::size_t>(o.batch, 256)});
  const auto shards = engine::data::shardIndices(
      data.train.labels, data.train.classes,
      {.shards = o.shards, .kind = engine::data::parseSplitKind(o.split),
       .dirichletAlpha = o.dirichletAlpha, .seed = o.seed});

  engine::train::OptimizerOptions optimizer = o.optimizerOptions;
  optimizer.kind = engine::train::parseOptimizerKind(o.optimizer);
  engine::train::Learner learner(*compute, *model, optimizer, data.train, shards[o.shardIndex],
                                 o.batch, o.seed);
  engine::train::Evaluator evaluator(*compute, *model, data.test);
  logger->info("{} ({} parameters) on {}; {} training samples (shard {}/{}), {} test samples",
               model->name(), model->parameterCount(), compute->describe(),
               shards[o.shardIndex].size(), o.shardIndex, o.shards, data.test.count());

  engine::train::TrainOptions train = o.train;
  train.progress = !o.json;
  const engine::train::TrainResult result = engine::train::train(learner, evaluator, train);
  logger->info("done: test accuracy {:.2f}%, test loss {:.4f}, {} steps in {:.1f}s ({:.0f} samples/s)",
               100 * result.testAccuracy, result.testLoss, result.steps, result.wallSeconds,
               result.samplesPerSecond);
  if (o.json) {
    std::cout << JsonObject()
                     .add("model", model->name())
                     .add("parameters", model->parameterCount())
                     .add("dataset", o.dataset)
                     .add("device", compute->describe())
                     .add("optimizer", o.optimizer)
                     .add("lr", std::stod(fmt::format("{}", optimizer.lr)))  // 0.05, not 0.0500000007
                     .add("batch", o.batch)
                     .add("epochs", result.epochs)
                     .add("steps", result.steps)
                     .add("samples", result.samples)
                     .add("train_loss", result.trainLoss)
                     .add("test_loss", result.testLoss)
                     .add("test_accuracy", result.testAccuracy)
                     .add("wall_s", result.wallSeconds)
                     .add("samples_per_s", result.samplesPerSecond)
                     .str()
              << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const engine::Registry registry = engine::makeBuiltinRegistry();
  CLI::App app{"gossamer-peer " GOSSAMER_VERSION ": one peer of a decentralized training cluster"};
  PeerOptions options;
  addOptions(app, options, registry);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options, registry);
  } catch (const gossamer::Error& e) {
    fmt::print(stderr, "gossamer-peer: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gossamer-peer: unexpected error: {}\n", e.what());
    return 1;
  }
}
