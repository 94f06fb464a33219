// `gossamer-bench simulate`: the experiments of `convergence`, with the same algorithms,
// topologies and network profiles, in the simulated world of engine/sim: N peers in one process
// and in virtual time, replayable from the seed. Writes to --out DIR the files `convergence`
// writes (points.csv and .jsonl, summary.csv, report.md and the figures; every time in them is
// virtual), plus details/EXPERIMENT.txt (every peer's steps and bytes, the faults as they
// happened, the violated invariants). report.md depends on nothing but the settings and the
// seed: its SHA-256 is the same on every run (`--json` reports it). Wall time and memory go to
// stdout and --json only.
//
// A run whose invariants break (a peer that failed or missed steps, a model that is not finite,
// gosgd's weights, a run that does not end in virtual time) prints each violation with the
// command that replays it (the same seed gives the same schedule and the same failure) and
// exits with status 1 after writing its report.
//
// Without --config, one experiment from the flags; with it, the matrix of the file (the format of
// `convergence --print-config`), the flags --faults, --fault-kinds, --fault-window,
// --checkpoint-every and --max-virtual-seconds applying to every experiment (--compress and
// --error-feedback are then the file's, as for `convergence`). Several --config files run one
// after the other, each into a folder of --out named after its file, with an index in
// --out/report.md; report_sha256 is then the hash of their reports one after the other.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/resource.h>

#include "algorithms/builtin.h"
#include "bench/benchmarks.h"
#include "bench/convergence_config.h"
#include "bench/convergence_report.h"
#include "bench/simulate_options.h"
#include "bench/simulate_sweep.h"
#include "bench/uneven_figures.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/sim/world.h"

