// The settings schema (engine/peer_settings.h) through every front end it binds: each setting
// set to a value other than its default by its flag (and aliases), its GOSSAMER_ variable, a
// --config file and, where bound, its Python keyword; and unknown names refused with the closest.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "algorithms/builtin.h"
#include "engine/peer_settings.h"
#include "kernels/codec.h"
#include "tests/engine/peer_processes.h"

namespace gossamer {
namespace {

using engine::cli::PeerConfig;
using engine::cli::PeerOptions;
using engine::cli::Setting;

const engine::Registry& registry() {
  static const engine::Registry r = algorithms::makeRegistry();
  return r;
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> s = engine::cli::peerSettings(registry());
  return s;
}

struct Parsed {
  PeerOptions options;
  std::string error;  // empty: parsed
  std::string help;
};

// gossamer-peer's command line, as its main builds it.
Parsed parse(const std::vector<std::string>& args) {
  Parsed out;
  CLI::App app{"gossamer-peer"};
  engine::cli::addPeerFlags(app, out.options, settings(), registry());
  std::vector<const char*> argv = {"gossamer-peer"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  try {
    engine::cli::parsePeerFlags(app, static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    out.error = e.what();
  }
  out.help = app.help();
  return out;
}

std::string environmentName(const std::string& name) {
  std::string out = "GOSSAMER_";
  for (char c : name) out.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(c)));
  return out;
}

// What a peer's configuration holds, as text: two configurations differ where this does.
std::string fingerprint(const PeerConfig& c) {
  const engine::runtime::TrainingConfig& t = c.training;
  const engine::runtime::NetworkConfig& n = c.network;
  std::string seeds;
  for (const net::Endpoint& seed : n.seeds) seeds += seed.str() + ";";
  return fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}"
      "|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
      t.model, t.algorithm, engine::formatOptionList(t.algorithmOptions), t.topology,
      static_cast<int>(t.topologyOptions.mixing), t.topologyOptions.seed,
      static_cast<int>(t.optimizer.kind), t.optimizer.lr, t.optimizer.momentum,
      t.optimizer.weightDecay, static_cast<int>(t.schedule.kind), t.batch, t.maxSteps, t.minPeers,
      t.seed, kernels::formatCodec(t.compression.codec), t.compression.errorFeedback,
      t.normBound.ratio, t.commTimeout.count(), t.startTimeout.count(), t.joinTimeout.count(),
      t.finishTimeout.count(), t.evalEvery, t.evalSamples, t.finalLocalEval, t.finalConsensus,
      t.minStepTime.count(), t.metricsPath, t.checkpointDir, t.checkpointEvery, t.resume,
      t.progress, n.transport, n.listen.str(), n.advertise.str(), seeds, n.peerId, n.clusterId,
      n.secret.size(), static_cast<int>(n.security), n.membership.probeInterval.count(),
      n.noInbound, n.relay.enabled, n.relay.budgetBytesPerSecond, n.tcpStreams);
}

// Values to try, in order; the first one a setting takes (and that is not its default) is its
// sample.
std::vector<std::string> candidates(const Setting& s, const std::string& secretFile) {
  std::vector<std::string> out = s.allowed;
  for (const char* c : {"3", "2,3", "7.5", "somewhere:7000", "fp16", "k=v", "dpsgd"})
    out.push_back(c);
  out.push_back(secretFile);
  return out;
}

std::string commandLineSample(const Setting& s) {
  if (s.flag) return "true";
  const std::string defaultValue = s.get(PeerOptions{});
  for (const std::string& c : candidates(s, ""))
    if (!c.empty() && c != defaultValue && s.check(c).empty()) return c;
  FAIL("no sample value for --" << s.name);
  return {};
}

TEST_CASE("settings: every flag, alias, variable and config key sets its setting") {
  test::Scratch scratch;
  std::size_t bound = 0;
  for (const Setting& s : settings()) {
    if (!s.set) continue;
    ++bound;
    const std::string sample = commandLineSample(s);
    INFO("--" << s.name << " " << sample);
    auto expect = [&](const Parsed& p) {
      CHECK(p.error.empty());
      CHECK(s.get(p.options) == sample);
    };
    // The flag and its aliases.
    for (const std::string& name : [&] {
           std::vector<std::string> names = {s.name};
           names.insert(names.end(), s.aliases.begin(), s.aliases.end());
           return names;
         }()) {
      expect(s.flag ? parse({"--" + name}) : parse({"--" + name, sample}));
    }
    // The environment (only the first long name has a variable).
    const std::string variable = environmentName(s.name);
    ::setenv(variable.c_str(), sample.c_str(), 1);
    expect(parse({}));
    ::unsetenv(variable.c_str());
    // A config file.
    const std::string config = (scratch.dir / (s.name + ".toml")).string();
    std::ofstream(config) << s.name << " = \"" << sample << "\"\n";
    expect(parse({"--config", config}));
    // --help shows it with its help text.
    CHECK(parse({}).help.find("--" + s.name) != std::string::npos);
    CHECK(parse({}).help.find(s.help.substr(0, std::min<std::size_t>(20, s.help.find('\n')))) !=
          std::string::npos);
  }
  CHECK(bound >= 70);
}

