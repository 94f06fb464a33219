// The flags of `gossamer-bench simulate` (simulate_bench.cc). Its run-level ones are settings of
// the schema (engine/peer_settings.h, front end kSimulate), bound by name to the fields of
// SimulateOptions: help, type, check and aliases from their declarations, defaults simulate's own.
// The rest (peers, faults, sweep, output) are simulate's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/convergence_config.h"
#include "engine/sim/faults.h"

namespace gossamer::bench {

struct SimulateOptions {
  // The run-level settings, as an experiment file's [run] would set them (simulate's defaults).
  RunSettings run = simulateDefaults();
  // One experiment's algorithm, topology and network (an experiment file's [matrix] lists).
  std::string algorithm = "dpsgd";
  std::string topology = "default";
  std::string network = "geo";
  std::int64_t checkpointEvery = 25;  // the chaos benchmark's peers'
  std::string logLevel = "warn";

  std::size_t peers = 16;
  std::size_t faults = 0;
  std::vector<std::string> faultKinds;
  double faultWindow = 0;
  engine::sim::StragglerShape straggler;  // --straggler-factor, --straggler-seconds
  double maxVirtualSeconds = 0;
  std::vector<std::string> configPaths;
  std::string out = "simulate-report";
  bool json = false;
  std::uint64_t sweep = 0;              // > 0: a fault-schedule sweep (simulate_sweep.h)
  std::vector<std::string> algorithms;  // the sweep's (empty: all)

  // The fields that are settings, by the settings' names.
  template <typename Bind>
  void bind(Bind& b) {
    b("algorithm", algorithm);
    b("topology", topology);
    b("network", network);
    run.bind(b);
    b("checkpoint-every", checkpointEvery);
    b("log-level", logLevel);
  }

  // RunSettings with simulate's defaults: a small model, 200 steps of 300 ms, a constant rate,
  // evaluations every 10 virtual seconds.
  static RunSettings simulateDefaults();
};

// The matrix of one experiment from the flags.
Matrix matrixOf(const SimulateOptions& o);

// Adds the `simulate` subcommand to `app` with its flags; once they are parsed, it refuses an
// unknown flag naming the closest (engine/peer_settings.h refuseUnknownFlags) and calls `run`.
CLI::App* addSimulateFlags(CLI::App& app, std::function<void(const SimulateOptions&)> run);

}  // namespace gossamer::bench
