#include "bench/bench_settings.h"

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

}  // namespace gossamer::bench
