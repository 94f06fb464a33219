#include "bench/bench_settings.h"

#include <cstdlib>

#include "algorithms/builtin.h"

namespace gossamer::bench {

const std::vector<Setting>& benchSettings() {
  static const engine::Registry registry = algorithms::makeRegistry();
  static const std::vector<Setting> settings = engine::cli::peerSettings(registry);
  return settings;
}

const Setting& runSetting(const std::string& key) {
  const Setting* s = engine::cli::findSetting(benchSettings(), key, engine::cli::kRun);
  if (s == nullptr)
    GOSSAMER_THROW(
        "unknown [run] key '{}'; did you mean '{}'?", key,
        engine::closestName(key, engine::cli::namesIn(benchSettings(), engine::cli::kRun)));
  return *s;
}

void checkRunValue(const std::string& key, const std::string& value) {
  const std::string why = runSetting(key).check(value);
  GOSSAMER_ENFORCE(why.empty(), "{}: {}", key, why);
}

void addStragglerOptions(CLI::App& command, engine::sim::StragglerShape& shape) {
  command
      .add_option("--straggler-factor", shape.factor,
                  "a straggler's steps take this many times as long (0: drawn, 3-5)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            const double v = std::strtod(text.c_str(), nullptr);
            return v == 0 || v >= 1 ? "" : "a straggler factor is 0 (drawn) or at least 1";
          },
          "0 or >= 1"));
  command
      .add_option("--straggler-seconds", shape.seconds,
                  "how long a straggler stays slow (0: drawn, 2-6 s; 30: a long slow phase)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace gossamer::bench
