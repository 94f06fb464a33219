// What `gossamer-bench convergence` and `gossamer-bench simulate` share: the outcome of one
// experiment of a matrix (convergence_config.h), the settings a peer gets from it, and the report
// written from the outcomes (points.csv and .jsonl, summary.csv, report.md and the figures of
// bench/plot_convergence.py).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bench/convergence_config.h"
#include "bench/uneven_figures.h"
#include "engine/registry.h"
#include "engine/runtime/cluster.h"

namespace gossamer::bench {

namespace fs = std::filesystem;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What one experiment produced.
struct Outcome {
  Experiment experiment;
  std::string topology;  // the topology's full name, as the runtime built it
  std::string error;     // empty on success
  std::vector<engine::runtime::EvalPoint> curve;
  // The first evaluation at or above the target accuracy (readTargets): its training wall time,
  // mean step and bytes per peer.
  double timeToTarget = kNaN;
  double stepsToTarget = kNaN;
  double bytesToTarget = kNaN;
  // The first at or below the target loss (RunSettings::targetLoss).
  double timeToTargetLoss = kNaN;
  double stepsToTargetLoss = kNaN;
  // The baseline's bytes to the target (float32 when in the matrix) over this experiment's.
  double bytesRatio = kNaN;
  engine::runtime::EvalPoint final;
  bool stoppedEarly = false;  // the wall-clock budget ended it
  std::string baseline;       // the algorithm it is compared with (RunSettings::baseline)
  // What `auto` chose (the first peer's "chosen.<algorithm>.<knob>" metrics), "knob value, ...".
  std::string chosen;
  double speedup = kNaN;      // the baseline's time to target / this one's
  std::string speedupNote;    // ">x" when the baseline never reached the target
  // Memory: the largest peer's tracked peak (runtime::PeerResult::peakBytes), the model's bytes,
  // and the process's peak resident memory during the experiment (0: not measured).
  std::size_t peakBytesPerPeer = 0;
  std::size_t modelBytes = 0;
  std::size_t peakRssBytes = 0;
  double peakMemoryVsModel() const {
    return modelBytes > 0 ? static_cast<double>(peakBytesPerPeer) / static_cast<double>(modelBytes)
                          : kNaN;
  }
  // Seed 002's scalability: the cluster's training samples per second over N peers' worth of a
  // single peer's (same model, batch and step time, no exchange); 1 is perfect scaling.
  double scalability = kNaN;
  double utilization = kNaN;  // time in compute / wall time, mean over the peers
  UnevenFigures uneven;       // with peer-step-times (bench/uneven_figures.h)
};

// The dataset of a matrix, loaded once for all its experiments.
std::shared_ptr<const engine::DatasetPair> loadData(const RunSettings& run,
                                                    const engine::Registry& registry);
// A local cluster's configuration for experiment `e` (its `peer.training` is also what a
// simulated peer gets).
engine::runtime::ClusterConfig clusterConfig(const RunSettings& run, const Experiment& e);
// "an MLP with hidden layers 256-256", or the model's name.
std::string modelDescription(const RunSettings& run);

// The times, steps and bytes to the targets, read from the curve: the first evaluation that
// reaches each (at the evaluation points, exact to the point).
void readTargets(Outcome& outcome, const RunSettings& run);
// "delay 9, period 9" from a peer's metrics "chosen.dts.delay" = 9, ...; empty when none.
std::string chosenOptions(const std::map<std::string, double>& metrics);
// How the experiments are evaluated, for the reports: "at every peer's steps 25, 50, ...
// (evaluation points: times to the targets exact to 25 steps)" or the wall-clock spacing.
std::string evaluationNote(const RunSettings& run);
// Speed-up of every experiment against the baseline (RunSettings::baseline) on the same network,
// peers, split and step time: the float32 baseline when the matrix has it, else the baseline with
// the same codec. The same baseline's bytes to the target over the experiment's give bytesRatio.
void computeSpeedups(std::vector<Outcome>& outcomes, const RunSettings& run);
// points.csv and points.jsonl: every evaluation of every experiment.
void writePoints(const fs::path& dir, const std::vector<Outcome>& outcomes);
// summary.csv: one row per experiment.
void writeSummary(const fs::path& dir, const std::vector<Outcome>& outcomes,
                  const RunSettings& run);
// report.md: `header` (title, command, what the experiments do), then one table per group of
// experiments, the figures, the shared settings and every algorithm's options.
void writeReport(const fs::path& dir, const std::vector<Outcome>& outcomes, const Matrix& matrix,
                 const engine::Registry& registry, const std::string& header,
                 const std::vector<std::string>& figures);
// Draws the figures with bench/plot_convergence.py (matplotlib), time on the axis `timeLabel`;
// returns their file names.
std::vector<std::string> plot(const fs::path& dir, const RunSettings& run,
                              const std::string& timeLabel = "wall time (s)");

}  // namespace gossamer::bench
