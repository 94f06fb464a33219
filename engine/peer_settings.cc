// The settings of the model, the data and the training (peer_settings.h), and the look-ups the
// front ends share.
#include "engine/peer_settings.h"

#include <fmt/format.h>

#include "engine/peer_settings_declare.h"

namespace gossamer::engine::cli {
namespace declaring {

void addTrainingSettings(std::vector<Setting>& out, const Registry& registry) {
  auto add = [&out]<typename T>(std::type_identity<T>, std::string name, std::string help) {
    return Declare<T>(out, std::move(name), std::move(help), "");
  };
  constexpr std::type_identity<std::string> text;
  constexpr std::type_identity<std::size_t> count;
  constexpr std::type_identity<double> number;
  constexpr std::type_identity<bool> boolean;

  constexpr unsigned both = kSimulate | kRun;  // the benchmarks' front ends

  add(text, "model", "model:\n" + registry.models.describe())
      .field(&PeerOptions::model)
      .bench(both);
  add(std::type_identity<std::vector<std::size_t>>{}, "hidden",
      "hidden layer widths of the MLP, e.g. 256,256")
      .field(&PeerOptions::hidden)
      .bench(both);
  add(text, "dataset", "dataset:\n" + registry.datasets.describe())
      .field(&PeerOptions::dataset)
      .bench(both);
  add(text, "data-dir", "directory of the dataset files (default: the dataset's install location)")
      .field(&PeerOptions::dataDir);
  add(count, "train-samples", "use only the first N training samples (0: all)")
      .field(&PeerOptions::trainSamples)
      .bench(both);
  add(count, "test-samples", "use only the first N test samples (0: all)")
      .field(&PeerOptions::testSamples)
      .bench(both);
  add(count, "shards", "single peer: split the training set into this many shards")
      .field(&PeerOptions::shards)
      .above(0);
  add(count, "shard-index", "single peer: train on this shard (0-based)")
      .field(&PeerOptions::shardIndex);
  add(text, "split", "how shards are drawn: iid or dirichlet")
      .field(&PeerOptions::split)
      .oneOf({"iid", "dirichlet"});
  add(number, "dirichlet-alpha", "label skew of the dirichlet split (smaller: more skewed)")
      .field(&PeerOptions::dirichletAlpha)
      .above(0);
  add(text, "device",
      "compute device: auto (CUDA when a GPU is usable, else the CPU, logging why), cpu, or cuda "
      "(fails at start, with the reason, when no GPU is usable)")
      .field(&PeerOptions::device)
      .oneOf({"auto", "cpu", "cuda"});
  add(text, "optimizer", "local optimizer: sgd, momentum, nesterov or adam")
      .field(&PeerOptions::optimizer)
      .oneOf({"sgd", "momentum", "nesterov", "adam"})
      .bench(both)
      .python("optimizer", [](PeerConfig& c, const std::string& v) {
        c.training.optimizer.kind = engine::train::parseOptimizerKind(v);
      });
  add(std::type_identity<float>{}, "lr", "learning rate")
      .field([](PeerOptions& o) -> float& { return o.optimizerOptions.lr; })
      .bench(both)
      .python("lr", [](PeerConfig& c, float v) { c.training.optimizer.lr = v; });
  add(text, "lr-schedule", "constant or cosine (decays to 0 at the last step)")
      .field(&PeerOptions::lrSchedule)
      .oneOf({"constant", "cosine"})
      .bench(both, "schedule")
      .python(
          "lr_schedule",
          [](PeerConfig& c, const std::string& v) {
            c.training.schedule.kind = engine::train::parseLrSchedule(v);
          },
          "constant (default) or cosine, over the run's steps");
  add(std::type_identity<std::uint64_t>{}, "warmup-steps", "linear learning-rate warm-up steps")
      .field(&PeerOptions::warmupSteps);
  add(std::type_identity<float>{}, "momentum", "momentum coefficient")
      .field([](PeerOptions& o) -> float& { return o.optimizerOptions.momentum; })
      .python("momentum", [](PeerConfig& c, float v) { c.training.optimizer.momentum = v; });
  add(std::type_identity<float>{}, "weight-decay", "L2 weight decay")
      .field([](PeerOptions& o) -> float& { return o.optimizerOptions.weightDecay; })
      .python("weight_decay", [](PeerConfig& c, float v) { c.training.optimizer.weightDecay = v; });
  add(number, "epochs", "passes over the training set (a cluster: of all its peers together)")
      .field(&PeerOptions::epochs)
      .above(0)
      .bench(kRun);
  add(std::type_identity<std::uint64_t>{}, "steps",
      "a cluster: stop after this many steps per peer instead")
      .field(&PeerOptions::maxSteps)
      .hideDefault()
      .bench(both, "", "steps of every peer, instead of epochs (0: by epochs)")
      .python(
          "steps",
          [](PeerConfig& c, std::uint64_t v) {
            GOSSAMER_ENFORCE(v > 0, "steps must be at least 1, not {}", v);
            c.training.maxSteps = v;
          },
          "steps of this run (required; the same on every peer)");
  add(count, "batch", "mini-batch size")
      .field(&PeerOptions::batch)
      .above(0)
      .bench(both, "", "mini-batch size per peer")
      .python(
          "batch", [](PeerConfig& c, std::size_t v) { c.training.batch = v; },
          "samples per step, for the figures (default 64)");
  add(std::type_identity<std::uint64_t>{}, "seed", "seed of initialisation, sharding and shuffling")
      .field(&PeerOptions::seed)
      .bench(both, "",
             "seed of everything: initialisation, shards, shuffling (and the simulated links and "
             "faults)")
      .python(
          "seed",
          [](PeerConfig& c, std::uint64_t v) {
            c.training.seed = v;
            c.training.topologyOptions.seed = v;
          },
          "run seed: rng of the algorithm and topology (default 1)");
  add(std::type_identity<std::int64_t>{}, "eval-every",
      "steps between evaluations of this peer's model on the test set (0: none; default: each "
      "epoch for a single peer, none for a cluster peer)")
      .field(&PeerOptions::evalEvery)
      .hideDefault()
      .atLeast(-1)
      .python(
          "eval_every", [](PeerConfig& c, std::int64_t v) { c.training.evalEvery = v; },
          "steps between evaluations with `evaluate` (0: none, -1: each epoch)");
  add(count, "eval-samples",
      "test samples per periodic evaluation (0: all; the final one uses all)")
      .field(&PeerOptions::evalSamples)
      .hideDefault()
      .bench(both)
      .python(
          "eval_samples", [](PeerConfig& c, std::size_t v) { c.training.evalSamples = v; },
          "test samples per periodic evaluation (default 2000)");
  add(text, "metrics", "append JSON-lines metrics to this file")
      .field(&PeerOptions::metricsPath)
      .python(
          "metrics_path", [](PeerConfig& c, const std::string& v) { c.training.metricsPath = v; },
          "JSON lines of evaluation events and the final figures");
  add(text, "checkpoint", "single peer: checkpoint file (written atomically)")
      .field(&PeerOptions::checkpointFile);
  add(text, "checkpoint-dir",
      "a cluster peer: directory of its checkpoint DIR/peer-<id>.ckpt (written atomically; params, "
      "optimizer, data position and algorithm state)")
      .field(&PeerOptions::checkpointDir)
      .python("checkpoint_dir",
              [](PeerConfig& c, const std::string& v) { c.training.checkpointDir = v; });
  add(std::type_identity<std::int64_t>{}, "checkpoint-every",
      "steps between checkpoints (0: only at the end)")
      .field(&PeerOptions::checkpointEvery)
      .atLeast(0)
      .bench(kSimulate, "",
             "steps between a peer's checkpoints, kept in memory: a restarted peer resumes from "
             "its last one, as the chaos benchmark's (0: none, it joins late)")
      .python("checkpoint_every",
              [](PeerConfig& c, std::int64_t v) { c.training.checkpointEvery = v; });
  add(boolean, "resume",
      "continue from --checkpoint (single peer) or from this peer's checkpoint in "
      "--checkpoint-dir, "
      "rejoining the cluster (a cluster peer)")
      .field(&PeerOptions::resume)
      .flag()
      .python("resume", [](PeerConfig& c, bool v) { c.training.resume = v; });
  add(text, "log-level", "trace, debug, info, warn, error, off")
      .field(&PeerOptions::logLevel)
      .bench(kSimulate);
  add(boolean, "json",
      "print one JSON object with the results as the last stdout line (and no progress view)")
      .field(&PeerOptions::json)
      .flag();

  // Python only: what gossamer-peer decides by its mode.
  add(boolean, "final-eval", "")
      .python(
          "final_eval", [](PeerConfig& c, bool v) { c.training.finalLocalEval = v; },
          "evaluate this peer's model at the end (default True)");
  add(boolean, "final-consensus", "")
      .python(
          "final_consensus", [](PeerConfig& c, bool v) { c.training.finalConsensus = v; },
          "pull every member's model at the end and evaluate their average");
  add(boolean, "progress", "")
      .python(
          "progress", [](PeerConfig& c, bool v) { c.training.progress = v; },
          "draw a progress bar on stdout");
}

}  // namespace declaring

std::vector<Setting> peerSettings(const Registry& registry) {
  std::vector<Setting> out;
  declaring::addTrainingSettings(out, registry);
  declaring::addClusterSettings(out, registry);
  declaring::addBenchSettings(out);
  return out;
}

const Setting* findSetting(const std::vector<Setting>& settings, const std::string& name) {
  for (const Setting& s : settings) {
    if ((s.set && s.name == name) || (s.apply && s.python == name)) return &s;
    if (s.set)
      for (const std::string& alias : s.aliases)
        if (alias == name) return &s;
  }
  return nullptr;
}

std::string nameIn(const Setting& s, FrontEnd end) {
  switch (end) {
    case kPeerFlags:
      return s.name;
    case kPython:
      return s.python;
    case kMatrix:
      return s.matrixName;
    default:
      return s.benchName.empty() ? s.name : s.benchName;
  }
}

std::vector<std::string> namesIn(const Setting& s, FrontEnd end) {
  std::vector<std::string> out = {nameIn(s, end)};
  if (end == kPeerFlags || (end == kSimulate && s.benchName.empty()))
    out.insert(out.end(), s.aliases.begin(), s.aliases.end());
  if (end == kMatrix) out.insert(out.end(), s.matrixAliases.begin(), s.matrixAliases.end());
  return out;
}

const Setting* findSetting(const std::vector<Setting>& settings, const std::string& name,
                           FrontEnd end) {
  for (const Setting& s : settings) {
    if (!takes(s, end)) continue;
    for (const std::string& known : namesIn(s, end))
      if (known == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> namesIn(const std::vector<Setting>& settings, FrontEnd end) {
  std::vector<std::string> out;
  for (const Setting& s : settings)
    if (takes(s, end))
      for (std::string& name : namesIn(s, end)) out.push_back(std::move(name));
  return out;
}

const std::string& helpIn(const Setting& s, FrontEnd end) {
  if (end == kPython && !s.pythonHelp.empty()) return s.pythonHelp;
  if ((end == kSimulate || end == kRun || end == kMatrix) && !s.benchHelp.empty())
    return s.benchHelp;
  return s.help;
}

std::vector<std::string> pythonKeywords(const std::vector<Setting>& settings) {
  std::vector<std::string> out = {"algorithm_options", "secret"};
  for (const Setting& s : settings)
    if (s.apply) out.push_back(s.python);
  return out;
}

void applyPythonSetting(const std::vector<Setting>& settings, PeerConfig& config,
                        const std::string& keyword, const std::string& text) {
  const Setting* s = findSetting(settings, keyword);
  if (s == nullptr || !s->apply) {
    GOSSAMER_THROW("unknown option '{}'; did you mean '{}'?", keyword,
                   closestName(keyword, pythonKeywords(settings)));
  }
  try {
    s->apply(config, text);
  } catch (const Error& e) {
    GOSSAMER_THROW("{}: {}", keyword, e.what());
  }
}

}  // namespace gossamer::engine::cli
