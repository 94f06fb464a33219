// The run-level settings schema (engine/peer_settings.h) through gossamer-bench's front ends
// (bench/bench_settings.h): every setting simulate takes set by its flag (and aliases), every
// [run] key and [matrix] list of the experiment files set by its name, a bad value refused with
// the setting's reason in each, unknown names refused with the closest, and every committed
// experiment file under bench/results still read as it was written.
#include "bench/bench_settings.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "bench/convergence_config.h"
#include "bench/simulate_options.h"

namespace gossamer {
namespace {

namespace cli = engine::cli;
using bench::benchSettings;
using bench::Matrix;
using bench::RunSettings;
using bench::SimulateOptions;

struct Parsed {
  SimulateOptions options;
  std::string error;  // empty: parsed
  std::string help;
};

// `gossamer-bench simulate ARGS`, as gossamer-bench's main parses it, without running.
Parsed simulate(const std::vector<std::string>& args) {
  Parsed out;
  CLI::App app{"gossamer-bench"};
  CLI::App* command =
      bench::addSimulateFlags(app, [&out](const SimulateOptions& o) { out.options = o; });
  std::vector<const char*> argv = {"gossamer-bench", "simulate"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    out.error = e.what();
  }
  out.help = command->help();
  return out;
}

// The field `name` of `target` (listed by its bind()) as text; with `text`, parsed from it first.
template <typename Target>
std::string field(Target& target, const std::string& name, const std::string* text = nullptr) {
  std::string out;
  bool found = false;
  auto bind = [&](const char* n, auto& f, const char* = "") {
    if (name != n) return;
    if (text != nullptr) engine::detail::parseOne(n, *text, f);
    out = engine::detail::formatOne(f);
    found = true;
  };
  target.bind(bind);
  REQUIRE_MESSAGE(found, "no field " << name);
  return out;
}

// What `text` becomes in the field `name` of a Target.
template <typename Target>
std::string normalized(const std::string& name, const std::string& text) {
  Target target;
  return field(target, name, &text);
}

// A valid value of `s` other than `defaultValue`.
std::string sample(const cli::Setting& s, const std::string& defaultValue) {
  std::vector<std::string> tries = s.allowed;
  for (const char* c : {"3", "0.5", "2,3", "7.5", "fp16", "int8", "dpsgd", "somewhere:7000"})
    tries.push_back(c);
  for (const std::string& c : tries)
    if (c != defaultValue && s.check(c).empty()) return c;
  FAIL("no sample value for " << s.name);
  return {};
}

// A value `s` refuses (empty: none of these).
std::string badValue(const cli::Setting& s) {
  for (const char* c : {"-1", "0", "x", "2", "maybe", "zip"})
    if (!s.check(c).empty()) return c;
  return {};
}

std::string runFile(const std::string& key, const std::string& value) {
  return fmt::format("[run]\n{} = {}\n[matrix]\nalgorithms = gosgd\n", key, value);
}

std::string parseError(const std::string& text) {
  try {
    bench::parseMatrix(text, "test.conf");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST_CASE("bench settings: every simulate setting is a flag that sets its field") {
  std::size_t walked = 0;
  std::size_t refused = 0;
  for (const cli::Setting& s : benchSettings()) {
    if (!cli::takes(s, cli::kSimulate)) continue;
    ++walked;
    const std::string name = cli::nameIn(s, cli::kSimulate);
    SimulateOptions defaults;
    const std::string value = sample(s, field(defaults, name));
    INFO("--" << name << " " << value);
    for (const std::string& flag : cli::namesIn(s, cli::kSimulate)) {
      Parsed p = simulate({"--" + flag, value});
      CHECK(p.error.empty());
      CHECK(field(p.options, name) == normalized<SimulateOptions>(name, value));
    }
    // --help shows it with the setting's help.
    const Parsed p = simulate({});
    const std::string& help = cli::helpIn(s, cli::kSimulate);
    CHECK(p.help.find("--" + name) != std::string::npos);
    CHECK(p.help.find(help.substr(0, std::min<std::size_t>(20, help.find('\n')))) !=
          std::string::npos);
    // A bad value: refused with the setting's reason.
    if (const std::string bad = badValue(s); !bad.empty()) {
      ++refused;
      CHECK(simulate({"--" + name, bad}).error.find(s.check(bad)) != std::string::npos);
    }
  }
  CHECK(walked >= 20);
  CHECK(refused >= 10);
  // Units and meanings as before: --step-time in milliseconds, --min-step-time the same.
  CHECK(SimulateOptions{}.run.stepTime == 300);
  CHECK(simulate({"--step-time", "40"}).options.run.stepTime == 40);
  CHECK(simulate({"--min-step-time", "40"}).options.run.stepTime == 40);
  CHECK(simulate({"--schedule", "cosine"}).options.run.schedule == "cosine");
  CHECK(simulate({"--hidden", "8,4"}).options.run.hidden == std::vector<std::size_t>{8, 4});
  // Uneven peers: a step time per peer, and a straggler of a given slow-down and length.
  CHECK(simulate({"--peer-step-times", "300,300,600,1200"}).options.run.peerStepTimes ==
        std::vector<double>{300, 300, 600, 1200});
  CHECK(simulate({"--peer-step-times", "300,-1"}).error.find("'-1' must be at least 0") !=
        std::string::npos);
  const SimulateOptions slow =
      simulate({"--straggler-factor", "4", "--straggler-seconds", "30"}).options;
  CHECK(slow.straggler.factor == 4);
  CHECK(slow.straggler.seconds == 30);
  CHECK_FALSE(simulate({"--straggler-factor", "0.5"}).error.empty());
  const Matrix m = bench::matrixOf(simulate({"--eval-every-steps", "5"}).options);
  CHECK(m.run.evalSeconds == 0);
  CHECK(m.run.evalEverySteps == 5);
}

TEST_CASE("bench settings: every [run] key sets its field, and every field is a setting") {
  std::set<std::string> fields;
  RunSettings run;
  auto bind = [&](const char* name, auto&, const char* = "") { fields.insert(name); };
  run.bind(bind);
  const std::vector<std::string> keys = cli::namesIn(benchSettings(), cli::kRun);
  CHECK(fields == std::set<std::string>(keys.begin(), keys.end()));

  std::size_t refused = 0;
  const std::string help = bench::experimentFileHelp();
  for (const cli::Setting& s : benchSettings()) {
    if (!cli::takes(s, cli::kRun)) continue;
    const std::string key = cli::nameIn(s, cli::kRun);
    // convergence --help lists it, with its setting's help.
    CHECK(help.find("  " + key + " " + s.type) != std::string::npos);
    const std::string& keyHelp = cli::helpIn(s, cli::kRun);
    CHECK(help.find(keyHelp.substr(0, keyHelp.find('\n'))) != std::string::npos);
    RunSettings defaults;
    const std::string value = sample(s, field(defaults, key));
    INFO("[run] " << key << " = " << value);
    Matrix m;
    CHECK_NOTHROW(m = bench::parseMatrix(runFile(key, value), "test.conf"));
    CHECK(field(m.run, key) == normalized<RunSettings>(key, value));
    if (const std::string bad = badValue(s); !bad.empty()) {
      ++refused;
      CHECK(parseError(runFile(key, bad)).find(key + ": " + s.check(bad)) != std::string::npos);
    }
  }
  CHECK(refused >= 12);
}

TEST_CASE("bench settings: every [matrix] list of a setting checks each item by its rule") {
  std::size_t walked = 0;
  for (const cli::Setting& s : benchSettings()) {
    if (!cli::takes(s, cli::kMatrix)) continue;
    for (const std::string& list : cli::namesIn(s, cli::kMatrix)) {
      ++walked;
      const std::string first = sample(s, "");
      const std::string second = sample(s, first);
      INFO("[matrix] " << list << " = " << first << ", " << second);
      std::string text = "[matrix]\n";
      if (s.name != "algorithm") text += "algorithms = gosgd\n";
      text += fmt::format("{} = {}, {}\n", list, first, second);
      Matrix m;
      CHECK_NOTHROW(m = bench::parseMatrix(text, "test.conf"));
      CHECK(bench::formatMatrix(m).find(fmt::format("{} = {}, {}\n", cli::nameIn(s, cli::kMatrix),
                                                    first, second)) != std::string::npos);
      if (const std::string bad = badValue(s); !bad.empty()) {
        text = fmt::format("[matrix]\nalgorithms = gosgd\n{} = {}, {}\n", list, first, bad);
        CHECK(parseError(text).find(fmt::format("test.conf:3: {}: {}", list, s.check(bad))) !=
              std::string::npos);
      }
    }
  }
  CHECK(walked >= 6);
}

TEST_CASE("bench settings: unknown names are refused naming the closest") {
  CHECK(simulate({"--comm-timout", "3"}).error ==
        "unknown flag '--comm-timout'; did you mean '--comm-timeout'?");
  CHECK(simulate({"--schedul=cosine"}).error ==
        "unknown flag '--schedul'; did you mean '--schedule'?");
  CHECK(simulate({"stray"}).error.find("unexpected argument 'stray'") != std::string::npos);
  CHECK(parseError(runFile("comm-timout", "3"))
            .find("unknown [run] key 'comm-timout'; did you mean 'comm-timeout'?") !=
        std::string::npos);
  // gossamer-peer's name of a setting the files name otherwise.
  CHECK(parseError(runFile("lr-schedule", "cosine")).find("did you mean 'schedule'?") !=
        std::string::npos);
  CHECK(parseError("[matrix]\nalgorithm = gosgd\n").find("did you mean 'algorithms'?") !=
        std::string::npos);
  CHECK(parseError("[matrix]\nalgorithms = gosgd\nstep-tme = 3\n")
            .find("test.conf:3: unknown matrix list 'step-tme'") != std::string::npos);
}

// Every key = value line of `committed` appears in `formatted`, as it was written.
void checkSameMeaning(const std::string& committed, const std::string& formatted) {
  std::istringstream in(committed);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.front() == '#' || line.find(" = ") == std::string::npos) continue;
    INFO(line);
    CHECK(formatted.find(line + "\n") != std::string::npos);
  }
}

TEST_CASE("bench settings: every committed experiment file still reads as written") {
  namespace fs = std::filesystem;
  std::size_t files = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(fs::path(GOSSAMER_SOURCE_DIR) / "bench" / "results")) {
    if (entry.path().extension() != ".conf") continue;
    ++files;
    INFO(entry.path().string());
    Matrix m;
    REQUIRE_NOTHROW(m = bench::loadMatrix(entry.path().string()));
    CHECK(!m.experiments().empty());
    // What gossamer-bench wrote as experiments.conf (formatMatrix) is what it reads back.
    if (entry.path().filename() == "experiments.conf") {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      checkSameMeaning(text.str(), bench::formatMatrix(m));
    }
    CHECK(bench::formatMatrix(bench::parseMatrix(bench::formatMatrix(m), "again")) ==
          bench::formatMatrix(m));
  }
  CHECK(files >= 19);
}

}  // namespace
}  // namespace gossamer
