// gossamer-bench convergence's experiment files: the step-time list and the seed002 preset, as a
// user writes and reads them (--print-config), and a bad value named with its file and line.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "tests/process_util.h"

namespace gossamer {
namespace {

std::string bench(const std::string& args) {
  return std::string(GOSSAMER_BENCH_BINARY) + " convergence " + args;
}

std::string writeConfig(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST_CASE("bench convergence: step times are a [run] setting and a [matrix] list") {
  // `step-time` in [matrix] is the list; `step-times` is read as the same list.
  for (const char* key : {"step-time", "step-times"}) {
    CAPTURE(key);
    const std::string path = writeConfig(
        "gossamer-step-times.conf",
        std::string("[run]\nstep-time = 40\n[matrix]\nalgorithms = gosgd\n") + key + " = 0, 300\n");
    const test::ProcessResult r = test::runCommand(bench("--config " + path + " --print-config"));
    INFO(r.output);
    REQUIRE(r.exitCode == 0);
    CHECK(r.output.find("step-time = 40") != std::string::npos);
    CHECK(r.output.find("step-time = 0, 300") != std::string::npos);
  }

  const std::string bad = writeConfig("gossamer-bad-step-times.conf",
                                      "[matrix]\nalgorithms = gosgd\nstep-time = 10, -5\n");
  const test::ProcessResult refused =
      test::runCommand(bench("--config " + bad + " --print-config"));
  INFO(refused.output);
  CHECK(refused.exitCode != 0);
  CHECK(refused.output.find(bad + ":3: step-time: '-5' must be at least 0") != std::string::npos);
}

TEST_CASE("bench convergence: codecs are a [run] setting and a [matrix] list, named in --json") {
  const std::string path = writeConfig(
      "gossamer-compress.conf",
      "[run]\ncompress = fp16\nerror-feedback = off\n[matrix]\nalgorithms = allreduce-sgd\n"
      "compress = none, int8\n");
  const test::ProcessResult r = test::runCommand(bench("--config " + path + " --print-config"));
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  CHECK(r.output.find("compress = fp16") != std::string::npos);
  CHECK(r.output.find("error-feedback = off") != std::string::npos);
  CHECK(r.output.find("compress = none, int8") != std::string::npos);

  const std::string bad = writeConfig("gossamer-bad-compress.conf",
                                      "[matrix]\nalgorithms = gosgd\ncompress = int8, zip\n");
  const test::ProcessResult refused =
      test::runCommand(bench("--config " + bad + " --print-config"));
  INFO(refused.output);
  CHECK(refused.exitCode != 0);
  CHECK(refused.output.find(bad + ":3:") != std::string::npos);
  CHECK(refused.output.find("zip") != std::string::npos);

  // A short run: each experiment object carries its codec and its bytes against float32's.
  const std::string run = writeConfig(
      "gossamer-compress-run.conf",
      "[run]\ndataset = synthetic\nmodel = softmax\nepochs = 0.5\ntarget = 0.3\n"
      "eval-seconds = 0.2\n[matrix]\nalgorithms = allreduce-sgd\ncompress = none, int8\n");
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "gossamer-compress";
  const test::ProcessResult ran =
      test::runCommand(bench("--config " + run + " --out " + out.string() + " --json"), 120);
  INFO(ran.output);
  REQUIRE(ran.exitCode == 0);
  const std::string json = test::lastLine(ran.output);
  CHECK(json.find("\"compress\":\"none\"") != std::string::npos);
  CHECK(json.find("\"compress\":\"int8:256\"") != std::string::npos);
  CHECK(json.find("\"bytes_ratio_vs_baseline\"") != std::string::npos);
}

// With peer-step-times every experiment also runs its even reference: --json, summary.csv and
// report.md give time_vs_ideal and min_fast_peer_utilization (their closed forms:
// uneven_figures_test.cc).
TEST_CASE("bench convergence: uneven peers are measured against their even reference") {
  const std::string run =
      writeConfig("gossamer-uneven-run.conf",
                  "[run]\ndataset = synthetic\nmodel = softmax\nsteps = 40\ntarget = 0.3\n"
                  "eval-seconds = 0.1\npeer-step-times = 5, 20\n[matrix]\nalgorithms = local-sgd\n"
                  "peers = 2\n[local-sgd]\nround-seconds = auto\n");
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "gossamer-uneven";
  const test::ProcessResult ran =
      test::runCommand(bench("--config " + run + " --out " + out.string() + " --json"), 120);
  INFO(ran.output);
  REQUIRE(ran.exitCode == 0);
  const std::string json = test::lastLine(ran.output);
  const double vsIdeal = test::jsonNumber(json, "time_vs_ideal");
  CHECK(vsIdeal > 0);
  CHECK(vsIdeal < 10);
  const double fast = test::jsonNumber(json, "min_fast_peer_utilization");
  CHECK(fast > 0);
  CHECK(fast <= 1);
  std::ifstream summary(out / "summary.csv");
  std::string header;
  std::getline(summary, header);
  CHECK(header.find(",time_vs_ideal,min_fast_peer_utilization,reference_time_to_target_s") !=
        std::string::npos);
  std::ifstream report(out / "report.md");
  std::stringstream text;
  text << report.rdbuf();
  CHECK(text.str().find("## Uneven peers (5, 20 ms a step)") != std::string::npos);
}

// Evaluation points: every evaluation but the final one is the consensus at exactly a multiple
// of eval-every-steps; the baseline is a setting, and compared with itself it is 1x.
TEST_CASE("bench convergence: evaluation points are exact steps, and the baseline is a setting") {
  const std::string run = writeConfig(
      "gossamer-points-run.conf",
      "[run]\ndataset = synthetic\nmodel = softmax\nsteps = 30\ntarget = 0.3\ntarget-loss = 5\n"
      "eval-every-steps = 7\nbaseline = gosgd\n[matrix]\nalgorithms = gosgd, dpsgd\n");
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "gossamer-points";
  const test::ProcessResult ran =
      test::runCommand(bench("--config " + run + " --out " + out.string() + " --json"), 120);
  INFO(ran.output);
  REQUIRE(ran.exitCode == 0);
  const std::string json = test::lastLine(ran.output);
  CHECK(json.find("\"baseline\":\"gosgd\"") != std::string::npos);
  // The first experiment is gosgd: against itself.
  CHECK(test::jsonNumber(json, "speedup_vs_baseline") == 1);
  CHECK(json.find("\"time_to_target_loss_s\":") != std::string::npos);
  CHECK(json.find("\"peak_memory_vs_model\":") != std::string::npos);
  std::ifstream points(out / "points.jsonl");
  int evaluations = 0;
  for (std::string line; std::getline(points, line);) {
    if (line.find("\"final\":true") != std::string::npos) continue;
    ++evaluations;
    const double minStep = test::jsonNumber(line, "min_step");
    CHECK(minStep == test::jsonNumber(line, "max_step"));
    CHECK(std::fmod(minStep, 7) == 0);
  }
  CHECK(evaluations == 2 * 4);  // steps 7, 14, 21, 28 of each experiment
  std::ifstream report(out / "report.md");
  std::stringstream text;
  text << report.rdbuf();
  CHECK(text.str().find("exact to 7 steps") != std::string::npos);
  CHECK(text.str().find("speed-up vs gosgd") != std::string::npos);
}

TEST_CASE("bench convergence: the full preset has every algorithm and a geo block at 300 ms") {
  const test::ProcessResult r = test::runCommand(bench("--preset full --print-config"));
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  CHECK(r.output.find("# block fast-steps") != std::string::npos);
  CHECK(r.output.find("# block geo-300ms") != std::string::npos);
  for (const char* algorithm : {"dts", "diloco", "streaming-diloco", "ad-psgd", "allreduce-sgd"})
    CHECK(r.output.find(algorithm) != std::string::npos);
  const std::size_t slow = r.output.find("# block geo-300ms");
  REQUIRE(slow != std::string::npos);
  CHECK(r.output.find("step-time = 300", slow) != std::string::npos);
  CHECK(r.output.find("networks = lan, geo", slow) != std::string::npos);
}

TEST_CASE("bench convergence: the seed002 preset is a ResNet-50-sized model at 300 ms a step") {
  const test::ProcessResult r = test::runCommand(bench("--preset seed002 --print-config"));
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  CHECK(r.output.find("hidden = 4096,4096") != std::string::npos);
  CHECK(r.output.find("step-time = 300") != std::string::npos);
  CHECK(r.output.find("networks = lan, geo") != std::string::npos);
}

}  // namespace
}  // namespace gossamer
