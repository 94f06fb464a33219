// gossamer-bench: the micro benchmarks and the convergence harness, one subcommand each. Every
// subcommand prints a table that names its baseline, measured in the same run, and takes --json
// (headline figures as the last stdout line), --csv FILE (every row) and --device cpu|cuda.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/benchmarks.h"
#include "engine/base/config.h"
#include "engine/base/enforce.h"
#include "engine/base/log.h"

int main(int argc, char** argv) {
  CLI::App app("gossamer-bench: benchmarks of gossamer, each next to its baseline in the same run",
               "gossamer-bench");
  app.set_version_flag("--version", GOSSAMER_VERSION);
  app.require_subcommand(1);
  gossamer::bench::addKernelsCommand(app);
  gossamer::bench::addModelsCommand(app);
  gossamer::bench::addShapedCommand(app);
  gossamer::bench::addTransportCommand(app);
  gossamer::bench::addMembershipCommand(app);
  gossamer::bench::addJoinCommand(app);
  gossamer::bench::addRelayCommand(app);
  gossamer::bench::addConvergenceCommand(app);
  gossamer::bench::addChaosCommand(app);
  gossamer::bench::addSimulateCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const gossamer::Error& error) {
    fmt::print(stderr, "gossamer-bench: {}\n", error.what());
    if (!error.where().empty())
      gossamer::log::get("bench")->debug("that error was raised at {}", error.where());
    return 1;
  } catch (const std::exception& error) {
    fmt::print(stderr, "gossamer-bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
