// `gossamer-bench convergence`: "which decentralized optimizer should I use on my network?"
// Runs a matrix of experiments (convergence_config.h) on the same task with the same seeds and
// shards, each a local cluster (engine/runtime/cluster.h) over an emulated network, and writes to
// --out DIR:
//   points.csv, points.jsonl   every evaluation of every experiment (wall time, steps, samples,
//                              bytes per peer, time blocked on communication, consensus accuracy
//                              and loss, min/mean peer accuracy, consensus distance)
//   summary.csv                one row per experiment
//   report.md                  the summary table (time and steps to the target accuracy, final
//                              accuracy, bytes per peer, speed-up versus allreduce-sgd on the same
//                              network), the shared settings and every algorithm's options, and
//   *.png                      accuracy against wall time, steps and bytes, and consensus distance
//                              against steps: one line per algorithm, one figure per network (and
//                              peer count and split), drawn by bench/plot_convergence.py with
//                              matplotlib (Debian's python3-matplotlib, installed by run.sh).
// With peer-step-times each experiment also runs its even reference (every peer at the fastest
// step time), for time_vs_ideal and min_fast_peer_utilization (bench/uneven_figures.h).
// The baseline is allreduce-sgd in the same run: speed-ups are ratios of time to target.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "algorithms/builtin.h"
#include "bench/benchmarks.h"
#include "bench/convergence_config.h"
#include "bench/convergence_report.h"
#include "bench/uneven_figures.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/base/process_memory.h"
#include "engine/runtime/cluster.h"
#include "engine/train/progress.h"
#include "net/shaped/profile.h"

