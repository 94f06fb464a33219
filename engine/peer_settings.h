// The run-level settings of a peer, each declared once (peer_settings.cc,
// peer_settings_cluster.cc): name, aliases, type, default, allowed values or range, help, and the
// front ends that take it. From that one declaration come gossamer-peer's flags, its `--config`
// file keys and its GOSSAMER_* environment variables (peer_flags.cc), and the keyword arguments
// of the Python module (engine/python/module.cc). An algorithm's own options stay in its options
// struct (engine/options.h) and reach the same front ends as NAME.OPTION.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/peer_options.h"

namespace gossamer::engine::cli {

struct Setting {
  std::string name;                  // the long flag, without dashes: "join-timeout"
  std::vector<std::string> aliases;  // more long flags of the same setting: "min-step-time"
  std::string group;                 // the --help section; empty: the general one
  std::string type;                  // for --help: "INT", "FLOAT", "SECONDS", "TEXT", "[INT,...]"
  std::string defaultValue;          // as text; empty: none shown
  std::string help;
  std::vector<std::string> allowed;  // the values taken, when they are a fixed set
  bool flag = false;                 // a switch: no value on the command line
  bool list = false;                 // comma-separated values (also repeated on the command line)
  // "" when `text` is a valid value, else why not ("'-1' is not a number of seconds ...").
  std::function<std::string(const std::string& text)> check;
  // The command line, config file and environment: stores a checked value; empty: not bound.
  std::function<void(PeerOptions&, const std::string& text)> set;
  std::function<std::string(const PeerOptions&)> get;  // the stored value, as `set` takes it
  // The Python keyword argument (snake_case), and what it does to a peer's configuration (given
  // a checked value); empty: not a Python keyword.
  std::string python;
  std::string pythonHelp;  // when it differs from `help` (another unit, another default)
  std::function<void(PeerConfig&, const std::string& text)> apply;
};

// Every run-level setting; the help texts list the registry's models, algorithms, topologies and
// transports. The functions in the result keep a reference to `registry`.
std::vector<Setting> peerSettings(const Registry& registry);

// The setting named `name` (a flag's long name or alias, or a Python keyword), or null.
const Setting* findSetting(const std::vector<Setting>& settings, const std::string& name);

// The Python keyword arguments in `settings`, and the two the module binds itself because their
// values are Python objects rather than text: `secret` (bytes or str) and `algorithm_options`
// (a dict).
std::vector<std::string> pythonKeywords(const std::vector<Setting>& settings);

// Applies Python keyword `keyword` = `text` to `config`. Throws gossamer::Error naming the
// keyword for a bad value, and naming the closest keyword for an unknown one.
void applyPythonSetting(const std::vector<Setting>& settings, PeerConfig& config,
                        const std::string& keyword, const std::string& text);

// ---- the command line, config files and the environment (peer_flags.cc) ----

// Adds every setting with a command-line binding as a flag of `app` (help, default, check, type
// from the declaration; the aliases as more names), every algorithm's options as --NAME.OPTION,
// `--config FILE` (whose keys are the flags' long names, `[NAME]` sections the algorithms'
// options) and the GOSSAMER_* variables of all of them (bindEnvironment). `settings` and `o` must
// outlive `app`. Returns the GOSSAMER_ variables that name no flag, each with the closest name.
std::vector<std::string> addPeerFlags(CLI::App& app, PeerOptions& o,
                                      const std::vector<Setting>& settings,
                                      const Registry& registry);
// Parses the command line; throws CLI::ParseError for a bad one, naming the closest flag for an
// unknown one ("unknown flag '--join-timout'; did you mean '--join-timeout'?") and the closest
// key for an unknown config-file key.
void parsePeerFlags(CLI::App& app, int argc, const char* const* argv);

}  // namespace gossamer::engine::cli
