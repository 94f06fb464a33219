#include "bench/simulate_sweep.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "algorithms/builtin.h"
#include "engine/base/enforce.h"
#include "engine/base/json.h"
#include "engine/sim/world.h"

namespace gossamer::bench {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kSteps = 30;
constexpr auto kStepTime = 300ms;

// One seed's run: its algorithm, its shape and its fault schedule, all from the seed.
struct SweepRun {
  std::string algorithm;
  std::string network;
  engine::sim::SimConfig config;
};

SweepRun drawRun(std::uint64_t seed, const std::vector<std::string>& algorithms,
                 double maxVirtualSeconds) {
  SweepRun run;
  run.algorithm = algorithms[seed % algorithms.size()];
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 0x5eed);
  engine::sim::SimConfig& c = run.config;
  c.peers = 4 + rng() % 3;
  c.training.model = "softmax";
  c.training.algorithm = run.algorithm;
  c.training.optimizer.lr = 0.05f;
  c.training.batch = 16;
  c.training.maxSteps = kSteps;
  c.training.minStepTime = kStepTime;
  c.training.commTimeout = 10s;
  c.training.seed = seed;
  c.training.checkpointEvery = 5;  // a restart resumes when it comes after the first one
  run.network = rng() % 2 == 0 ? "lan" : "geo";
  c.network = run.network == "lan" ? net::shaped::NetworkProfile::lan()
                                   : net::shaped::NetworkProfile::geo();
  c.evalSamples = 100;
  c.finalPeerSamples = 50;
  const double runSeconds =
      static_cast<double>(kSteps) * std::chrono::duration<double>(kStepTime).count();
  // Every live peer ends within the chaos benchmark's bound: 3x the run plus 120 s.
  c.maxVirtualSeconds = maxVirtualSeconds > 0 ? maxVirtualSeconds : 3 * runSeconds + 120;
  // The kinds, durations and targets as chaos draws them; the moments from the first step to
  // past the last, so that faults land in the start and the finish too.
  c.faults = engine::sim::drawFaults(seed, 1 + rng() % 4, runSeconds);
  std::uniform_real_distribution<double> moment(0, 1.1 * runSeconds);
  for (engine::sim::Fault& f : c.faults) f.at = moment(rng);
  std::sort(c.faults.begin(), c.faults.end(),
            [](const engine::sim::Fault& a, const engine::sim::Fault& b) { return a.at < b.at; });
  return run;
}

std::string replayCommand(std::uint64_t seed, const SweepOptions& o) {
  std::string command = fmt::format("gossamer-bench simulate --sweep 1 --seed {}", seed);
  if (!o.algorithms.empty())
    command += " --algorithms " + fmt::format("{}", fmt::join(o.algorithms, ","));
  if (o.maxVirtualSeconds > 0)
    command += fmt::format(" --max-virtual-seconds {}", o.maxVirtualSeconds);
  return command;
}

}  // namespace

int runSweep(const SweepOptions& o) {
  GOSSAMER_ENFORCE(o.seeds >= 1, "--sweep: at least one seed");
  const engine::Registry registry = algorithms::makeRegistry();
  const std::vector<std::string> algorithms =
      o.algorithms.empty() ? registry.algorithms.names() : o.algorithms;
  for (const std::string& a : algorithms) registry.algorithms.get(a);  // unknown: the known ones
  const auto data = std::make_shared<const engine::DatasetPair>(
      registry.datasets.get("synthetic")({.trainSamples = 1000, .testSamples = 200, .seed = 1}));
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t hangs = 0, violations = 0, failedSeeds = 0, faults = 0;
  for (std::uint64_t seed = o.firstSeed; seed < o.firstSeed + o.seeds; ++seed) {
    const SweepRun run = drawRun(seed, algorithms, o.maxVirtualSeconds);
    faults += run.config.faults.size();
    const engine::sim::SimResult r = engine::sim::simulate(run.config, registry, data);
    // A hang: a peer that was neither killed nor failed, did not leave, and never ended its
    // finish.
    std::vector<std::string> broken;
    for (const engine::sim::SimPeerResult& p : r.peers)
      if (p.alive && p.error.empty() && !p.finished && !p.left)
        broken.push_back(fmt::format("peer {} did not end (a hang)", p.id));
    const bool hung = !broken.empty();
    hangs += hung;
    for (const engine::sim::Violation& v : r.violations)
      broken.push_back(fmt::format("at {:.3f} s: {}", v.at, v.what));
    violations += r.violations.size();
    if (broken.empty()) continue;
    ++failedSeeds;
    fmt::print("seed {} ({}, {} peers, {}, {} faults): {}{} violation(s)\n", seed, run.algorithm,
               run.config.peers, run.network, run.config.faults.size(), hung ? "hung; " : "",
               r.violations.size());
    for (const std::string& f : r.faultLog) fmt::print("  fault {}\n", f);
    for (const std::string& b : broken) fmt::print("  {}\n", b);
    fmt::print("  replay: {}\n", replayCommand(seed, o));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(
      "sweep: {} seeds ({} to {}) over {} algorithms, {} faults: {} hangs, {} invariant "
      "violations, {} failing seeds; {:.1f} s\n",
      o.seeds, o.firstSeed, o.firstSeed + o.seeds - 1, algorithms.size(), faults, hangs, violations,
      failedSeeds, wall);
  if (o.json)
    std::cout << JsonObject()
                     .add("benchmark", "simulate-sweep")
                     .add("seeds", o.seeds)
                     .add("first_seed", o.firstSeed)
                     .add("algorithms", static_cast<std::uint64_t>(algorithms.size()))
                     .add("faults", faults)
                     .add("hangs", hangs)
                     .add("invariant_violations", violations)
                     .add("failing_seeds", failedSeeds)
                     .add("wall_s", wall)
                     .str()
              << std::endl;
  return failedSeeds == 0 ? 0 : 1;
}

}  // namespace gossamer::bench
