// gossamer-bench simulate as a user runs it: the same seed gives the same report (its SHA-256 in
// --json, faults included), a broken invariant prints the seed and the command that replays it
// (and the replay breaks the same way), and a config file's matrix gives one row per experiment
// (several files, one folder each); --compress and --error-feedback are the flags of convergence.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "tests/process_util.h"

namespace gossamer {
namespace {

namespace fs = std::filesystem;

const std::string kSmall =
    " --dataset synthetic --train-samples 2000 --test-samples 500 --model softmax --batch 16"
    " --eval-seconds 2 --eval-samples 200 --log-level error";

std::string simulate(const std::string& args) {
  return std::string(GOSSAMER_BENCH_BINARY) + " simulate" + kSmall + " " + args;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string outDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gossamer-simulate-" + name);
  fs::remove_all(dir);
  return dir.string();
}

TEST_CASE("bench simulate: the same seed gives the same report, byte for byte") {
  const std::string args =
      "--peers 12 --algorithm gosgd --network geo --steps 30 --seed 4 --faults 3 --fault-window 8"
      " --json";
  const std::string a = outDir("a"), b = outDir("b");
  const test::ProcessResult first = test::runCommand(simulate(args + " --out " + a), 120);
  const test::ProcessResult second = test::runCommand(simulate(args + " --out " + b), 120);
  INFO(first.output);
  REQUIRE(first.exitCode == 0);
  REQUIRE(second.exitCode == 0);
  const std::string json = test::lastLine(first.output);
  // Exactly the headline figures; the uneven peers' are null without peer-step-times.
  for (const char* key :
       {"\"peers\":12", "\"virtual_seconds\":", "\"wall_seconds\":", "\"final_accuracy\":",
        "\"max_rss_mib\":", "\"report_sha256\":\"", "\"time_to_target_s\":",
        "\"time_vs_ideal\":null", "\"min_fast_peer_utilization\":null", "\"chosen\":\""})
    CHECK(json.find(key) != std::string::npos);
  CHECK(std::count(json.begin(), json.end(), ':') == 10);
  const std::regex sha("\"report_sha256\":\"([0-9a-f]{64})\"");
  std::smatch x, y;
  const std::string jsonB = test::lastLine(second.output);
  REQUIRE(std::regex_search(json, x, sha));
  REQUIRE(std::regex_search(jsonB, y, sha));
  CHECK(x[1] == y[1]);
  const std::string report = read(fs::path(a) / "report.md");
  CHECK(report == read(fs::path(b) / "report.md"));
  CHECK(report.find("- fault at") != std::string::npos);  // the faults are in it
  CHECK(fs::exists(fs::path(a) / "points.csv"));
  CHECK(fs::exists(fs::path(a) / "summary.csv"));
  // Another seed, another report.
  const std::string c = outDir("c");
  const test::ProcessResult other = test::runCommand(
      simulate(std::regex_replace(args, std::regex("--seed 4"), "--seed 5") + " --out " + c), 120);
  REQUIRE(other.exitCode == 0);
  CHECK(read(fs::path(c) / "report.md") != report);
}

TEST_CASE(
    "bench simulate: a broken invariant prints the seed, and the replay breaks the same way") {
  // The run cannot end within 3 virtual seconds (30 steps of 300 ms): the "no deadlock" invariant.
  const std::string out = outDir("broken");
  const test::ProcessResult broken = test::runCommand(
      simulate("--peers 6 --steps 30 --seed 9 --faults 2 --fault-kinds kill,straggler "
               "--max-virtual-seconds 3 --out " +
               out),
      120);
  INFO(broken.output);
  CHECK(broken.exitCode == 1);
  const std::regex violation("invariant violated at [0-9.]+ virtual s \\(seed 9\\): [^\n]*");
  std::smatch v;
  REQUIRE(std::regex_search(broken.output, v, violation));
  CHECK(v.str().find("did not end by 3 virtual seconds") != std::string::npos);
  const std::regex replay("replay: gossamer-bench (simulate [^\n]*)");
  std::smatch r;
  REQUIRE(std::regex_search(broken.output, r, replay));
  CHECK(r[1].str().find("--seed 9") != std::string::npos);
  const test::ProcessResult again =
      test::runCommand(std::string(GOSSAMER_BENCH_BINARY) + " " + r[1].str(), 120);
  std::smatch w;
  REQUIRE(std::regex_search(again.output, w, violation));
  CHECK(w.str() == v.str());
  CHECK(again.exitCode == 1);
}

TEST_CASE("bench simulate: a config file's matrix gives one row per experiment") {
  const fs::path path = fs::temp_directory_path() / "gossamer-simulate.conf";
  std::ofstream(path) << "[run]\ndataset = synthetic\ntrain-samples = 2000\ntest-samples = 500\n"
                         "model = softmax\nsteps = 20\nstep-time = 100\neval-seconds = 1\n"
                         "target = 0.5\n[matrix]\nalgorithms = allreduce-sgd, dpsgd\n"
                         "networks = lan, wan\npeers = 4\n";
  const std::string out = outDir("matrix");
  const test::ProcessResult run = test::runCommand(
      std::string(GOSSAMER_BENCH_BINARY) + " simulate --log-level error --json --config " +
          path.string() + " --out " + out,
      120);
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  const std::string summary = read(fs::path(out) / "summary.csv");
  CHECK(std::count(summary.begin(), summary.end(), '\n') == 5);  // header + 4
  CHECK(test::lastLine(run.output).find("\"experiments\": [") != std::string::npos);
  CHECK(summary.find("dpsgd/default/wan/4p/iid/100ms") != std::string::npos);
  // Two files: one folder each, named after them, and an index.
  const fs::path second = fs::temp_directory_path() / "gossamer-simulate-second.conf";
  fs::copy_file(path, second, fs::copy_options::overwrite_existing);
  const std::string both = outDir("blocks");
  const test::ProcessResult blocks = test::runCommand(
      std::string(GOSSAMER_BENCH_BINARY) + " simulate --log-level error --config " +
          path.string() + " --config " + second.string() + " --out " + both,
      120);
  REQUIRE(blocks.exitCode == 0);
  CHECK(read(fs::path(both) / "gossamer-simulate" / "summary.csv") == summary);
  CHECK(fs::exists(fs::path(both) / "gossamer-simulate-second" / "report.md"));
  CHECK(read(fs::path(both) / "report.md").find("gossamer-simulate-second/report.md") !=
        std::string::npos);
}

// summary.csv's bytes_per_peer of a run with one experiment.
double bytesPerPeer(const std::string& out) {
  std::istringstream summary(read(fs::path(out) / "summary.csv"));
  std::string header, row, name, value;
  std::getline(summary, header);
  std::getline(summary, row);
  std::istringstream names(header), values(row);
  while (std::getline(names, name, ',') && std::getline(values, value, ','))
    if (name == "bytes_per_peer") return std::stod(value);
  FAIL("no bytes_per_peer in " << out);
  return 0;
}

// The flags of `convergence` and gossamer-peer: the experiment is named after its codec, and its
// payloads travel encoded; a codec that does not exist is refused with its name.
TEST_CASE("bench simulate: --compress and --error-feedback as convergence's") {
  const std::string args = "--peers 4 --algorithm dpsgd --topology ring --steps 10 --seed 2";
  const std::string plain = outDir("plain"), int8 = outDir("int8");
  const test::ProcessResult a = test::runCommand(simulate(args + " --out " + plain), 120);
  const test::ProcessResult b =
      test::runCommand(simulate(args + " --compress int8 --error-feedback off --out " + int8), 120);
  INFO(b.output);
  REQUIRE(a.exitCode == 0);
  REQUIRE(b.exitCode == 0);
  CHECK(b.output.find("dpsgd/ring/geo/4p/iid/300ms/int8:256:") != std::string::npos);
  CHECK(bytesPerPeer(int8) < bytesPerPeer(plain) / 2);
  const test::ProcessResult bad =
      test::runCommand(simulate(args + " --compress int9 --out " + outDir("bad")), 120);
  CHECK(bad.exitCode != 0);
  CHECK(bad.output.find("int9") != std::string::npos);
}

}  // namespace
}  // namespace gossamer
