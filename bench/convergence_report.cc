#include "bench/convergence_report.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "engine/base/json.h"
#include "engine/base/log.h"
#include "engine/runtime/tcp_streams.h"

namespace gossamer::bench {
namespace {

std::string orDash(double value, const char* format) {
  return std::isnan(value) ? "-" : fmt::format(fmt::runtime(format), value);
}

// With peer-step-times: each experiment against its even reference (bench/uneven_figures.h).
void writeUnevenTable(std::ofstream& md, const std::vector<Outcome>& outcomes,
                      const RunSettings& run) {
  const double fastest = *std::min_element(run.peerStepTimes.begin(), run.peerStepTimes.end());
  md << fmt::format(
      "\n## Uneven peers ({} a step)\n\n"
      "Each experiment also ran on peers all at {} ms, without faults (its even reference). "
      "time_vs_ideal: the time to target over the ideal time, the samples the reference needed "
      "divided by this cluster's throughput (1: every sample the slower peers computed counted "
      "as much as in the even cluster). Fast-peer utilization: the least, over the {} ms peers, "
      "of the time they did not wait on others.\n\n"
      "| algorithm | time to {:.0f}% | the reference's | time_vs_ideal | "
      "min_fast_peer_utilization |\n|---|---:|---:|---:|---:|\n",
      describeStepTimes(run.peerStepTimes), fastest, fastest, 100 * run.target);
  for (const Outcome& o : outcomes) {
    if (!o.error.empty()) continue;
    md << fmt::format(
        "| {} | {} | {} | {} | {} |\n", o.experiment.label(), orDash(o.timeToTarget, "{:.1f} s"),
        orDash(o.uneven.referenceTimeToTarget, "{:.1f} s"), orDash(o.uneven.timeVsIdeal, "{:.3f}"),
        orDash(o.uneven.minFastPeerUtilization, "{:.3f}"));
  }
}

}  // namespace

std::string modelDescription(const RunSettings& run) {
  return run.model == "mlp"
             ? fmt::format("an MLP with hidden layers {}", fmt::join(run.hidden, "-"))
             : run.model;
}

std::shared_ptr<const engine::DatasetPair> loadData(const RunSettings& run,
                                                    const engine::Registry& registry) {
  return std::make_shared<const engine::DatasetPair>(registry.datasets.get(run.dataset)(
      {.trainSamples = run.trainSamples, .testSamples = run.testSamples, .seed = run.seed}));
}

engine::runtime::ClusterConfig clusterConfig(const RunSettings& run, const Experiment& e) {
  engine::runtime::ClusterConfig c;
  c.peers = e.peers;
  c.progress = false;
  if (run.evalSeconds > 0) {
    c.evalInterval = std::chrono::milliseconds(static_cast<std::int64_t>(run.evalSeconds * 1000));
  } else {
    c.evalEvery = static_cast<std::int64_t>(run.evalEverySteps);
    // Off the clock: the evaluations wait for the end and take no CPU from the peers.
    c.evaluateAfterRun = true;
  }
  c.evalSamples = run.evalSamples;
  c.peer.network.transport = run.transport;
  c.peer.network.tcpStreams = engine::runtime::parseTcpStreams(run.tcpStreams);
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
  t.maxSteps = run.steps;
  t.split = engine::data::parseSplitKind(e.split.kind);
  t.dirichletAlpha = e.split.alpha;
  t.seed = run.seed;
  t.commTimeout = std::chrono::milliseconds(static_cast<std::int64_t>(run.commTimeout * 1000));
  t.finishTimeout = std::chrono::seconds(120);
  t.minStepTime = std::chrono::microseconds(static_cast<std::int64_t>(e.stepTime * 1000));
  for (double ms : run.peerStepTimes)
    t.peerStepTimes.emplace_back(static_cast<std::int64_t>(ms * 1000));
  t.compression = {kernels::parseCodec(e.compress), run.errorFeedback == "on"};
  return c;
}

void readTargets(Outcome& o, const RunSettings& run) {
  for (const engine::runtime::EvalPoint& p : o.curve) {
    if (std::isnan(o.timeToTarget) && p.consensus.accuracy >= run.target) {
      o.timeToTarget = p.wallSeconds;
      o.stepsToTarget = p.meanStep;
      o.bytesToTarget = p.bytesSentPerPeer;
    }
    if (run.targetLoss > 0 && std::isnan(o.timeToTargetLoss) && p.consensus.peers > 0 &&
        p.consensus.loss <= run.targetLoss) {
      o.timeToTargetLoss = p.wallSeconds;
      o.stepsToTargetLoss = p.meanStep;
    }
  }
}

std::string evaluationNote(const RunSettings& run) {
  if (run.evalSeconds > 0)
    return fmt::format(
        "every {} s of wall time, at whatever step each peer had reached then (times to the "
        "targets resolve to {} s)",
        run.evalSeconds, run.evalSeconds);
  return fmt::format(
      "at the evaluation points: every peer's model at exactly its step {0}, {1}, ..., their "
      "average evaluated after the run (off the clock), a point's time the slowest peer's "
      "training wall time at that step (times to the targets exact to {0} step{2})",
      run.evalEverySteps, 2 * run.evalEverySteps, run.evalEverySteps == 1 ? "" : "s");
}

void computeSpeedups(std::vector<Outcome>& outcomes, const RunSettings& run) {
  for (Outcome& o : outcomes) {
    o.baseline = run.baseline;
    auto baselineWith = [&](const std::string& codec) {
      return std::find_if(outcomes.begin(), outcomes.end(), [&](const Outcome& b) {
        return b.experiment.algorithm == run.baseline && b.experiment.compress == codec &&
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
      const engine::runtime::EvalPoint& p = o.curve[i];
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

std::string chosenOptions(const std::map<std::string, double>& metrics) {
  std::vector<std::string> chosen;
  for (const auto& [name, value] : metrics) {
    if (!name.starts_with("chosen.")) continue;
    const std::size_t knob = name.rfind('.');
    chosen.push_back(fmt::format("{} {}", name.substr(knob + 1), value));
  }
  return fmt::format("{}", fmt::join(chosen, ", "));
}

void writeSummary(const fs::path& dir, const std::vector<Outcome>& outcomes,
                  const RunSettings& run) {
  std::ofstream csv(dir / "summary.csv");
  csv << "experiment,algorithm,topology,network,peers,split,time_to_target_s,steps_to_target,"
         "bytes_to_target,final_accuracy,final_min_peer_accuracy,final_distance,wall_s,steps,"
         "bytes_per_peer,comm_wait_fraction,speedup_vs_baseline,stopped_early,error,step_time_ms,"
         "scalability,utilization,compress,options,time_to_target_loss_s,steps_to_target_loss,"
         "peak_bytes_per_peer,peak_memory_vs_model,peak_rss_bytes,baseline,eval_every_steps,"
         "eval_seconds,time_vs_ideal,min_fast_peer_utilization,reference_time_to_target_s,"
         "chosen\n";
  for (const Outcome& o : outcomes) {
    const Experiment& e = o.experiment;
    std::vector<std::string> options;
    for (const auto& [key, value] : e.options) options.push_back(fmt::format("{} {}", key, value));
    csv << fmt::format(
        "{},{},{},{},{},{},{},{},{},{:.5f},{:.5f},{:.6g},{:.3f},{},{:.0f},{:.5f},{},{},\"{}\",{},{}"
        ",{},{},\"{}\",{},{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
        e.name(), e.algorithm, o.topology, e.network, e.peers, e.split.name(),
        orDash(o.timeToTarget, "{:.3f}"), orDash(o.stepsToTarget, "{:.1f}"),
        orDash(o.bytesToTarget, "{:.0f}"), o.final.consensus.accuracy,
        o.final.consensus.minPeerAccuracy, o.final.consensus.distance, o.final.wallSeconds,
        o.final.maxStep, o.final.bytesSentPerPeer, o.final.commWaitFraction,
        orDash(o.speedup, "{:.3f}"), o.stoppedEarly ? 1 : 0, o.error, e.stepTime,
        orDash(o.scalability, "{:.4f}"), orDash(o.utilization, "{:.4f}"), e.compress,
        fmt::join(options, ", "), orDash(o.timeToTargetLoss, "{:.3f}"),
        orDash(o.stepsToTargetLoss, "{:.1f}"), o.peakBytesPerPeer,
        orDash(o.peakMemoryVsModel(), "{:.3f}"), o.peakRssBytes, run.baseline, run.evalEverySteps,
        run.evalSeconds, orDash(o.uneven.timeVsIdeal, "{:.4f}"),
        orDash(o.uneven.minFastPeerUtilization, "{:.4f}"),
        orDash(o.uneven.referenceTimeToTarget, "{:.3f}"), o.chosen);
  }
}

void writeReport(const fs::path& dir, const std::vector<Outcome>& outcomes, const Matrix& matrix,
                 const engine::Registry& registry, const std::string& header,
                 const std::vector<std::string>& figures) {
  const RunSettings& run = matrix.run;
  std::ofstream md(dir / "report.md");
  md << header;
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
          "peak memory / model | speed-up vs {1} |\n",
          100 * run.target, run.baseline);
      md << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    }
    if (!o.error.empty()) {
      md << fmt::format("| {} | {} | failed: {} | | | | | | | | | | |\n", e.label(), e.topology,
                        o.error);
      continue;
    }
    md << fmt::format(
        "| {} | {} | {} | {} | {:.2f}%{} | {:.2f}% | {:.1f} MB | {} | {:.1f}% | {} | "
        "{} | {} | {} |\n",
        e.label(), o.topology, orDash(o.timeToTarget, "{:.1f} s"),
        orDash(o.stepsToTarget, "{:.0f}"), 100 * o.final.consensus.accuracy,
        o.stoppedEarly
            ? fmt::format(" (stopped at {:.0f} s, step {})", o.final.wallSeconds, o.final.maxStep)
            : "",
        100 * o.final.consensus.minPeerAccuracy, o.final.bytesSentPerPeer / 1e6,
        orDash(o.bytesToTarget / 1e6, "{:.1f} MB"), 100 * o.final.commWaitFraction,
        orDash(100 * o.utilization, "{:.0f}%"), orDash(o.scalability, "{:.3f}"),
        orDash(o.peakMemoryVsModel(), "{:.1f}x"), o.speedupNote.empty() ? "-" : o.speedupNote);
  }
  if (!run.peerStepTimes.empty()) writeUnevenTable(md, outcomes, run);
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

std::vector<std::string> plot(const fs::path& dir, const RunSettings& run,
                              const std::string& timeLabel) {
  const fs::path script = fs::path(GOSSAMER_SOURCE_DIR) / "bench" / "plot_convergence.py";
  // Debian's python3 has Debian's matplotlib; a python3 earlier on PATH may not.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string command =
      fmt::format("{} '{}' '{}' {} '{}' > '{}' 2>&1", python, script.string(), dir.string(),
                  run.target, timeLabel, (dir / "plot.log").string());
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

}  // namespace gossamer::bench
