// The run-level settings, each declared once (peer_settings.cc, peer_settings_cluster.cc,
// peer_settings_bench.cc): name, aliases, type, default, allowed values or range, help, and the
// front ends that take it. From that one declaration come gossamer-peer's flags, its `--config`
// file keys and its GOSSAMER_* environment variables (peer_flags.cc), the keyword arguments of
// the Python module (engine/python/module.cc), the flags of `gossamer-bench simulate` and the
// [run] keys and [matrix] lists of gossamer-bench's experiment files (bench/bench_settings.h). An
// algorithm's own options stay in its options struct (engine/options.h) and reach the same front
// ends as NAME.OPTION.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/peer_options.h"

namespace gossamer::engine::cli {

// The front ends a setting reaches (Setting::frontEnds holds a set of them).
enum FrontEnd : unsigned {
  kPeerFlags = 1u << 0,  // gossamer-peer: a flag, a --config key, a GOSSAMER_* variable (`set`)
  kPython = 1u << 1,     // a keyword argument of the Python module (`apply`)
  kSimulate = 1u << 2,   // a flag of `gossamer-bench simulate`
  kRun = 1u << 3,        // a [run] key of gossamer-bench's experiment files
  kMatrix = 1u << 4,     // a [matrix] list of those files, each item checked as the setting
};

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
  // The front ends that take it: kPeerFlags with `set`, kPython with `apply`, and the benchmarks'.
  unsigned frontEnds = 0;
  // Its name in simulate's flags and [run] keys, when not `name` ("schedule" for lr-schedule);
  // the benchmarks' own value (their default) comes from the options struct it is bound to.
  std::string benchName;
  std::string benchHelp;   // there, when it differs from `help`
  std::string matrixName;  // its [matrix] list ("algorithms" for algorithm), with kMatrix
  std::vector<std::string> matrixAliases;  // more names of that list ("step-times")
};

// Every run-level setting; the help texts list the registry's models, algorithms, topologies and
// transports. The functions in the result keep a reference to `registry`.
std::vector<Setting> peerSettings(const Registry& registry);

// The setting named `name` (a flag's long name or alias, or a Python keyword), or null.
const Setting* findSetting(const std::vector<Setting>& settings, const std::string& name);

// Whether front end `end` takes `s`.
inline bool takes(const Setting& s, FrontEnd end) { return (s.frontEnds & end) != 0; }
// The name of `s` in front end `end`: the flag, the Python keyword, the bench name, the [matrix]
// list.
std::string nameIn(const Setting& s, FrontEnd end);
// The names front end `end` takes for `s`: nameIn and its aliases (the flags' and the lists').
std::vector<std::string> namesIn(const Setting& s, FrontEnd end);
// The setting front end `end` takes under `name` (or an alias), or null.
const Setting* findSetting(const std::vector<Setting>& settings, const std::string& name,
                           FrontEnd end);
// Every name front end `end` takes, aliases included: what an unknown name is compared with.
std::vector<std::string> namesIn(const std::vector<Setting>& settings, FrontEnd end);
// The help of `s` in front end `end`.
const std::string& helpIn(const Setting& s, FrontEnd end);

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

// Adds setting `s` as the flag --NAME of `app` (NAME each of `names`, the first its long name):
// help, type and check from the declaration, `defaultText` shown as its default (empty: none),
// and a checked value (a list's items joined by commas; a switch's "true") given to `store`.
// `s` must outlive `app`.
CLI::Option* addSettingFlag(CLI::App& app, const Setting& s, const std::vector<std::string>& names,
                            const std::string& help, const std::string& defaultText,
                            std::function<void(const std::string& text)> store);
// After a parse of `app` that allowed extras: throws for what is left, as parsePeerFlags.
void refuseUnknownFlags(const CLI::App& app);

}  // namespace gossamer::engine::cli