namespace gossamer::bench {
namespace {

// Hex SHA-256 of `bytes`.
std::string sha256Of(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  GOSSAMER_ENFORCE(
      EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1,
      "SHA-256 failed");
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

double maxRssMib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::string safeName(std::string name) {
  for (char& c : name)
    if (c == '/' || c == ':') c = '_';
  return name;
}

struct Measured {
  Outcome outcome;
  engine::sim::SimResult result;
  double wallSeconds = 0;
};

engine::sim::SimConfig simConfig(const RunSettings& run, const Experiment& e,
                                 const SimulateOptions& o) {
  const engine::runtime::ClusterConfig cluster = clusterConfig(run, e);
  engine::sim::SimConfig c;
  c.peers = e.peers;
  c.training = cluster.peer.training;
  c.network = cluster.peer.network.profile.value_or(net::shaped::NetworkProfile::lan());
  c.membership = cluster.peer.network.membership;
  // As in a real run: points unless evaluations by time are asked for (simulated seconds).
  c.evalSeconds = run.evalSeconds;
  c.evalEverySteps = run.evalSeconds > 0 ? 0 : run.evalEverySteps;
  c.evalSamples = run.evalSamples;
  c.maxVirtualSeconds = o.maxVirtualSeconds;
  c.training.checkpointEvery = o.checkpointEvery;
  if (o.faults > 0) {
    std::vector<engine::sim::FaultKind> kinds;
    for (const std::string& k : o.faultKinds) kinds.push_back(*engine::sim::faultKindNamed(k));
    // By default the run's length: its steps at the step time (the slowest peer's, with
    // peer-step-times).
    const double stepMs = run.peerStepTimes.empty() ? e.stepTime
                                                    : *std::max_element(run.peerStepTimes.begin(),
                                                                        run.peerStepTimes.end());
    const double window =
        o.faultWindow > 0
            ? o.faultWindow
            : static_cast<double>(std::max<std::uint64_t>(run.steps, 1)) * stepMs / 1000.0;
    c.faults = engine::sim::drawFaults(run.seed, o.faults, window, kinds, o.straggler);
  }
  return c;
}

Measured runOne(const RunSettings& run, const Experiment& e, const SimulateOptions& o,
                const engine::Registry& registry,
                const std::shared_ptr<const engine::DatasetPair>& data) {
  Measured m;
  m.outcome.experiment = e;
  const auto start = std::chrono::steady_clock::now();
  try {
    m.result = engine::sim::simulate(simConfig(run, e, o), registry, data);
    Outcome& out = m.outcome;
    out.curve = m.result.curve;
    out.final = m.result.curve.back();
    out.topology = m.result.topology;
    out.utilization = out.final.utilization;
    if (!m.result.peers.empty()) out.chosen = chosenOptions(m.result.peers.front().metrics);
    readTargets(out, run);
  } catch (const std::exception& error) {
    m.outcome.error = error.what();
  }
  m.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

// The figures of uneven peers (peer-step-times) for `m`: its reference run, then time_vs_ideal and
// min_fast_peer_utilization.
void measureUneven(Measured& m, const RunSettings& run, const SimulateOptions& o,
                   const engine::Registry& registry,
                   const std::shared_ptr<const engine::DatasetPair>& data) {
  const std::vector<double>& times = run.peerStepTimes;
  if (times.empty() || !m.outcome.error.empty()) return;
  const auto [even, reference] = evenReference(run, m.outcome.experiment);
  SimulateOptions plain = o;
  plain.faults = 0;
  const Measured base = runOne(even, reference, plain, registry, data);
  UnevenFigures& figures = m.outcome.uneven;
  figures.referenceTimeToTarget = base.outcome.timeToTarget;
  figures.timeVsIdeal = timeVsIdeal(m.outcome.timeToTarget, base.outcome.timeToTarget, times,
                                    m.outcome.experiment.peers);
  std::vector<double> waits;
  for (const engine::sim::SimPeerResult& peer : m.result.peers)
    waits.push_back(peer.commWaitFraction);
  figures.minFastPeerUtilization = minFastPeerUtilization(times, waits);
  fmt::print("  {}\n", describeUneven(figures, times, "virtual s"));
}

std::string header(const Matrix& matrix, const std::string& command) {
  const RunSettings& run = matrix.run;
  std::string md = "# gossamer simulation report\n\n";
  md += fmt::format("Produced by `{}`.\n\n", command);
  md += fmt::format(
      "Every experiment runs the unchanged algorithms on simulated peers in virtual time "
      "(engine/sim/world.h): each trains {} on {} with {} (lr {}, {} schedule), batch {} per "
      "peer, for {} steps of {} ms of compute each, over the network profile's links; every "
      "time below is virtual. Membership is the SWIM protocol of real peers, its frames on "
      "the same simulated links. The consensus model (the average of the peers' models) is "
      "evaluated on {} test samples {} and on the whole test set at the "
      "end. Target accuracy: {:.0f}%. Speed-up: {}'s time to target on the same "
      "network, peers and split divided by the experiment's. Utilization: virtual time in "
      "compute over virtual time. Seed {}: the same seed gives this report byte for byte.\n\n",
      modelDescription(run), run.dataset, run.optimizer, run.lr, run.schedule, run.batch, run.steps,
      run.stepTime, run.evalSamples,
      run.evalSeconds > 0 ? fmt::format("every {} virtual seconds", run.evalSeconds)
                          : fmt::format("at every peer's steps {}, {}, ... (evaluation points)",
                                        run.evalEverySteps, 2 * run.evalEverySteps),
      100 * run.target, run.baseline, run.seed);
  return md;
}

// The faults, invariants and size of each experiment, appended to report.md.
void appendDetails(const fs::path& dir, const std::vector<Measured>& runs) {
  std::ofstream md(dir / "report.md", std::ios::app);
  md << "\n## Simulation details\n\n";
  md << "| experiment | topology | spectral gap | virtual s | events | frames | dropped | "
        "SWIM frames | SWIM MB | faults | violations |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Measured& m : runs) {
    const engine::sim::SimResult& r = m.result;
    md << fmt::format("| {} | {} | {:.4f} | {:.3f} | {} | {} | {} | {} | {:.3f} | {} | {} |\n",
                      m.outcome.experiment.name(), r.topology, r.spectralGap, r.virtualSeconds,
                      r.events, r.messages, r.dropped, r.membershipMessages,
                      static_cast<double>(r.membershipBytes) / 1e6, r.faultLog.size(),
                      r.violations.size());
  }
  for (const Measured& m : runs) {
    const engine::sim::SimResult& r = m.result;
    if (r.faultLog.empty() && r.violations.empty()) continue;
    md << fmt::format("\n### {}\n\n", m.outcome.experiment.name());
    for (const std::string& f : r.faultLog) md << "- fault at " << f << "\n";
    for (const engine::sim::Violation& v : r.violations)
      md << fmt::format("- **violation** at {:.3f} s: {}\n", v.at, v.what);
  }
}

// The command of the run; without --out for the report, so that the report of a seed is the same
// wherever it is written.
std::string commandLine(const SimulateOptions& o, bool withOut) {
  std::string line = "gossamer-bench simulate";
  if (!o.configPaths.empty()) {
    for (const std::string& path : o.configPaths) line += " --config " + path;
  } else {
    const RunSettings& r = o.run;
    line += fmt::format(
        " --peers {} --algorithm {} --topology {} --network {} --step-time {} --model {} "
        "--steps {} --batch {} --lr {} --seed {}",
        o.peers, o.algorithm, o.topology, o.network, r.stepTime, r.model, r.steps, r.batch, r.lr,
        r.seed);
    if (r.model == "mlp") line += fmt::format(" --hidden {}", fmt::join(r.hidden, ","));
    if (r.dataset != "fashion-mnist") line += " --dataset " + r.dataset;
    if (r.trainSamples > 0) line += fmt::format(" --train-samples {}", r.trainSamples);
    if (r.testSamples > 0) line += fmt::format(" --test-samples {}", r.testSamples);
    if (r.compress != "none")
      line += fmt::format(" --compress {} --error-feedback {}", r.compress, r.errorFeedback);
  }
  if (o.faults > 0) {
    line += fmt::format(" --faults {}", o.faults);
    if (!o.faultKinds.empty())
      line += fmt::format(" --fault-kinds {}", fmt::join(o.faultKinds, ","));
    if (o.faultWindow > 0) line += fmt::format(" --fault-window {}", o.faultWindow);
    line += fmt::format(" --checkpoint-every {}", o.checkpointEvery);
  }
  if (o.maxVirtualSeconds > 0)
    line += fmt::format(" --max-virtual-seconds {}", o.maxVirtualSeconds);
  if (withOut) line += " --out " + o.out;
  return line;
}

struct BlockRun {
  std::vector<Measured> runs;
  std::size_t violations = 0;
};

// Runs one matrix and writes its report into `dir`.
BlockRun runBlock(const Matrix& matrix, const fs::path& dir, const SimulateOptions& o,
                  const engine::Registry& registry) {
  const std::string command = commandLine(o, true);
  const std::vector<Experiment> experiments = matrix.experiments();
  fs::create_directories(dir / "details");
  { std::ofstream(dir / "experiments.conf") << formatMatrix(matrix); }
  const auto data = loadData(matrix.run, registry);
  fmt::print("simulate: {} experiments; results in {}\n", experiments.size(), dir.string());
  std::fflush(stdout);
  BlockRun block;
  for (const Experiment& e : experiments) {
    Measured m = runOne(matrix.run, e, o, registry, data);
    const Outcome& out = m.outcome;
    if (!out.error.empty()) {
      fmt::print("{}: FAILED: {}\n", e.name(), out.error);
    } else {
      fmt::print(
          "{}: {:.2f}% after {:.1f} virtual s ({} steps){}; {:.1f} s of wall time, max RSS "
          "{:.0f} MiB\n",
          e.name(), 100 * out.final.consensus.accuracy, out.final.wallSeconds, out.final.maxStep,
          std::isnan(out.timeToTarget) ? std::string(", target not reached")
                                       : fmt::format(", {:.0f}% at {:.1f} virtual s",
                                                     100 * matrix.run.target, out.timeToTarget),
          m.wallSeconds, maxRssMib());
    }
    measureUneven(m, matrix.run, o, registry, data);
    std::ofstream(dir / "details" / (safeName(e.name()) + ".txt")) << engine::sim::format(m.result);
    for (const engine::sim::Violation& v : m.result.violations) {
      ++block.violations;
      fmt::print(
          stderr,
          "simulate: {}: invariant violated at {:.3f} virtual s (seed {}): {}\n  replay: {}\n",
          e.name(), v.at, matrix.run.seed, v.what, command);
    }
    std::fflush(stdout);
    block.runs.push_back(std::move(m));
  }
  std::vector<Outcome> outcomes;
  for (const Measured& m : block.runs) outcomes.push_back(m.outcome);
  computeSpeedups(outcomes, matrix.run);
  writePoints(dir, outcomes);
  writeSummary(dir, outcomes, matrix.run);
  const std::vector<std::string> figures = plot(dir, matrix.run, "virtual time (s)");
  writeReport(dir, outcomes, matrix, registry, header(matrix, commandLine(o, false)), figures);
  appendDetails(dir, block.runs);
  return block;
}

std::string stem(const std::string& path) { return fs::path(path).stem().string(); }

void runSimulate(const SimulateOptions& o) {
  log::setLevel(o.logLevel);
  // One matrix from the flags, or one per config file, each in its own folder.
  std::vector<Block> blocks;
  if (o.configPaths.empty()) blocks.push_back({"", matrixOf(o)});
  for (const std::string& path : o.configPaths) blocks.push_back({stem(path), loadMatrix(path)});
  const engine::Registry registry = algorithms::makeRegistry();
  for (const Block& block : blocks) {
    block.matrix.run.validate();
    for (const Experiment& e : block.matrix.experiments()) {
      registry.algorithms.get(e.algorithm).make(e.options);
      if (!e.topology.empty()) registry.topologies.get(e.topology);
      net::shaped::NetworkProfile::fromSpec(e.network);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = o.out;
  std::vector<Measured> runs;
  std::size_t violations = 0;
  std::string reports;  // every block's report.md, for the hash
  for (const Block& block : blocks) {
    const fs::path blockDir = blocks.size() == 1 ? dir : dir / block.name;
    BlockRun done = runBlock(block.matrix, blockDir, o, registry);
    violations += done.violations;
    for (Measured& m : done.runs) runs.push_back(std::move(m));
    std::ifstream in(blockDir / "report.md", std::ios::binary);
    reports.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (blocks.size() > 1) {
    std::ofstream md(dir / "report.md");
    md << "# gossamer simulation report\n\n";
    md << fmt::format("Produced by `{}`, in {} blocks, each with its own settings:\n\n",
                      commandLine(o, false), blocks.size());
    for (const Block& block : blocks)
      md << fmt::format("- [{0}]({0}/report.md): {1} experiments\n", block.name,
                        block.matrix.experiments().size());
  }
  const std::string sha = sha256Of(reports);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("report: {} (sha256 {}); {:.1f} s of wall time, max RSS {:.0f} MiB\n",
             (dir / "report.md").string(), sha, wall, maxRssMib());
  if (o.json) {
    if (runs.size() == 1) {
      const Measured& m = runs.front();
      fmt::print("{}\n",
                 JsonObject()
                     .add("peers", static_cast<std::uint64_t>(m.outcome.experiment.peers))
                     .add("virtual_seconds", m.result.virtualSeconds)
                     .add("wall_seconds", wall)
                     .add("final_accuracy",
                          m.outcome.error.empty() ? m.outcome.final.consensus.accuracy : kNaN)
                     .add("max_rss_mib", maxRssMib())
                     .add("report_sha256", sha)
                     .add("time_to_target_s", m.outcome.timeToTarget)
                     .add("time_vs_ideal", m.outcome.uneven.timeVsIdeal)
                     .add("min_fast_peer_utilization", m.outcome.uneven.minFastPeerUtilization)
                     .add("chosen", m.outcome.chosen)
                     .str());
    } else {
      std::vector<std::string> rows;
      for (const Measured& m : runs) {
        const Experiment& e = m.outcome.experiment;
        rows.push_back(
            JsonObject()
                .add("experiment", e.name())
                .add("peers", static_cast<std::uint64_t>(e.peers))
                .add("virtual_seconds", m.result.virtualSeconds)
                .add("wall_seconds", m.wallSeconds)
                .add("final_accuracy",
                     m.outcome.error.empty() ? m.outcome.final.consensus.accuracy : kNaN)
                .add("time_to_target_s", m.outcome.timeToTarget)
                .add("bytes_per_peer", m.outcome.final.bytesSentPerPeer)
                .add("time_vs_ideal", m.outcome.uneven.timeVsIdeal)
                .add("min_fast_peer_utilization", m.outcome.uneven.minFastPeerUtilization)
                .str());
      }
      fmt::print(
          "{{\"experiments\": [{}], \"wall_seconds\": {}, \"max_rss_mib\": {}, "
          "\"report_sha256\": \"{}\"}}\n",
          fmt::join(rows, ", "), wall, maxRssMib(), sha);
    }
  }
  if (violations > 0)
    throw Error(fmt::format("{} invariant violation(s) (above, with the command that replays them)",
                            violations));
}

}  // namespace

void addSimulateCommand(CLI::App& app) {
  addSimulateFlags(app, [](const SimulateOptions& o) {
    if (o.sweep == 0) return runSimulate(o);
    log::setLevel(o.logLevel == "warn" ? "error" : o.logLevel);  // a killed peer warns
    const int status = runSweep({.seeds = o.sweep,
                                 .firstSeed = o.run.seed,
                                 .algorithms = o.algorithms,
                                 .maxVirtualSeconds = o.maxVirtualSeconds,
                                 .json = o.json});
    if (status != 0)
      throw Error("some seeds hung or broke an invariant (above, each with its replay command)");
  });
}

}  // namespace gossamer::bench
