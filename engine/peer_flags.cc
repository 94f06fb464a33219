// gossamer-peer's command line (peer_settings.h): the settings as CLI11 flags, the algorithms'
// options, `--config` files and GOSSAMER_* environment variables, and the refusal of unknown
// names with the closest known one.
#include <cctype>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <unistd.h>

#include "engine/options.h"
#include "engine/peer_settings.h"

namespace gossamer::engine::cli {
namespace {

// The environment variable of a flag: GOSSAMER_ and its long name in upper case, dashes and dots
// as underscores (--join-timeout: GOSSAMER_JOIN_TIMEOUT; --gosgd.p: GOSSAMER_GOSGD_P).
std::string environmentName(const std::string& longName) {
  std::string out = "GOSSAMER_";
  for (const char c : longName)
    out.push_back(c == '-' || c == '.'
                      ? '_'
                      : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

// An unknown name on the command line or in a config file: a bad command line (exit status
// 100 and up, as CLI11's own errors).
class UnknownName : public CLI::ParseError {
 public:
  explicit UnknownName(const std::string& message)
      : CLI::ParseError("UnknownName", message, CLI::ExitCodes::ExtrasError) {}
};

// The long names of every flag of `app` (but --help), with `prefix`.
std::vector<std::string> flagNames(const CLI::App& app, const std::string& prefix) {
  std::vector<std::string> out;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames())
      if (name != "help") out.push_back(prefix + name);
  return out;
}

// What an unknown name `name` (with `prefix`, "--" or "") suggests: a general flag when `name`
// is NAME.KEY and KEY is one (--dpsgd.momentum: --momentum, dpsgd having no such option), else
// the closest name.
std::string suggestion(const CLI::App& app, const std::string& name, const std::string& prefix) {
  if (const auto dot = name.rfind('.'); dot != std::string::npos) {
    const std::string key = name.substr(dot + 1);
    if (app.get_option_no_throw("--" + key) != nullptr) return prefix + key;
  }
  return closestName(name, flagNames(app, prefix));
}

// CLI11's TOML/INI reader, with two changes: a key in a [NAME] section (or a dotted key NAME.KEY)
// sets the flag --NAME.KEY, an algorithm's option; and a key that names no flag is refused with
// the closest one.
class ConfigFile : public CLI::ConfigTOML {
 public:
  explicit ConfigFile(const CLI::App& app) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> out;
    for (CLI::ConfigItem item : CLI::ConfigTOML::from_config(input)) {
      if (item.name == "++" || item.name == "--") continue;  // a section opens or closes
      item.name = item.fullname();
      item.parents.clear();
      if (app_.get_option_no_throw("--" + item.name) == nullptr) {
        throw UnknownName(fmt::format("unknown key '{}' in the --config file; did you mean '{}'?",
                                      item.name, suggestion(app_, item.name, "")));
      }
      out.push_back(std::move(item));
    }
    return out;
  }

 private:
  const CLI::App& app_;
};

// A setting as a flag of `app`, stored in `o`.
void addSetting(CLI::App& app, PeerOptions& o, const Setting& s) {
  addSettingFlag(app, s, namesIn(s, kPeerFlags), s.help, s.defaultValue,
                 [&o, &s](const std::string& text) { s.set(o, text); });
}

// Every algorithm's options as --NAME.OPTION flags (a config file's [NAME] section sets them too).
void addAlgorithmOptions(CLI::App& app, PeerOptions& o, const engine::Registry& registry) {
  for (const std::string& name : registry.algorithms.names()) {
    const engine::AlgorithmSpec& spec = registry.algorithms.get(name);
    for (const engine::OptionInfo& info : spec.options) {
      const std::string flag = "--" + name + "." + info.name;
      app.add_option_function<std::string>(
             flag,
             [&o, name, key = info.name](const std::string& value) {
               o.algorithmOptions[name][key] = value;
             },
             fmt::format("{} ({}, default {})", info.help, info.type, info.defaultValue))
          ->group("Options of algorithm " + name);
    }
  }
}

// Every flag of `app` (but --help) can come from its environment variable, for launchers that
// configure containers and batch jobs by environment. Precedence: the command line, then the
// --config file, then the environment (CLI11 reads a variable only for a flag still unset; an
// empty variable counts as unset). GOSSAMER_CONFIG names a config file that must exist. Returns
// the GOSSAMER_ variables that name no flag (a misspelling would otherwise go unnoticed), each
// with the closest that does.
std::vector<std::string> bindEnvironment(CLI::App& app) {
  std::set<std::string> known;
  for (CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr() || option->get_lnames().empty()) continue;
    const std::string name = environmentName(option->get_lnames().front());
    known.insert(name);
    if (option == app.get_config_ptr()) {
      // CLI11 reads the config file before the environment: the variable becomes the default.
      if (const char* file = std::getenv(name.c_str()); file != nullptr && *file != '\0')
        option->default_str(file)->required();
      continue;
    }
    option->envname(name);
  }
  std::vector<std::string> unknown;
  const std::vector<std::string> names(known.begin(), known.end());
  for (char** entry = ::environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (name.rfind("GOSSAMER_", 0) == 0 && known.count(name) == 0)
      unknown.push_back(
          fmt::format("{} names no flag (did you mean {}?)", name, closestName(name, names)));
  }
  return unknown;
}

}  // namespace

