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
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/runtime/cluster.h"
#include "engine/train/progress.h"
#include "net/shaped/profile.h"

namespace gossamer::bench {
namespace {

namespace fs = std::filesystem;
using engine::runtime::ClusterResult;
using engine::runtime::EvalPoint;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct ConvergenceOptions {
  std::string preset = "quick";
  std::string configPath;
  std::string out = "convergence-report";
  bool printConfig = false;
  bool json = false;
  std::string logLevel = "warn";
};

// What one experiment produced.
struct Outcome {
  Experiment experiment;
  std::string topology;  // the topology's full name, as the runtime built it
  std::string error;     // empty on success
  std::vector<EvalPoint> curve;
  double timeToTarget = kNaN;  // first evaluation at or above the target
  double stepsToTarget = kNaN;
  double bytesToTarget = kNaN;
  // allreduce-sgd's bytes to the target (float32 when in the matrix) over this experiment's.
  double bytesRatio = kNaN;
  EvalPoint final;
  bool stoppedEarly = false;  // the wall-clock budget ended it
  double speedup = kNaN;      // allreduce-sgd's time to target / this one's
  std::string speedupNote;    // ">x" when the baseline never reached the target
  // Seed 002's scalability: the cluster's training samples per second over N peers' worth of a
  // single peer's (same model, batch and step time, no exchange); 1 is perfect scaling.
  double scalability = kNaN;
  double utilization = kNaN;  // time in compute / wall time, mean over the peers
};

std::shared_ptr<const engine::DatasetPair> loadData(const RunSettings& run,
                                                    const engine::Registry& registry) {
  return std::make_shared<const engine::DatasetPair>(registry.datasets.get(run.dataset)(
      {.trainSamples = run.trainSamples, .testSamples = run.testSamples, .seed = run.seed}));
}

engine::runtime::ClusterConfig clusterConfig(const RunSettings& run, const Experiment& e) {
  engine::runtime::ClusterConfig c;
  c.peers = e.peers;
  c.progress = false;
  c.evalInterval = std::chrono::milliseconds(static_cast<std::int64_t>(run.evalSeconds * 1000));
  c.evalSamples = run.evalSamples;
  c.peer.network.transport = run.transport;
  // Loopback inside one process: the runs measure the algorithms, and the recorded figures were
  // taken without TLS (`gossamer-bench transport` measures what TLS costs).
  c.peer.network.security = engine::runtime::NetworkConfig::Security::plaintext;
  c.peer.network.profile = net::shaped::NetworkProfile::fromSpec(e.network);
  engine::runtime::TrainingConfig& t = c.peer.training;
  t.model = run.model;
  t.modelConfig.hidden = run.hidden;
  t.algorithm = e.algorithm;
  t.algorithmOptions = e.options;
  t.topology = e.topology;
  t.optimizer.kind = engine::train::parseOptimizerKind(run.optimizer);
  t.optimizer.lr = static_cast<float>(run.lr);
  t.schedule.kind = engine::train::parseLrSchedule(run.schedule);
  t.batch = run.batch;
  t.epochs = run.epochs;
  t.split = engine::data::parseSplitKind(e.split.kind);
  t.dirichletAlpha = e.split.alpha;
  t.seed = run.seed;
  t.commTimeout = std::chrono::milliseconds(static_cast<std::int64_t>(run.commTimeout * 1000));
  t.finishTimeout = std::chrono::seconds(120);
  t.minStepTime = std::chrono::microseconds(static_cast<std::int64_t>(e.stepTime * 1000));
  t.compression = {kernels::parseCodec(e.compress), run.errorFeedback == "on"};
  return c;
}

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
    if (elapsed() > run.maxSeconds) stopped = true;
    return stopped;
  };
  config.onEval = [&](const EvalPoint& p) {
    onProgress(std::min(1.0, elapsed() / run.maxSeconds));
    if (std::isnan(outcome.timeToTarget) && p.consensus.accuracy >= run.target) {
      outcome.timeToTarget = p.wallSeconds;
      outcome.stepsToTarget = p.meanStep;
      outcome.bytesToTarget = p.bytesSentPerPeer;
    }
  };
  try {
    const ClusterResult result =
        engine::runtime::runLocalCluster(config, registry, std::move(data));
    outcome.curve = result.curve;
    outcome.final = result.curve.back();
    outcome.utilization = outcome.final.utilization;
    outcome.topology = result.peers.front().topology;
    outcome.stoppedEarly = stopped;
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

// Speed-up of every experiment against allreduce-sgd on the same network, peers, split and step
// time: float32 allreduce-sgd when the matrix has it, else allreduce-sgd with the same codec. The
// same baseline's bytes to the target over the experiment's give bytesRatio.
void computeSpeedups(std::vector<Outcome>& outcomes, const RunSettings& run) {
  for (Outcome& o : outcomes) {
    auto baselineWith = [&](const std::string& codec) {
      return std::find_if(outcomes.begin(), outcomes.end(), [&](const Outcome& b) {
        return b.experiment.algorithm == "allreduce-sgd" && b.experiment.compress == codec &&
               b.experiment.network == o.experiment.network &&
               b.experiment.peers == o.experiment.peers &&
               b.experiment.split.name() == o.experiment.split.name() &&
               b.experiment.stepTime == o.experiment.stepTime && b.error.empty();
      });
    };
    auto baseline = baselineWith("none");
    if (baseline == outcomes.end()) baseline = baselineWith(o.experiment.compress);
    if (baseline == outcomes.end() || std::isnan(o.timeToTarget)) continue;
    if (!std::isnan(baseline->bytesToTarget) && o.bytesToTarget > 0)
      o.bytesRatio = baseline->bytesToTarget / o.bytesToTarget;
    if (!std::isnan(baseline->timeToTarget)) {
      o.speedup = baseline->timeToTarget / o.timeToTarget;
      o.speedupNote = fmt::format("{:.2f}x", o.speedup);
    } else {
      // The baseline never got there within its run: at least this much faster.
      o.speedup = baseline->final.wallSeconds / o.timeToTarget;
      o.speedupNote = fmt::format(">{:.1f}x", o.speedup);
    }
  }
  (void)run;
}

void writePoints(const fs::path& dir, const std::vector<Outcome>& outcomes) {
  std::ofstream csv(dir / "points.csv");
  std::ofstream jsonl(dir / "points.jsonl");
  csv << "experiment,algorithm,topology,network,peers,split,final,wall_s,min_step,max_step,mean_"
         "step,"
         "samples,bytes_per_peer,comm_wait_fraction,accuracy,loss,min_peer_accuracy,mean_peer_"
         "accuracy,"
         "consensus_distance\n";
  for (const Outcome& o : outcomes) {
    for (std::size_t i = 0; i < o.curve.size(); ++i) {
      const EvalPoint& p = o.curve[i];
      const bool final = i + 1 == o.curve.size();
      const Experiment& e = o.experiment;
      csv << fmt::format(
          "{},{},{},{},{},{},{},{:.4f},{},{},{:.2f},{},{:.0f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:"
          ".6g}\n",
          e.name(), e.algorithm, o.topology, e.network, e.peers, e.split.name(), final ? 1 : 0,
          p.wallSeconds, p.minStep, p.maxStep, p.meanStep, p.samples, p.bytesSentPerPeer,
          p.commWaitFraction, p.consensus.accuracy, p.consensus.loss, p.consensus.minPeerAccuracy,
          p.consensus.meanPeerAccuracy, p.consensus.distance);
      jsonl << JsonObject()
                   .add("experiment", e.name())
                   .add("algorithm", e.label())
                   .add("topology", o.topology)
                   .add("network", e.network)
                   .add("peers", static_cast<std::uint64_t>(e.peers))
                   .add("split", e.split.name())
                   .add("final", final)
                   .add("wall_s", p.wallSeconds)
                   .add("min_step", p.minStep)
                   .add("max_step", p.maxStep)
                   .add("mean_step", p.meanStep)
                   .add("samples", p.samples)
                   .add("bytes_per_peer", p.bytesSentPerPeer)
                   .add("comm_wait_fraction", p.commWaitFraction)
                   .add("accuracy", p.consensus.accuracy)
                   .add("loss", p.consensus.loss)
                   .add("min_peer_accuracy", p.consensus.minPeerAccuracy)
                   .add("mean_peer_accuracy", p.consensus.meanPeerAccuracy)
                   .add("consensus_distance", p.consensus.distance)
                   .str()
            << "\n";
    }
  }
}

std::string orDash(double value, const char* format) {
  return std::isnan(value) ? "-" : fmt::format(fmt::runtime(format), value);
}

void writeSummary(const fs::path& dir, const std::vector<Outcome>& outcomes,
                  const RunSettings& run) {
  std::ofstream csv(dir / "summary.csv");
  csv << "experiment,algorithm,topology,network,peers,split,time_to_target_s,steps_to_target,"
         "bytes_to_target,final_accuracy,final_min_peer_accuracy,final_distance,wall_s,steps,"
         "bytes_per_peer,comm_wait_fraction,speedup_vs_allreduce,stopped_early,error,step_time_ms,"
         "scalability,utilization\n";
  for (const Outcome& o : outcomes) {
    const Experiment& e = o.experiment;
    csv << fmt::format(
        "{},{},{},{},{},{},{},{},{},{:.5f},{:.5f},{:.6g},{:.3f},{},{:.0f},{:.5f},{},{},\"{}\",{},{}"
        ",{}"
        "\n",
        e.name(), e.algorithm, o.topology, e.network, e.peers, e.split.name(),
        orDash(o.timeToTarget, "{:.3f}"), orDash(o.stepsToTarget, "{:.1f}"),
        orDash(o.bytesToTarget, "{:.0f}"), o.final.consensus.accuracy,
        o.final.consensus.minPeerAccuracy, o.final.consensus.distance, o.final.wallSeconds,
        o.final.maxStep, o.final.bytesSentPerPeer, o.final.commWaitFraction,
        orDash(o.speedup, "{:.3f}"), o.stoppedEarly ? 1 : 0, o.error, e.stepTime,
        orDash(o.scalability, "{:.4f}"), orDash(o.utilization, "{:.4f}"));
  }
  (void)run;
}

void writeReport(const fs::path& dir, const std::vector<Outcome>& outcomes, const Matrix& matrix,
                 const engine::Registry& registry, const std::string& command,
                 const std::vector<std::string>& figures) {
  const RunSettings& run = matrix.run;
  std::ofstream md(dir / "report.md");
  md << "# gossamer convergence report\n\n";
  md << fmt::format("Produced by `{}`.\n\n", command);
  md << fmt::format(
      "Every experiment trains {} on {} with {} (lr {}, {} schedule), batch {} per peer, "
      "for {} passes of the cluster over the training set or {} s of wall time, whichever "
      "comes first; the consensus model (the average of the peers' models) is evaluated on "
      "{} test samples every {} s and on the whole test set at the end. Target accuracy: "
      "{:.0f}%. Speed-up: allreduce-sgd's time to target on the same network, peers and "
      "split divided by the experiment's (\">x\": allreduce-sgd did not reach the target in "
      "its run, so at least x). Utilization: time in compute (gradients, optimizer, the emulated "
      "step time) over wall time. Scalability (seed 002): the cluster's training samples per "
      "second over N times those of one peer alone with the same model and step time.\n\n",
      run.model == "mlp" ? fmt::format("an MLP with hidden layers {}", fmt::join(run.hidden, "-"))
                         : run.model,
      run.dataset, run.optimizer, run.lr, run.schedule, run.batch, run.epochs, run.maxSeconds,
      run.evalSamples, run.evalSeconds, 100 * run.target);
  std::string group;
  for (const Outcome& o : outcomes) {
    const Experiment& e = o.experiment;
    const std::string g =
        fmt::format("{}, {} peers, {} split{}", e.network, e.peers, e.split.name(),
                    e.stepTime > 0 ? fmt::format(", {} ms step time", e.stepTime) : "");
    if (g != group) {
      group = g;
      md << fmt::format("\n## {}\n\n", g);
      md << fmt::format(
          "| algorithm | topology | time to {0:.0f}% | steps to {0:.0f}% | final accuracy | "
          "min peer | bytes/peer | bytes to {0:.0f}% | comm wait | utilization | scalability | "
          "speed-up vs allreduce-sgd |\n",
          100 * run.target);
      md << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    }
    if (!o.error.empty()) {
      md << fmt::format("| {} | {} | failed: {} | | | | | | | | | |\n", e.label(), e.topology,
                        o.error);
      continue;
    }
    md << fmt::format(
        "| {} | {} | {} | {} | {:.2f}%{} | {:.2f}% | {:.1f} MB | {} | {:.1f}% | {} | "
        "{} | {} |\n",
        e.label(), o.topology, orDash(o.timeToTarget, "{:.1f} s"),
        orDash(o.stepsToTarget, "{:.0f}"), 100 * o.final.consensus.accuracy,
        o.stoppedEarly
            ? fmt::format(" (stopped at {:.0f} s, step {})", o.final.wallSeconds, o.final.maxStep)
            : "",
        100 * o.final.consensus.minPeerAccuracy, o.final.bytesSentPerPeer / 1e6,
        orDash(o.bytesToTarget / 1e6, "{:.1f} MB"), 100 * o.final.commWaitFraction,
        orDash(100 * o.utilization, "{:.0f}%"), orDash(o.scalability, "{:.3f}"),
        o.speedupNote.empty() ? "-" : o.speedupNote);
  }
  if (!figures.empty()) {
    md << "\n## Figures\n\n";
    for (const std::string& f : figures) md << fmt::format("![{}]({})\n\n", f, f);
  }
  md << "\n## Settings\n\n| setting | value |\n|---|---|\n";
  for (const auto& [key, value] : engine::optionValues(run))
    md << fmt::format("| {} | {} |\n", key, value);
  md << "\n## Algorithm options (defaults unless the experiments set them)\n\n";
  for (const std::string& algorithm : matrix.algorithms) {
    const engine::AlgorithmSpec& spec = registry.algorithms.get(algorithm);
    std::vector<std::string> values;
    const auto set = matrix.options.find(algorithm);
    for (const engine::OptionInfo& info : spec.options) {
      std::string value = info.defaultValue;
      if (set != matrix.options.end()) {
        if (const auto it = set->second.find(info.name); it != set->second.end())
          value = it->second;
      }
      values.push_back(fmt::format("{} = {}", info.name, value));
    }
    md << fmt::format("- `{}` (default topology {}): {}\n", algorithm, spec.defaultTopology,
                      values.empty() ? "no options" : fmt::format("{}", fmt::join(values, ", ")));
  }
}

// Draws the figures with bench/plot_convergence.py (matplotlib); returns their file names.
std::vector<std::string> plot(const fs::path& dir, const RunSettings& run) {
  const fs::path script = fs::path(GOSSAMER_SOURCE_DIR) / "bench" / "plot_convergence.py";
  // Debian's python3 has Debian's matplotlib; a python3 earlier on PATH may not.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string command = fmt::format("{} '{}' '{}' {} > '{}' 2>&1", python, script.string(),
                                          dir.string(), run.target, (dir / "plot.log").string());
  if (std::system(command.c_str()) != 0) {
    log::get("bench")->warn("plotting failed (see {}); is python3-matplotlib installed?",
                            (dir / "plot.log").string());
    return {};
  }
  std::vector<std::string> figures;
  std::ifstream list(dir / "figures.txt");
  for (std::string line; std::getline(list, line);) {
    if (!line.empty()) figures.push_back(line);
  }
  return figures;
}

// Runs one block's experiments and writes its points, summary, figures and report into `dir`.
std::vector<Outcome> runBlock(const Matrix& matrix, const fs::path& dir,
                              const engine::Registry& registry, const std::string& command,
                              bool json) {
  const std::vector<Experiment> experiments = matrix.experiments();
  fs::create_directories(dir);
  { std::ofstream(dir / "experiments.conf") << formatMatrix(matrix); }
  const auto data = loadData(matrix.run, registry);
  std::vector<std::string> splits;
  for (const Split& s : matrix.splits) splits.push_back(s.name());
  fmt::print(
      "convergence: {} experiments ({} x {} x {} x {} peers x {}), up to {:.0f} s each; baseline: "
      "allreduce-sgd on the same network; results in {}\n",
      experiments.size(), fmt::join(matrix.algorithms, "/"), fmt::join(matrix.topologies, "/"),
      fmt::join(matrix.networks, "/"), fmt::join(matrix.peers, "/"), fmt::join(splits, "/"),
      matrix.run.maxSeconds, dir.string());
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
  writeReport(dir, outcomes, matrix, registry, command, figures);
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
      rows.push_back(JsonObject()
                         .add("algorithm", e.algorithm)
                         .add("network", e.network)
                         .add("peers", static_cast<std::uint64_t>(e.peers))
                         .add("step_time_ms", e.stepTime)
                         .add("compress", e.compress)
                         .add("split", e.split.name())
                         .add("time_to_target_s", out.timeToTarget)
                         .add("speedup_vs_allreduce", out.speedup)
                         .add("scalability", out.scalability)
                         .add("utilization", out.utilization)
                         .add("final_accuracy", ok ? out.final.consensus.accuracy : kNaN)
                         .add("bytes_per_peer", ok ? out.final.bytesSentPerPeer : kNaN)
                         .add("bytes_to_target", out.bytesToTarget)
                         .add("bytes_ratio_vs_allreduce", out.bytesRatio)
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
                    "headline figures as one JSON object on the last stdout line");
  command->add_option("--log-level", options->logLevel, "log level of the peers")
      ->capture_default_str();
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