namespace gossamer::bench {
namespace {

using engine::runtime::ClusterResult;
using engine::runtime::EvalPoint;

struct ConvergenceOptions {
  std::string preset = "quick";
  std::string configPath;
  std::string out = "convergence-report";
  bool printConfig = false;
  bool json = false;
  std::string logLevel = "warn";
};

// Training samples per second of one peer alone (algorithm "none") with the experiment's model,
// batch and step time: the denominator of scalability. `steps` steps, after one to warm up.
double singlePeerSamplesPerSecond(const RunSettings& run, const Experiment& e,
                                  const engine::Registry& registry,
                                  std::shared_ptr<const engine::DatasetPair> data,
                                  std::uint64_t steps) {
  Experiment alone = e;
  alone.algorithm = "none";
  alone.topology.clear();
  alone.network = "lan";
  alone.peers = 1;
  alone.options.clear();
  engine::runtime::ClusterConfig config = clusterConfig(run, alone);
  config.peer.training.maxSteps = steps;
  config.evalEvery = 0;  // only its speed counts
  config.evalInterval = {};
  const ClusterResult result = engine::runtime::runLocalCluster(config, registry, std::move(data));
  return result.peers.front().samplesPerSecond;
}

Outcome runExperiment(const RunSettings& run, const Experiment& e, const engine::Registry& registry,
                      std::shared_ptr<const engine::DatasetPair> data,
                      const std::function<void(double fraction)>& onProgress) {
  Outcome outcome;
  outcome.experiment = e;
  engine::runtime::ClusterConfig config = clusterConfig(run, e);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  bool stopped = false;
  config.stopRequested = [&] {
    onProgress(std::min(1.0, elapsed() / run.maxSeconds));
    if (elapsed() > run.maxSeconds) stopped = true;
    return stopped;
  };
  resetPeakRss();  // this experiment's own peak
  try {
    const ClusterResult result =
        engine::runtime::runLocalCluster(config, registry, std::move(data));
    outcome.curve = result.curve;
    outcome.final = result.curve.back();
    outcome.utilization = outcome.final.utilization;
    outcome.chosen = chosenOptions(result.peers.front().metrics);
    outcome.topology = result.peers.front().topology;
    outcome.stoppedEarly = stopped;
    for (const engine::runtime::PeerResult& r : result.peers) {
      outcome.peakBytesPerPeer = std::max(outcome.peakBytesPerPeer, r.peakBytes);
      outcome.modelBytes = std::max(outcome.modelBytes, r.modelBytes());
    }
    outcome.peakRssBytes = peakRssBytes();
    readTargets(outcome, run);
    std::vector<double> waits;
    for (const engine::runtime::PeerResult& r : result.peers) waits.push_back(r.commWaitFraction);
    outcome.uneven.minFastPeerUtilization = minFastPeerUtilization(run.peerStepTimes, waits);
  } catch (const std::exception& error) {
    outcome.error = error.what();
  }
  return outcome;
}

// Scalability of every experiment against one peer alone with the same step time (measured once
// per step time, over as many steps as the shortest experiment made, at most 50).
void computeScalability(std::vector<Outcome>& outcomes, const RunSettings& run,
                        const engine::Registry& registry,
                        const std::shared_ptr<const engine::DatasetPair>& data) {
  std::map<double, double> single;  // step time -> samples/s of one peer
  for (Outcome& o : outcomes) {
    if (!o.error.empty() || o.final.wallSeconds <= 0) continue;
    const double stepTime = o.experiment.stepTime;
    if (!single.count(stepTime)) {
      std::uint64_t steps = 50;
      for (const Outcome& other : outcomes)
        if (other.error.empty() && other.experiment.stepTime == stepTime)
          steps = std::min<std::uint64_t>(steps, std::max<std::uint64_t>(other.final.maxStep, 5));
      single[stepTime] = singlePeerSamplesPerSecond(run, o.experiment, registry, data, steps);
    }
    const double cluster = static_cast<double>(o.final.samples) / o.final.wallSeconds;
    o.scalability =
        cluster / (static_cast<double>(o.experiment.peers) * std::max(single[stepTime], 1e-9));
  }
}

// The title, the command and what every experiment of the matrix does, for report.md.
std::string reportHeader(const RunSettings& run, const std::string& command) {
  std::string md = "# gossamer convergence report\n\n";
  md += fmt::format("Produced by `{}`.\n\n", command);
  md += fmt::format(
      "Every experiment trains {} on {} with {} (lr {}, {} schedule), batch {} per peer, "
      "for {} passes of the cluster over the training set or {} s of wall time, whichever "
      "comes first; the consensus model (the average of the peers' models) is evaluated on "
      "{} test samples {}, and on the whole test set at the end. Target accuracy: "
      "{:.0f}%. Speed-up: {}'s time to target on the same network, peers and "
      "split divided by the experiment's (\">x\": {} did not reach the target in "
      "its run, so at least x). Comm wait: the time each peer's compute thread waited on the "
      "others (gathers, requests, pulls, inbox waits, send back-pressure, the finish barrier) "
      "over its training and finish time. Utilization: time in compute (gradients, optimizer, "
      "the emulated step time) over the same time. Scalability (seed 002): the cluster's "
      "training samples per second over N times those of one peer alone with the same model "
      "and step time. Peak memory / model: the largest peer's tracked allocations at their "
      "peak (model, gradients, activations, optimizer and algorithm buffers, staging and "
      "receive pools) over the model's bytes.\n\n",
      modelDescription(run), run.dataset, run.optimizer, run.lr, run.schedule, run.batch,
      run.epochs, run.maxSeconds, run.evalSamples, evaluationNote(run), 100 * run.target,
      run.baseline, run.baseline);
  return md;
}

// Runs one block's experiments and writes its points, summary, figures and report into `dir`.
std::vector<Outcome> runBlock(const Matrix& matrix, const fs::path& dir,
                              const engine::Registry& registry, const std::string& command,
                              bool json) {
  const std::vector<Experiment> experiments = matrix.experiments();
  fs::create_directories(dir);
  { std::ofstream(dir / "experiments.conf") << formatMatrix(matrix); }
  { std::ofstream(dir / "command.txt") << command << "\n"; }
  const auto data = loadData(matrix.run, registry);
  std::vector<std::string> splits;
  for (const Split& s : matrix.splits) splits.push_back(s.name());
  fmt::print(
      "convergence: {} experiments ({} x {} x {} x {} peers x {}), up to {:.0f} s each; baseline: "
      "{} on the same network; results in {}\n",
      experiments.size(), fmt::join(matrix.algorithms, "/"), fmt::join(matrix.topologies, "/"),
      fmt::join(matrix.networks, "/"), fmt::join(matrix.peers, "/"), fmt::join(splits, "/"),
      matrix.run.maxSeconds, matrix.run.baseline, dir.string());
  if (std::find(matrix.algorithms.begin(), matrix.algorithms.end(), matrix.run.baseline) ==
      matrix.algorithms.end())
    log::get("bench")->warn("the baseline {} is not among the algorithms: no speed-ups",
                            matrix.run.baseline);
  std::fflush(stdout);

  engine::train::Progress progress(static_cast<std::int64_t>(experiments.size() * 1000), !json);
  std::vector<Outcome> outcomes;
  for (std::size_t i = 0; i < experiments.size(); ++i) {
    const Experiment& e = experiments[i];
    auto onProgress = [&](double fraction) {
      progress.update(static_cast<std::int64_t>(i * 1000 + fraction * 999),
                      fmt::format("{}/{} {}", i + 1, experiments.size(), e.name()));
    };
    onProgress(0);
    Outcome outcome = runExperiment(matrix.run, e, registry, data, onProgress);
    progress.message(
        outcome.error.empty()
            ? fmt::format("{}: {:.2f}% after {:.1f} s ({} steps){}", e.name(),
                          100 * outcome.final.consensus.accuracy, outcome.final.wallSeconds,
                          outcome.final.maxStep,
                          std::isnan(outcome.timeToTarget)
                              ? std::string(", target not reached")
                              : fmt::format(", {:.0f}% at {:.1f} s", 100 * matrix.run.target,
                                            outcome.timeToTarget))
            : fmt::format("{}: FAILED: {}", e.name(), outcome.error));
    if (!matrix.run.peerStepTimes.empty() && outcome.error.empty()) {
      const auto [even, reference] = evenReference(matrix.run, e);
      const Outcome base = runExperiment(even, reference, registry, data, onProgress);
      outcome.uneven.referenceTimeToTarget = base.timeToTarget;
      outcome.uneven.timeVsIdeal =
          timeVsIdeal(outcome.timeToTarget, base.timeToTarget, matrix.run.peerStepTimes, e.peers);
      progress.message(
          fmt::format("  {}", describeUneven(outcome.uneven, matrix.run.peerStepTimes)));
    }
    outcomes.push_back(std::move(outcome));
    // Partial results survive an interrupted matrix.
    writePoints(dir, outcomes);
  }
  progress.finish();
  computeSpeedups(outcomes, matrix.run);
  computeScalability(outcomes, matrix.run, registry, data);
  writePoints(dir, outcomes);
  writeSummary(dir, outcomes, matrix.run);
  const std::vector<std::string> figures = plot(dir, matrix.run);
  writeReport(dir, outcomes, matrix, registry, reportHeader(matrix.run, command), figures);
  fmt::print("report: {}\n", (dir / "report.md").string());
  return outcomes;
}

void runConvergence(const ConvergenceOptions& o, const std::string& command) {
  log::setLevel(o.logLevel);
  const std::vector<Block> blocks = o.configPath.empty()
                                        ? presetBlocks(o.preset)
                                        : std::vector<Block>{{"", loadMatrix(o.configPath)}};
  if (o.printConfig) {
    for (const Block& block : blocks) {
      if (blocks.size() > 1) fmt::print("# block {}\n", block.name);
      fmt::print("{}", formatMatrix(block.matrix));
      if (blocks.size() > 1) fmt::print("\n");
    }
    return;
  }
  const engine::Registry registry = algorithms::makeRegistry();
  for (const Block& block : blocks) {
    for (const Experiment& e : block.matrix.experiments()) {
      // Fail on a typo before hours of running, not at experiment 37.
      registry.algorithms.get(e.algorithm).make(e.options);
      if (!e.topology.empty()) registry.topologies.get(e.topology);
      net::shaped::NetworkProfile::fromSpec(e.network);
    }
  }
  // One block writes into --out; several write one folder each, and --out gets an index.
  const fs::path dir = o.out;
  std::vector<Outcome> outcomes;
  for (const Block& block : blocks) {
    const fs::path blockDir = blocks.size() == 1 ? dir : dir / block.name;
    std::vector<Outcome> done = runBlock(block.matrix, blockDir, registry, command, o.json);
    outcomes.insert(outcomes.end(), std::make_move_iterator(done.begin()),
                    std::make_move_iterator(done.end()));
  }
  if (blocks.size() > 1) {
    std::ofstream md(dir / "report.md");
    md << "# gossamer convergence report\n\n";
    md << fmt::format("Produced by `{}`, in {} blocks, each with its own settings:\n\n", command,
                      blocks.size());
    for (const Block& block : blocks)
      md << fmt::format("- [{0}]({0}/report.md): {1} experiments, {2} ms step time\n", block.name,
                        block.matrix.experiments().size(), block.matrix.run.stepTime);
    fmt::print("report: {}\n", (dir / "report.md").string());
  }
  if (o.json) {
    // {"experiments": [{...}, ...]}: null where a figure does not exist.
    std::vector<std::string> rows;
    for (const Outcome& out : outcomes) {
      const Experiment& e = out.experiment;
      const bool ok = out.error.empty();
      rows.push_back(
          JsonObject()
              .add("algorithm", e.algorithm)
              .add("network", e.network)
              .add("peers", static_cast<std::uint64_t>(e.peers))
              .add("step_time_ms", e.stepTime)
              .add("compress", e.compress)
              .add("split", e.split.name())
              .add("time_to_target_s", out.timeToTarget)
              .add("steps_to_target", out.stepsToTarget)
              .add("time_to_target_loss_s", out.timeToTargetLoss)
              .add("baseline", out.baseline)
              .add("speedup_vs_baseline", out.speedup)
              .add("scalability", out.scalability)
              .add("utilization", out.utilization)
              .add("chosen", out.chosen)
              .add("comm_wait_fraction", ok ? out.final.commWaitFraction : kNaN)
              .add("final_accuracy", ok ? out.final.consensus.accuracy : kNaN)
              .add("bytes_per_peer", ok ? out.final.bytesSentPerPeer : kNaN)
              .add("bytes_to_target", out.bytesToTarget)
              .add("bytes_ratio_vs_baseline", out.bytesRatio)
              .add("peak_bytes_per_peer", static_cast<std::uint64_t>(out.peakBytesPerPeer))
              .add("peak_memory_vs_model", out.peakMemoryVsModel())
              .add("peak_rss_bytes", static_cast<std::uint64_t>(out.peakRssBytes))
              .add("time_vs_ideal", out.uneven.timeVsIdeal)
              .add("min_fast_peer_utilization", out.uneven.minFastPeerUtilization)
              .str());
    }
    fmt::print("{{\"experiments\": [{}]}}\n", fmt::join(rows, ", "));
  }
}

}  // namespace

void addConvergenceCommand(CLI::App& app) {
  auto options = std::make_shared<ConvergenceOptions>();
  CLI::App* command = app.add_subcommand(
      "convergence",
      "a matrix of algorithms x topologies x networks x peers x splits on one task: "
      "accuracy against time, steps and bytes, with a Markdown report and plots");
  command
      ->add_option("--preset", options->preset,
                   "quick (minutes), full, or seed002 (a model of ResNet-50's size at a 300 ms "
                   "step time, as in seed 002)")
      ->check(CLI::IsMember({"quick", "full", "seed002"}))
      ->capture_default_str();
  command->add_option("--config", options->configPath,
                      "an experiment file instead of a preset "
                      "(--print-config shows the format)");
  command->add_option("--out", options->out, "output directory")->capture_default_str();
  command->add_flag("--print-config", options->printConfig,
                    "print the experiments as a config file and exit");
  command->add_flag("--json", options->json,
                    "headline figures as one JSON object on the last stdout line (with "
                    "peer-step-times: time_vs_ideal and min_fast_peer_utilization too)");
  command->add_option("--log-level", options->logLevel, "log level of the peers")
      ->capture_default_str();
  command->footer(experimentFileHelp());
  command->callback([options, command] {
    std::string line = "gossamer-bench convergence";
    if (!options->configPath.empty()) {
      line += " --config " + options->configPath;
    } else {
      line += " --preset " + options->preset;
    }
    line += " --out " + options->out;
    runConvergence(*options, line);
  });
}

}  // namespace gossamer::bench
