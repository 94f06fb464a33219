// The run-level settings schema (engine/peer_settings.h) bound to gossamer-bench's front ends:
// simulate's flags and the [run] keys and [matrix] lists of the experiment files
// (convergence_config.h). Each setting's name there, help, type and check come from its one
// declaration; the benchmarks' options structs only hold the values, each field named as the
// setting it stores (RunSettings::bind), so a benchmark keeps its own defaults.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/base/enforce.h"
#include "engine/options.h"
#include "engine/peer_settings.h"
#include "engine/sim/faults.h"

namespace gossamer::bench {

using engine::cli::FrontEnd;
using engine::cli::Setting;

// The settings of the built-in registry (algorithms::makeRegistry), made once.
const std::vector<Setting>& benchSettings();

// The setting of [run] key `key`: throws gossamer::Error naming the closest key for an unknown
// one.
const Setting& runSetting(const std::string& key);
// Checks `value` of [run] key `key` by its setting's rule: throws gossamer::Error
// ("comm-timeout: '-1' is not a number of seconds (more than 0)"), or for an unknown key
// ("unknown [run] key 'comm-timout'; did you mean 'comm-timeout'?").
void checkRunValue(const std::string& key, const std::string& value);

// Adds to `app` a flag for every field of `target` (listed by target.bind(b), b(name, field)) that
// is a setting of front end `end`, its help, type, check and aliases from the setting and its
// default the field's initial value; a value given is parsed into the field. Every setting `end`
// takes must be a field of `target` (else gossamer::Error). `target` must outlive `app`.
template <typename Target>
void addSettingFlags(CLI::App& app, Target& target, FrontEnd end, const std::string& group) {
  const std::vector<Setting>& settings = benchSettings();
  std::set<std::string> bound;
  auto bind = [&](const char* name, auto& field, const char* = "") {
    const Setting* s = engine::cli::findSetting(settings, name, end);
    if (s == nullptr) return;  // a field of another front end
    bound.insert(s->name);
    engine::cli::addSettingFlag(
        app, *s, engine::cli::namesIn(*s, end), engine::cli::helpIn(*s, end),
        engine::detail::formatOne(field),
        [&field, name](const std::string& text) { engine::detail::parseOne(name, text, field); })
        ->group(group);
  };
  target.bind(bind);
  for (const Setting& s : settings)
    GOSSAMER_ENFORCE(!engine::cli::takes(s, end) || bound.count(s.name) > 0,
                     "the setting '{}' has no field in this front end's options",
                     engine::cli::nameIn(s, end));
}

// Registers --straggler-factor and --straggler-seconds on `command` (simulate, chaos), into
// `shape` (which must outlive the parse): the drawn stragglers' slow-down and length, when given.
void addStragglerOptions(CLI::App& command, engine::sim::StragglerShape& shape);

}  // namespace gossamer::bench
