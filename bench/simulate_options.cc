#include "bench/simulate_options.h"

#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/bench_settings.h"
#include "engine/sim/faults.h"

namespace gossamer::bench {

RunSettings SimulateOptions::simulateDefaults() {
  RunSettings r;
  r.model = "softmax";
  r.hidden = {32};
  r.steps = 200;
  r.batch = 32;
  r.schedule = "constant";
  r.evalSeconds = 10;
  r.evalEverySteps = 0;  // > 0: evaluation points instead of eval-seconds
  r.target = 0.8;
  r.stepTime = 300;
  return r;
}

Matrix matrixOf(const SimulateOptions& o) {
  Matrix m;
  m.run = o.run;
  m.run.evalSeconds = o.run.evalEverySteps > 0 ? 0 : o.run.evalSeconds;
  m.algorithms = {o.algorithm};
  m.topologies = {o.topology};
  m.networks = {o.network};
  m.peers = {o.peers};
  return m;
}

CLI::App* addSimulateFlags(CLI::App& app, std::function<void(const SimulateOptions&)> run) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate",
      "the algorithms on N simulated peers in virtual time (engine/sim): the report and figures "
      "of `convergence`, replayable from the seed, plus wall time and memory");
  command->add_option("--peers", o->peers, "simulated peers")->capture_default_str();
  addSettingFlags(*command, *o, engine::cli::kSimulate,
                  "Run settings (as gossamer-peer's flags and convergence's [run] keys)");
  command
      ->add_option("--faults", o->faults,
                   "faults drawn from the seed, as the chaos benchmark draws them (0: none)")
      ->capture_default_str();
  command
      ->add_option("--fault-kinds", o->faultKinds,
                   fmt::format("kinds to draw from: {} (default: all)",
                               fmt::join(engine::sim::faultKindNames(), ", ")))
      ->delimiter(',')
      ->check(CLI::IsMember(engine::sim::faultKindNames()));
  addStragglerOptions(*command, o->straggler);
  command->add_option("--fault-window", o->faultWindow,
                      "virtual seconds the faults are spread over (default: steps x step time)");
  command->add_option("--max-virtual-seconds", o->maxVirtualSeconds,
                      "a run still going then is a violation (a deadlock; default: 100 x the "
                      "compute time + 600 s)");
  command->add_option("--config", o->configPaths,
                      "an experiment matrix (`convergence --print-config` shows the format); "
                      "several: one folder each under --out, named after the files");
  command->add_option("--out", o->out, "output directory")->capture_default_str();
  command->add_flag("--json", o->json,
                    "one experiment: peers, virtual_seconds, wall_seconds, final_accuracy, "
                    "max_rss_mib, report_sha256, time_to_target_s, time_vs_ideal and "
                    "min_fast_peer_utilization (the last two with peer-step-times) as one JSON "
                    "object on the last stdout line; several: an experiments list");
  command
      ->add_option(
          "--sweep", o->sweep,
          "instead: N seeds from --seed, each a short run of one algorithm (in turn) "
          "under faults drawn from the seed at any moment, start and finish included; "
          "checks that every live peer ends and the algorithms' declared invariants, "
          "and prints the command that replays a failing seed (the experiment flags do not "
          "apply: each seed draws its own small run)")
      ->check(CLI::PositiveNumber);
  command->add_option("--algorithms", o->algorithms, "--sweep: the algorithms (default: all)")
      ->delimiter(',');
  command->allow_extras();  // refused below, naming the closest flag
  command->callback([command, o, run = std::move(run)] {
    engine::cli::refuseUnknownFlags(*command);
    run(*o);
  });
  return command;
}

}  // namespace gossamer::bench