CLI::Option* addSettingFlag(CLI::App& app, const Setting& s, const std::vector<std::string>& names,
                            const std::string& help, const std::string& defaultText,
                            std::function<void(const std::string& text)> store) {
  std::string flags;
  for (const std::string& name : names) flags += (flags.empty() ? "--" : ",--") + name;
  CLI::Option* option = nullptr;
  if (s.flag) {
    option = app.add_flag_function(
        flags, [store](std::int64_t count) { store(count > 0 ? "true" : "false"); }, help);
  } else if (s.list) {
    option = app.add_option_function<std::vector<std::string>>(
                    flags,
                    [store](const std::vector<std::string>& items) {
                      store(fmt::format("{}", fmt::join(items, ",")));
                    },
                    help)
                 ->delimiter(',');
  } else {
    option = app.add_option_function<std::string>(flags, store, help);
  }
  if (!s.flag) {
    option->check(CLI::Validator([&s](std::string& text) { return s.check(text); }, ""));
    option->type_name(s.type);
  }
  if (!defaultText.empty()) option->default_str(defaultText);
  if (!s.group.empty()) option->group(s.group);
  return option;
}

std::vector<std::string> addPeerFlags(CLI::App& app, PeerOptions& o,
                                      const std::vector<Setting>& settings,
                                      const Registry& registry) {
  app.set_config("--config", "",
                 "read flags from a TOML/INI config file (KEY = VALUE, the keys the flags' long "
                 "names; algorithm options go in a [NAME] section)");
  for (const Setting& s : settings)
    if (s.set) addSetting(app, o, s);
  addAlgorithmOptions(app, o, registry);
  app.config_formatter(std::make_shared<ConfigFile>(app));
  app.allow_extras();  // refused by parsePeerFlags, with the closest name
  return bindEnvironment(app);
}

void parsePeerFlags(CLI::App& app, int argc, const char* const* argv) {
  app.parse(argc, argv);
  refuseUnknownFlags(app);
}

void refuseUnknownFlags(const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining();
  if (extras.empty()) return;
  for (const std::string& extra : extras) {
    if (extra.rfind("-", 0) != 0) continue;
    const std::string name = extra.substr(0, extra.find('='));
    throw UnknownName(
        fmt::format("unknown flag '{}'; did you mean '{}'?", name, suggestion(app, name, "--")));
  }
  throw UnknownName(
      fmt::format("unexpected argument '{}' (every value follows its flag)", extras.front()));
}

}  // namespace gossamer::engine::cli