TEST_CASE("settings: every Python keyword changes the peer's configuration") {
  test::Scratch scratch;
  const std::string defaults = fingerprint(PeerConfig{});
  std::size_t bound = 0;
  for (const Setting& s : settings()) {
    if (!s.apply) continue;
    ++bound;
    INFO("Python keyword " << s.python);
    bool changed = false;
    std::vector<std::string> tries = candidates(s, scratch.secret);
    if (s.flag || s.type == "BOOL") tries = {"true", "false"};
    for (const std::string& c : tries) {
      PeerConfig config;
      try {
        engine::cli::applyPythonSetting(settings(), config, s.python, c);
      } catch (const Error&) {
        continue;
      }
      if (fingerprint(config) != defaults) {
        changed = true;
        break;
      }
    }
    CHECK(changed);
  }
  // The settings the Python module lacked before the schema bound them.
  for (const char* keyword : {"compress", "error_feedback", "max_norm_ratio"})
    CHECK(engine::cli::findSetting(settings(), keyword) != nullptr);
  CHECK(bound >= 35);
  PeerConfig c;
  engine::cli::applyPythonSetting(settings(), c, "compress", "int8");
  engine::cli::applyPythonSetting(settings(), c, "error_feedback", "off");
  engine::cli::applyPythonSetting(settings(), c, "max_norm_ratio", "4");
  CHECK(kernels::formatCodec(c.training.compression.codec) == "int8:256");
  CHECK(!c.training.compression.errorFeedback);
  CHECK(c.training.normBound.ratio == 4);
}

TEST_CASE("settings: an unknown flag, config key or keyword is refused naming the closest") {
  CHECK(parse({"--join-timout", "3"}).error ==
        "unknown flag '--join-timout'; did you mean '--join-timeout'?");
  // An algorithm lacking the option: the general flag of that name.
  CHECK(parse({"--dpsgd.momentum", "true"}).error ==
        "unknown flag '--dpsgd.momentum'; did you mean '--momentum'?");
  CHECK(parse({"--step-tme=3"}).error == "unknown flag '--step-tme'; did you mean '--step-time'?");
  CHECK(parse({"stray"}).error.find("unexpected argument 'stray'") != std::string::npos);

  test::Scratch scratch;
  const std::string config = (scratch.dir / "bad.toml").string();
  std::ofstream(config) << "batch = 16\njoin-timout = 3\n";
  CHECK(parse({"--config", config}).error ==
        "unknown key 'join-timout' in the --config file; did you mean 'join-timeout'?");
  std::ofstream(config) << "[gosgd]\npp = 0.3\n";
  CHECK(parse({"--config", config}).error ==
        "unknown key 'gosgd.pp' in the --config file; did you mean 'gosgd.p'?");
  std::ofstream(config) << "[dpsgd]\nmomentum = 0.5\n";
  CHECK(parse({"--config", config}).error ==
        "unknown key 'dpsgd.momentum' in the --config file; did you mean 'momentum'?");

  CHECK_THROWS_WITH_AS(
      [] {
        PeerConfig c;
        engine::cli::applyPythonSetting(settings(), c, "max_norm_ration", "1");
      }(),
      doctest::Contains("unknown option 'max_norm_ration'; did you mean 'max_norm_ratio'?"), Error);
}

TEST_CASE("settings: a config file's [NAME] section sets the algorithm's options") {
  test::Scratch scratch;
  const std::string config = (scratch.dir / "algorithm.toml").string();
  std::ofstream(config) << "algorithm = \"gosgd\"\nstep-time = 5\n[gosgd]\np = 0.3\n";
  const Parsed p = parse({"--config", config});
  CHECK(p.error.empty());
  CHECK(p.options.algorithm == "gosgd");
  CHECK(p.options.minStepTime == 5);
  CHECK(p.options.algorithmOptions.at("gosgd").at("p") == "0.3");
  // The command line wins over the file, which wins over the environment.
  ::setenv("GOSSAMER_BATCH", "7", 1);
  ::setenv("GOSSAMER_ALGORITHM", "dpsgd", 1);
  const Parsed q = parse({"--config", config, "--step-time", "9"});
  ::unsetenv("GOSSAMER_BATCH");
  ::unsetenv("GOSSAMER_ALGORITHM");
  CHECK(q.options.minStepTime == 9);
  CHECK(q.options.algorithm == "gosgd");
  CHECK(q.options.batch == 7);
}

TEST_CASE("settings: bad values are refused with the flag and the rule") {
  CHECK(parse({"--join-timeout", "-1"})
            .error.find("--join-timeout: '-1' is not a number of seconds (0 or more)") !=
        std::string::npos);
  CHECK(parse({"--batch", "0"}).error.find("--batch: '0' must be more than 0") !=
        std::string::npos);
  CHECK(parse({"--error-feedback", "maybe"}).error.find("is not one of: on, off") !=
        std::string::npos);
  CHECK(parse({"--compress", "zip"}).error.find("--compress") != std::string::npos);
  CHECK(parse({"--rdma-port", "256"}).error.find("must be at most 255") != std::string::npos);
}

}  // namespace
}  // namespace gossamer
